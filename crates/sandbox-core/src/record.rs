//! The record step's seam: what the engine and the front doors tell the audit log.

use crate::{ExecutionRequest, ExecutionResult};

/// A record could not be written durably; the cause (the store's error) is the source.
#[derive(Debug, thiserror::Error)]
#[error("the audit record could not be written")]
pub struct RecordError(#[source] pub Box<dyn std::error::Error + Send + Sync>);

impl RecordError {
    /// This error and its causes, outermost first, joined by `: ` (for logs and internal-error messages).
    pub fn chain(&self) -> String {
        std::iter::successors(Some(self as &dyn std::error::Error), |e| e.source()).map(ToString::to_string).collect::<Vec<_>>().join(": ")
    }
}

/// Durable records of executions. `begin` runs before anything is prepared and `finish` after
/// clean-up; an error from either fails the execution (it never runs unrecorded).
/// Implementations must be cheap to call concurrently.
pub trait Recorder: Send + Sync {
    /// An execution with id `execution_id` was received from `caller`; called before admission.
    /// Errors: [`RecordError`]; the execution then ends as `internal_error` without running.
    fn begin(&self, execution_id: &str, caller: &str, request: &ExecutionRequest) -> Result<(), RecordError>;
    /// The final result (rejections by admission included).
    /// Errors: [`RecordError`]; the caller sees `internal_error`.
    fn finish(&self, caller: &str, result: &ExecutionResult) -> Result<(), RecordError>;
    /// A request refused before it ran (authentication, profile permission, admission,
    /// availability, queue, body), recorded under the fresh id `execution_id`: `code` and
    /// `message` say why; `request` is absent when the body was unreadable.
    /// Errors: [`RecordError`] (the refusal stands either way).
    fn rejected(&self, execution_id: &str, caller: &str, request: Option<&ExecutionRequest>, code: &str, message: &str) -> Result<(), RecordError>;
}

/// A [`Recorder`] that keeps nothing.
pub struct NoRecorder;

impl Recorder for NoRecorder {
    fn begin(&self, _: &str, _: &str, _: &ExecutionRequest) -> Result<(), RecordError> {
        Ok(())
    }
    fn finish(&self, _: &str, _: &ExecutionResult) -> Result<(), RecordError> {
        Ok(())
    }
    fn rejected(&self, _: &str, _: &str, _: Option<&ExecutionRequest>, _: &str, _: &str) -> Result<(), RecordError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
