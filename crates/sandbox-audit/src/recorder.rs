//! [`AuditLog`]: the engine's [`Recorder`] on the SQLite store, building event bodies from
//! requests and results within the [`Caps`].

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use sandbox_core::record::{BeginError, Quota, RecordError, Recorder};
use sandbox_core::wire::FileContent;
use sandbox_core::{ExecutionRequest, ExecutionResult};
use sha2::{Digest, Sha256};

use crate::{capped_text, AuditError, AuditStore, Begin, Caps, EventKind, Lease, NewEvent, SCHEMA_VERSION};

/// The process that owns an execution (pid and start time; the runtime's, shared with the
/// engine's execution directories).
pub use sandbox_runtime::process::Owner;

pub(crate) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The audit log: a store behind a lock, and the [`Recorder`] on it.
///
/// It keeps the executions of this process that began and have not ended (`live`, with their
/// quota keys): with SQLite it counts quotas from them; with PostgreSQL a thread started by
/// [`AuditLog::with_node`] renews their leases every third of the lease's life and reaps the
/// expired leases of every node.
pub struct AuditLog {
    store: Arc<Mutex<Box<dyn AuditStore>>>,
    caps: Caps,
    owner: Owner,
    /// Whether the store holds leases (PostgreSQL).
    leases: bool,
    node_id: String,
    lease_ttl_ms: u64,
    /// Executions begun here and not ended: id → quota key.
    live: Arc<Mutex<HashMap<String, Option<String>>>>,
    /// Dropped with the log, which ends the lease thread.
    _stop_leases: Option<std::sync::mpsc::Sender<()>>,
}

/// The node id of a log that was not given one ([`AuditLog::with_node`]).
pub const LOCAL_NODE: &str = "local";

/// Shortest lease accepted, in ms (a renewal every third of it must have time for a round trip).
pub const LEASE_TTL_MIN_MS: u64 = 300;

impl AuditLog {
    /// Opens `<data_dir>/audit.db` (created if missing).
    /// Errors: [`AuditError::Db`].
    pub fn open(data_dir: &Path, caps: Caps) -> Result<Self, AuditError> {
        Self::open_url(None, data_dir, caps)
    }

    /// Opens the store `url` names (PostgreSQL), or `<data_dir>/audit.db` without one.
    /// Errors: the backend's.
    pub fn open_url(url: Option<&str>, data_dir: &Path, caps: Caps) -> Result<Self, AuditError> {
        // SQLite's file and every backend's head file live there.
        std::fs::create_dir_all(data_dir).map_err(|e| AuditError::Io(data_dir.to_owned(), e))?;
        let store = crate::open_store(url, data_dir)?;
        Ok(Self {
            leases: store.has_leases(),
            store: Arc::new(Mutex::new(store)),
            caps,
            owner: Owner::current(),
            node_id: LOCAL_NODE.into(),
            lease_ttl_ms: 15_000,
            live: Arc::default(),
            _stop_leases: None,
        })
    }

    /// Names this process's node `node_id` (it owns the leases of the executions begun here) and,
    /// when the store holds leases (PostgreSQL), starts the thread that renews them every
    /// `lease_ttl_ms / 3` and reaps every node's expired leases (marking their executions
    /// `interrupted`). `lease_ttl_ms` is raised to `LEASE_TTL_MIN_MS` if below. The thread ends
    /// when the log is dropped.
    #[must_use]
    pub fn with_node(mut self, node_id: impl Into<String>, lease_ttl_ms: u64) -> Self {
        self.node_id = node_id.into();
        self.lease_ttl_ms = lease_ttl_ms.max(LEASE_TTL_MIN_MS);
        if self.leases {
            let (stop, stopped) = std::sync::mpsc::channel::<()>();
            let (store, live, node, ttl) = (self.store.clone(), self.live.clone(), self.node_id.clone(), self.lease_ttl_ms);
            let spawned = std::thread::Builder::new().name("audit-leases".into()).spawn(move || lease_loop(&store, &live, &node, ttl, &stopped));
            match spawned {
                Ok(_) => self._stop_leases = Some(stop),
                Err(e) => tracing::error!(error = %e, "cannot start the lease thread: leases of this node will expire"),
            }
        }
        self
    }

    /// This node's id (`LOCAL_NODE` unless [`AuditLog::with_node`] named it).
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// Executions begun by this process that have not ended.
    pub fn live(&self) -> usize {
        lock(&self.live).len()
    }

