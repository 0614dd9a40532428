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

/// A limit of running executions shared by every caller name of one API key (`key:NAME` over
/// HTTP, `mcp:key:NAME/...` over MCP).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// What the executions are counted under: `key:NAME`.
    pub key: String,
    /// At most this many run at once (over every node sharing the audit database).
    pub max_concurrent: u32,
}

/// Why [`Recorder::begin`] did not record an execution as running.
#[derive(Debug, thiserror::Error)]
pub enum BeginError {
    /// `key` already has `running` executions running, its `max` (over every node).
    #[error("{key} already has {running} executions running, its max_concurrent is {max}; retry later")]
    ConcurrencyLimited {
        /// The quota's key (`key:NAME`).
        key: String,
        /// Executions of it running now.
        running: u32,
        /// Its limit.
        max: u32,
    },
    /// The record could not be written (the database is unreachable or refused it).
    #[error(transparent)]
    Record(#[from] RecordError),
}

/// Durable records of executions. `begin` runs before anything is prepared and `finish` after
/// clean-up; an error from either fails the execution (it never runs unrecorded).
/// Implementations must be cheap to call concurrently.
pub trait Recorder: Send + Sync {
    /// An execution with id `execution_id` of `caller` is about to run (it holds a slot): records
    /// it as running and, with a shared database, takes its lease. `quota` is the caller's
    /// limit of running executions (its API key's `max_concurrent`), checked in the same step
    /// so that no two nodes can both pass it.
    /// Errors: [`BeginError::ConcurrencyLimited`] (nothing recorded; the execution is refused
    /// `concurrency_limited`) or [`BeginError::Record`] (the execution is refused
    /// `audit_unavailable`: nothing runs unrecorded).
    fn begin(&self, execution_id: &str, caller: &str, request: &ExecutionRequest, quota: Option<&Quota>) -> Result<(), BeginError>;
    /// An execution that began will never get its `finish` (its future was dropped: the client
    /// went away). The recorder stops vouching for it (a lease is no longer renewed, so it
    /// expires and the execution is marked `interrupted`); it must not block.
    fn abandoned(&self, _execution_id: &str) {}
    /// The final result (rejections by admission included).
    /// Errors: [`RecordError`]; the caller sees `internal_error`.
    fn finish(&self, caller: &str, result: &ExecutionResult) -> Result<(), RecordError>;
    /// A request refused before it ran (authentication, profile permission, admission,
    /// availability, queue, body), recorded under the fresh id `execution_id`: `code` and
    /// `message` say why; `request` is absent when the body was unreadable.
    /// Errors: [`RecordError`] (the refusal stands either way).
    fn rejected(&self, execution_id: &str, caller: &str, request: Option<&ExecutionRequest>, code: &str, message: &str) -> Result<(), RecordError>;
    /// Whether results kept with [`Recorder::keep_result`] are shared by every node (a shared
    /// database); `false` (the default): the caller keeps them in its own memory.
    fn shares_results(&self) -> bool {
        false
    }
    /// Whether the log is a file on this host (SQLite): an append is local writes and a sync,
    /// milliseconds unless another process holds its write lock (up to its busy timeout, 10
    /// s); `false` (the default): it may be a network away and wait without bound (PostgreSQL).
    /// `sandbox run` writes a local log's `finish` on its own thread.
    fn local(&self) -> bool {
        false
    }
    /// Keeps `result` for `owner` (a caller name) so that a later call reaching any node can
    /// read it (MCP's `resources/read` of an execution's files and streams). `bytes` is its
    /// size as counted against `keep_bytes`; the oldest kept results beyond `keep_results`
    /// results or `keep_bytes` bytes in all are dropped. Blocks (a database round trip).
    /// Errors: [`RecordError`]; the default keeps nothing.
    fn keep_result(&self, _owner: &str, _result: &ExecutionResult, _bytes: u64, _keep_results: u64, _keep_bytes: u64) -> Result<(), RecordError> {
        Ok(())
    }
    /// The result `execution_id` kept for `owner`, if it still is. Blocks.
    /// Errors: [`RecordError`]; the default has none.
    fn kept_result(&self, _owner: &str, _execution_id: &str) -> Result<Option<ExecutionResult>, RecordError> {
        Ok(None)
    }
    /// The results kept for `owner`, newest first. Blocks.
    /// Errors: [`RecordError`]; the default has none.
    fn kept_results(&self, _owner: &str) -> Result<Vec<ExecutionResult>, RecordError> {
        Ok(Vec::new())
    }
}

/// A [`Recorder`] that keeps nothing.
pub struct NoRecorder;

impl Recorder for NoRecorder {
    fn begin(&self, _: &str, _: &str, _: &ExecutionRequest, _: Option<&Quota>) -> Result<(), BeginError> {
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
