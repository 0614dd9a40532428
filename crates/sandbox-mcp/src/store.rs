//! Recent results kept in memory so their output files and whole stdout/stderr can be read as
//! resources (`sandbox://executions/{id}/files/{name}`, `.../stdout`, `.../stderr`) after the
//! tool result, which holds only what fits its size budget.
//!
//! Bounded: at most [`KEEP_RESULTS`] results and [`KEEP_BYTES`] bytes; the oldest go first.
//! Each result is readable only by the caller that ran it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

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
    /// Keeps `result` for `owner` (the principal's audit name), if it has anything to read.
    pub fn keep(&self, owner: &str, result: &ExecutionResult) {
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
        let mut kept = self.kept.lock().expect("store lock");
        kept.push_back(Kept { owner: owner.to_owned(), result: Arc::new(result.clone()), bytes });
        let mut total: usize = kept.iter().map(|k| k.bytes).sum();
        while kept.len() > KEEP_RESULTS || total > KEEP_BYTES {
            let Some(old) = kept.pop_front() else { break };
            total -= old.bytes;
        }
    }

    /// The result `execution_id` if `owner` ran it and it is still kept.
    pub fn get(&self, owner: &str, execution_id: &str) -> Option<Arc<ExecutionResult>> {
        let kept = self.kept.lock().expect("store lock");
        kept.iter().find(|k| k.owner == owner && k.result.execution_id == execution_id).map(|k| k.result.clone())
    }

    /// `owner`'s kept results, newest first.
    pub fn list(&self, owner: &str) -> Vec<Arc<ExecutionResult>> {
        let kept = self.kept.lock().expect("store lock");
        kept.iter().rev().filter(|k| k.owner == owner).map(|k| k.result.clone()).collect()
    }
}
