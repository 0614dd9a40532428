//! [`AuditLog`]: the engine's [`Recorder`] on the SQLite store, building event bodies from
//! requests and results within the [`Caps`].

use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use sandbox_core::record::{RecordError, Recorder};
use sandbox_core::wire::FileContent;
use sandbox_core::{ExecutionRequest, ExecutionResult};
use sha2::{Digest, Sha256};

use crate::{capped_text, AuditError, AuditStore, Caps, EventKind, NewEvent, SCHEMA_VERSION};

/// The process that owns an execution: pid and start time (clock ticks since boot, from
/// `/proc/<pid>/stat`), so a recycled pid is not mistaken for the owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks since boot.
    pub start: u64,
}

impl Owner {
    /// This process.
    pub fn current() -> Self {
        let pid = std::process::id();
        Self { pid, start: process_start(pid).unwrap_or(0) }
    }

    /// Whether this owner is still running.
    pub fn alive(&self) -> bool {
        process_start(self.pid) == Some(self.start)
    }
}

/// Field 22 (starttime) of `/proc/<pid>/stat`.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = &stat[stat.rfind(')')? + 2..];
    after_comm.split(' ').nth(19)?.parse().ok()
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The audit log: a store behind a lock, and the [`Recorder`] on it.
pub struct AuditLog {
    store: Mutex<Box<dyn AuditStore>>,
    caps: Caps,
    owner: Owner,
}

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
        Ok(Self { store: Mutex::new(crate::open_store(url, data_dir)?), caps, owner: Owner::current() })
    }

    /// The store, for queries.
    pub fn store(&self) -> MutexGuard<'_, Box<dyn AuditStore>> {
        self.store.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends `interrupted` for every unfinished execution whose owning process is gone (a
    /// service that died mid-run); returns their ids. Executions of live processes (another
    /// `sandbox run` sharing the file) are left alone.
    /// Errors: [`AuditError::Db`].
    pub fn recover(&self) -> Result<Vec<String>, AuditError> {
        let mut store = self.store();
        let mut ids = Vec::new();
        for e in store.unfinished()? {
            let owner = Owner {
                pid: e.body["owner"]["pid"].as_u64().and_then(|p| u32::try_from(p).ok()).unwrap_or(0),
                start: e.body["owner"]["start"].as_u64().unwrap_or(0),
            };
            if owner.alive() {
                continue;
            }
            store.append(&NewEvent {
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
            "owner": { "pid": self.owner.pid, "start": self.owner.start },
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
            let files: serde_json::Map<String, serde_json::Value> = r
                .files
                .iter()
                .map(|(n, f)| (n.clone(), serde_json::json!({ "size": f.size, "sha256": f.sha256, "mimeType": f.mime_type })))
                .collect();
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

impl Recorder for AuditLog {
    fn begin(&self, execution_id: &str, caller: &str, request: &ExecutionRequest) -> Result<(), RecordError> {
        self.append(NewEvent {
            execution_id: execution_id.into(),
            kind: EventKind::Begin,
            at_ms: now_ms(),
            caller: caller.into(),
            profile: request.profile.clone(),
            language: request.language.clone(),
            status: "running".into(),
            body: self.request_body(request),
        })
    }

    fn finish(&self, caller: &str, result: &ExecutionResult) -> Result<(), RecordError> {
        self.append(NewEvent {
            execution_id: result.execution_id.clone(),
            kind: EventKind::Finish,
            at_ms: now_ms(),
            caller: caller.into(),
            profile: result.profile.clone(),
            language: result.language.map(|l| l.as_str().to_owned()),
            status: result.status.as_str().into(),
            body: self.result_body(result),
        })
    }

    fn rejected(&self, execution_id: &str, caller: &str, request: Option<&ExecutionRequest>, code: &str, message: &str) -> Result<(), RecordError> {
        let mut body = request.map_or_else(|| serde_json::json!({ "schemaVersion": SCHEMA_VERSION }), refusal_body);
        if let Some(o) = body.as_object_mut() {
            o.insert("error".into(), serde_json::json!({ "type": truncated(code, REFUSAL_NAME_MAX_BYTES), "message": truncated(message, REFUSAL_MESSAGE_MAX_BYTES) }));
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