    /// The store, for queries.
    pub fn store(&self) -> MutexGuard<'_, Box<dyn AuditStore>> {
        lock(&self.store)
    }

    /// Renews this node's leases and reaps expired ones now (what the lease thread does every
    /// third of a lease); returns the executions it marked `interrupted`.
    /// Errors: the backend's.
    pub fn tend_leases(&self) -> Result<Vec<String>, AuditError> {
        tend(&self.store, &self.live, &self.node_id, self.lease_ttl_ms)
    }

    /// Appends `interrupted` for every unfinished execution of this node whose owning process
    /// is gone (a service that died mid-run); returns their ids. Executions of live processes
    /// (another `sandbox run` sharing the file) are left alone, and so are those of other nodes
    /// (their leases resolve them).
    /// Errors: [`AuditError::Db`].
    pub fn recover(&self) -> Result<Vec<String>, AuditError> {
        let mut store = self.store();
        let mut ids = Vec::new();
        for e in store.unfinished()? {
            if e.body["owner"]["node"].as_str().is_some_and(|n| n != self.node_id) {
                continue;
            }
            let owner = Owner {
                pid: e.body["owner"]["pid"].as_u64().and_then(|p| u32::try_from(p).ok()).unwrap_or(0),
                start: e.body["owner"]["start"].as_u64().unwrap_or(0),
            };
            if owner.alive() {
                continue;
            }
            store.append_end(&NewEvent {
                execution_id: e.execution_id.clone(),
                kind: EventKind::Interrupted,
                at_ms: now_ms(),
                caller: e.caller.clone(),
                profile: e.profile.clone(),
                language: e.language.clone(),
                status: "interrupted".into(),
                body: serde_json::json!({ "schemaVersion": SCHEMA_VERSION, "reason": "the service ended before the execution finished" }),
            })?;
            ids.push(e.execution_id);
        }
        Ok(ids)
    }

    /// Applies retention: removes events older than `retention_days` and beyond
    /// `retention_max_events` (0 disables either), signed off by a checkpoint (see
    /// [`crate::SqliteStore::prune`]).
    /// Errors: [`AuditError::Db`].
    pub fn apply_retention(&self, retention_days: u32, retention_max_events: u64) -> Result<crate::PruneReport, AuditError> {
        let now = now_ms();
        let before = (retention_days > 0).then(|| now - i64::from(retention_days) * 86_400_000);
        let keep = (retention_max_events > 0).then_some(retention_max_events);
        if before.is_none() && keep.is_none() {
            return Ok(crate::PruneReport { events: 0, through_seq: 0 });
        }
        self.store().prune(before, keep, now)
    }

    fn request_body(&self, r: &ExecutionRequest) -> serde_json::Value {
        let files: Vec<serde_json::Value> = r
            .files
            .iter()
            .map(|(name, content)| {
                let bytes = match content {
                    FileContent::Text(t) => Some(t.as_bytes().to_vec()),
                    FileContent::Base64 { base64 } => base64::engine::general_purpose::STANDARD.decode(base64.trim()).ok(),
                };
                match bytes {
                    Some(b) => serde_json::json!({ "name": name, "bytes": b.len(), "sha256": hex::encode(Sha256::digest(&b)) }),
                    None => serde_json::json!({ "name": name, "invalidBase64": true }),
                }
            })
            .collect();
        let mut body = serde_json::json!({
            "schemaVersion": SCHEMA_VERSION,
            "harness": r.harness,
            "timeoutMs": r.timeout,
            "code": capped_text(&r.code, self.caps.code_max_bytes),
            "files": files,
            "outputs": r.outputs,
            // Values may be secrets: only the names are kept.
            "envKeys": r.env.keys().collect::<Vec<_>>(),
            "stdin": r.stdin.is_some(),
            "owner": { "pid": self.owner.pid, "start": self.owner.start, "node": self.node_id },
        });
        // The function harness's input: whole within the code cap, else prefix, length, sha256.
        if let (Some(input), Some(o)) = (&r.input, body.as_object_mut()) {
            let json = input.to_string();
            if json.len() > self.caps.code_max_bytes {
                o.insert("inputCapped".into(), capped_text(&json, self.caps.code_max_bytes));
            } else {
                o.insert("input".into(), input.clone());
            }
        }
        body
    }

    fn result_body(&self, r: &ExecutionResult) -> serde_json::Value {
        let mut v = serde_json::to_value(r).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("schemaVersion".into(), SCHEMA_VERSION.into());
            o.insert("stdout".into(), capped_text(&r.stdout, self.caps.output_max_bytes));
            o.insert("stderr".into(), capped_text(&r.stderr, self.caps.output_max_bytes));
            o.shift_remove("stdoutBase64");
            o.shift_remove("stderrBase64");
            let files: serde_json::Map<String, serde_json::Value> =
                r.files.iter().map(|(n, f)| (n.clone(), serde_json::json!({ "size": f.size, "sha256": f.sha256, "mimeType": f.mime_type }))).collect();
            o.insert("files".into(), files.into());
            // The function harness's value, kept whole within the output cap; past it, the
            // serialized JSON's prefix with its full length and sha256 (`returnDataCapped`).
            if let Some(data) = &r.return_data {
                let json = data.to_string();
                if json.len() > self.caps.output_max_bytes {
                    o.shift_remove("returnData");
                    o.insert("returnDataCapped".into(), capped_text(&json, self.caps.output_max_bytes));
                }
            }
        }
        v
    }

    fn append(&self, e: NewEvent) -> Result<(), RecordError> {
        self.store().append(&e).map(|_| ()).map_err(|e| RecordError(Box::new(e)))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The lease thread: every third of a lease, [`tend`], until `stopped` says the log is gone.
fn lease_loop(
    store: &Mutex<Box<dyn AuditStore>>,
    live: &Mutex<HashMap<String, Option<String>>>,
    node: &str,
    ttl_ms: u64,
    stopped: &std::sync::mpsc::Receiver<()>,
) {
    while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(Duration::from_millis(ttl_ms / 3)) {
        match tend(store, live, node, ttl_ms) {
            Ok(ids) if !ids.is_empty() => tracing::warn!(interrupted = ids.len(), "executions of a node that stopped renewing its leases marked interrupted"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot renew or reap execution leases"),
        }
    }
}

/// Renews the leases of `live` (this node's running executions) and reaps expired ones.
fn tend(store: &Mutex<Box<dyn AuditStore>>, live: &Mutex<HashMap<String, Option<String>>>, node: &str, ttl_ms: u64) -> Result<Vec<String>, AuditError> {
    let ids: Vec<String> = lock(live).keys().cloned().collect();
    let mut store = lock(store);
    if !ids.is_empty() {
        store.renew_leases(node, &ids, ttl_ms)?;
    }
    store.reap_expired_leases()
}

impl Recorder for AuditLog {
    fn begin(&self, execution_id: &str, caller: &str, request: &ExecutionRequest, quota: Option<&Quota>) -> Result<(), BeginError> {
        {
            let mut live = lock(&self.live);
            // One node (SQLite): the quota counts this process's running executions.
            if let (false, Some(q)) = (self.leases, quota) {
                let running = live.values().filter(|k| k.as_deref() == Some(q.key.as_str())).count();
                let running = u32::try_from(running).unwrap_or(u32::MAX);
                if running >= q.max_concurrent {
                    return Err(BeginError::ConcurrencyLimited { key: q.key.clone(), running, max: q.max_concurrent });
                }
            }
            live.insert(execution_id.to_owned(), quota.map(|q| q.key.clone()));
        }
        let e = NewEvent {
            execution_id: execution_id.into(),
            kind: EventKind::Begin,
            at_ms: now_ms(),
            caller: caller.into(),
            profile: request.profile.clone(),
            language: request.language.clone(),
            status: "running".into(),
            body: self.request_body(request),
        };
        let appended = self.store().append_begin(&e, &Lease { node_id: &self.node_id, ttl_ms: self.lease_ttl_ms, quota });
        match appended {
            Ok(Begin::Appended(_)) => Ok(()),
            Ok(Begin::Limited { running }) => {
                lock(&self.live).remove(execution_id);
                let q = quota.expect("only a quota limits");
                Err(BeginError::ConcurrencyLimited { key: q.key.clone(), running, max: q.max_concurrent })
            }
            Err(e) => {
                lock(&self.live).remove(execution_id);
                Err(BeginError::Record(RecordError(Box::new(e))))
            }
        }
    }

    fn abandoned(&self, execution_id: &str) {
        lock(&self.live).remove(execution_id);
    }

    fn finish(&self, caller: &str, result: &ExecutionResult) -> Result<(), RecordError> {
        // Whatever the write does: a lease left behind expires and its reaper ends the record.
        let _ended = lock(&self.live).remove(&result.execution_id);
        let e = NewEvent {
            execution_id: result.execution_id.clone(),
            kind: EventKind::Finish,
            at_ms: now_ms(),
            caller: caller.into(),
            profile: result.profile.clone(),
            language: result.language.map(|l| l.as_str().to_owned()),
            status: result.status.as_str().into(),
            body: self.result_body(result),
        };
        self.store().append_end(&e).map(|_| ()).map_err(|e| RecordError(Box::new(e)))
    }

    fn rejected(&self, execution_id: &str, caller: &str, request: Option<&ExecutionRequest>, code: &str, message: &str) -> Result<(), RecordError> {
        let mut body = request.map_or_else(|| serde_json::json!({ "schemaVersion": SCHEMA_VERSION }), refusal_body);
        if let Some(o) = body.as_object_mut() {
            o.insert(
                "error".into(),
                serde_json::json!({ "type": truncated(code, REFUSAL_NAME_MAX_BYTES), "message": truncated(message, REFUSAL_MESSAGE_MAX_BYTES) }),
            );
        }
        self.append(NewEvent {
            execution_id: execution_id.into(),
            kind: EventKind::Rejected,
            at_ms: now_ms(),
            caller: truncated(caller, REFUSAL_NAME_MAX_BYTES),
            profile: request.map(|r| truncated(&r.profile, REFUSAL_NAME_MAX_BYTES)).unwrap_or_default(),
            language: request.and_then(|r| r.language.as_deref()).map(|l| truncated(l, REFUSAL_NAME_MAX_BYTES)),
            status: "rejected".into(),
            body,
        })
    }

    fn shares_results(&self) -> bool {
        self.leases
    }

    fn local(&self) -> bool {
        !self.leases
    }

    fn keep_result(&self, owner: &str, result: &ExecutionResult, bytes: u64, keep_results: u64, keep_bytes: u64) -> Result<(), RecordError> {
        if !self.leases {
            return Ok(());
        }
        let json = serde_json::to_string(result).map_err(|e| RecordError(Box::new(e)))?;
        self.store().keep_result(owner, &result.execution_id, &json, bytes, keep_results, keep_bytes).map_err(|e| RecordError(Box::new(e)))
    }

    fn kept_result(&self, owner: &str, execution_id: &str) -> Result<Option<ExecutionResult>, RecordError> {
        let json = self.store().kept_result(owner, execution_id).map_err(|e| RecordError(Box::new(e)))?;
        json.map(|j| serde_json::from_str(&j).map_err(|e| RecordError(Box::new(e)))).transpose()
    }

    fn kept_results(&self, owner: &str) -> Result<Vec<ExecutionResult>, RecordError> {
        let all = self.store().kept_results(owner).map_err(|e| RecordError(Box::new(e)))?;
        all.iter().map(|j| serde_json::from_str(j).map_err(|e| RecordError(Box::new(e)))).collect()
    }
}

/// Names (files, outputs, env keys) a refusal's record lists; the rest are only counted.
pub const REFUSAL_NAMES_MAX: usize = 16;
/// Longest name, profile, language, caller or code a refusal's record keeps, in bytes.
pub const REFUSAL_NAME_MAX_BYTES: usize = 128;
/// Longest refusal message a record keeps, in bytes.
pub const REFUSAL_MESSAGE_MAX_BYTES: usize = 1024;
/// Longest prefix of a refused request's code a record keeps, in bytes.
pub const REFUSAL_CODE_MAX_BYTES: usize = 4096;

/// A bounded summary of a request that was refused before admission: whoever sends it need
/// not have passed any check, so the record costs at most a few KiB whatever the request held
/// (counts and sizes, at most [`REFUSAL_NAMES_MAX`] names per list, truncated strings, no
/// decoding or hashing of file contents, no env values).
fn refusal_body(r: &ExecutionRequest) -> serde_json::Value {
    let names = |it: &mut dyn Iterator<Item = &String>| -> Vec<String> { it.take(REFUSAL_NAMES_MAX).map(|n| truncated(n, REFUSAL_NAME_MAX_BYTES)).collect() };
    let sent_bytes = |c: &FileContent| match c {
        FileContent::Text(t) => t.len(),
        FileContent::Base64 { base64 } => base64.len(),
    };
    serde_json::json!({
        "schemaVersion": SCHEMA_VERSION,
        "summary": true,
        "harness": r.harness.as_deref().map(|h| truncated(h, REFUSAL_NAME_MAX_BYTES)),
        "timeoutMs": r.timeout,
        "code": {
            "text": truncated(&r.code, REFUSAL_CODE_MAX_BYTES),
            "bytes": r.code.len(),
            "truncated": r.code.len() > REFUSAL_CODE_MAX_BYTES,
        },
        "files": {
            "count": r.files.len(),
            "bytes": r.files.values().map(sent_bytes).sum::<usize>(),
            "names": names(&mut r.files.keys()),
        },
        "outputs": { "count": r.outputs.len(), "patterns": names(&mut r.outputs.iter()) },
        // Values may be secrets: only (some) names are kept.
        "envKeys": { "count": r.env.len(), "names": names(&mut r.env.keys()) },
        "stdin": r.stdin.as_ref().map(sent_bytes),
        "input": r.input.is_some(),
    })
}

/// `s` cut to at most `max` bytes on a character boundary, with `…` when it was cut.
fn truncated(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &s[..cut])
}

#[cfg(test)]
mod tests;
