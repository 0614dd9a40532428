//! The record step's seam: what the engine and the front doors tell the audit log.

use crate::{ExecutionRequest, ExecutionResult};

/// Durable records of executions. `begin` runs before anything is prepared and `finish` after
/// clean-up; an error from either fails the execution (it never runs unrecorded).
/// Implementations must be cheap to call concurrently.
pub trait Recorder: Send + Sync {
    /// An execution with id `execution_id` was received from `caller`; called before admission.
    /// Errors: a message; the execution then ends as `internal_error` without running.
    fn begin(&self, execution_id: &str, caller: &str, request: &ExecutionRequest) -> Result<(), String>;
    /// The final result (rejections by admission included).
    /// Errors: a message; the caller sees `internal_error`.
    fn finish(&self, caller: &str, result: &ExecutionResult) -> Result<(), String>;
    /// A request refused before it ran (authentication, profile permission, admission,
    /// availability, queue, body), recorded under the fresh id `execution_id`: `code` and
    /// `message` say why; `request` is absent when the body was unreadable.
    /// Errors: a message (the refusal stands either way).
    fn rejected(&self, execution_id: &str, caller: &str, request: Option<&ExecutionRequest>, code: &str, message: &str) -> Result<(), String>;
}

/// A [`Recorder`] that keeps nothing.
pub struct NoRecorder;

impl Recorder for NoRecorder {
    fn begin(&self, _: &str, _: &str, _: &ExecutionRequest) -> Result<(), String> {
        Ok(())
    }
    fn finish(&self, _: &str, _: &ExecutionResult) -> Result<(), String> {
        Ok(())
    }
    fn rejected(&self, _: &str, _: &str, _: Option<&ExecutionRequest>, _: &str, _: &str) -> Result<(), String> {
        Ok(())
    }
}
