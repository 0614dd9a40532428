//! Recent results kept in memory so their output files and whole stdout/stderr can be read as
//! resources (`sandbox://executions/{id}/files/{name}`, `.../stdout`, `.../stderr`) after the
//! tool result, which holds only what fits its size budget.
//!
//! Bounded: at most [`KEEP_RESULTS`] results and [`KEEP_BYTES`] bytes; the oldest go first.
//! Each result is readable only by the caller that ran it.
//!
//! Several nodes: when the audit log is a shared database ([`Recorder::shares_results`],
//! PostgreSQL), each result is also kept there, under the same caps over the whole cluster, so a
//! later `resources/read` that a load balancer sends to another node finds it. The node that ran
//! it answers from memory. Every method may block on that database: call them off the async
//! workers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use sandbox_core::record::Recorder;
use sandbox_core::wire::ExecutionResult;

/// Most results kept.
pub const KEEP_RESULTS: usize = 64;
/// Most bytes (file base64 plus streams) kept over all results.
pub const KEEP_BYTES: usize = 256 << 20;

/// One kept result and who may read it.
struct Kept {
    owner: String,
    result: Arc<ExecutionResult>,
    bytes: usize,
}

/// The store; cheap to share behind an `Arc`.
#[derive(Default)]
pub struct Store {
    kept: Mutex<VecDeque<Kept>>,
}

impl Store {
    /// Keeps `result` for `owner` (the principal's audit name), if it has anything to read, in
    /// memory and, when `recorder` shares results, in the shared database (a failure there is
    /// logged: this node still serves it).
    pub fn keep(&self, recorder: &dyn Recorder, owner: &str, result: &ExecutionResult) {
        if result.execution_id.is_empty() || (result.files.is_empty() && result.stdout.is_empty() && result.stderr.is_empty() && result.return_data.is_none()) {
            return;
        }
        let bytes = result.files.values().map(|f| f.base64.len()).sum::<usize>()
            + result.stdout.len()
            + result.stderr.len()
            + result.stdout_base64.as_ref().map_or(0, String::len)
            + result.stderr_base64.as_ref().map_or(0, String::len)
            + result.return_data.as_ref().map_or(0, |d| d.to_string().len());
        if bytes > KEEP_BYTES {
            return;
        }
        if recorder.shares_results() {
            let as_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
            if let Err(e) = recorder.keep_result(owner, result, as_u64(bytes), as_u64(KEEP_RESULTS), as_u64(KEEP_BYTES)) {
                tracing::error!(error = %e.chain(), execution_id = %result.execution_id, "cannot keep a result in the shared database: only this node can serve its resources");
            }
        }
        let mut kept = self.kept.lock().expect("store lock");
        kept.push_back(Kept { owner: owner.to_owned(), result: Arc::new(result.clone()), bytes });
        let mut total: usize = kept.iter().map(|k| k.bytes).sum();
        while kept.len() > KEEP_RESULTS || total > KEEP_BYTES {
            let Some(old) = kept.pop_front() else { break };
            total -= old.bytes;
        }
    }

    /// The result `execution_id` if `owner` ran it and it is still kept: from this node's
    /// memory, else from the shared database.
    pub fn get(&self, recorder: &dyn Recorder, owner: &str, execution_id: &str) -> Option<Arc<ExecutionResult>> {
        {
            let kept = self.kept.lock().expect("store lock");
            if let Some(k) = kept.iter().find(|k| k.owner == owner && k.result.execution_id == execution_id) {
                return Some(k.result.clone());
            }
        }
        if !recorder.shares_results() {
            return None;
        }
        match recorder.kept_result(owner, execution_id) {
            Ok(r) => r.map(Arc::new),
            Err(e) => {
                tracing::error!(error = %e.chain(), "cannot read a kept result from the shared database");
                None
            }
        }
    }

    /// `owner`'s kept results, newest first: the shared database's when there is one (every
    /// node's), else this node's.
    pub fn list(&self, recorder: &dyn Recorder, owner: &str) -> Vec<Arc<ExecutionResult>> {
        if recorder.shares_results() {
            match recorder.kept_results(owner) {
                Ok(all) => return all.into_iter().map(Arc::new).collect(),
                Err(e) => tracing::error!(error = %e.chain(), "cannot list kept results from the shared database: listing this node's"),
            }
        }
        let kept = self.kept.lock().expect("store lock");
        kept.iter().rev().filter(|k| k.owner == owner).map(|k| k.result.clone()).collect()
    }
}
