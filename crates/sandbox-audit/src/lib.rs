//! The audit log: every execution, rejection and interruption as append-only events in one
//! SQLite file (WAL), each event hash-chained to the one before it so that `verify` names the
//! first event that was changed, removed or reordered.
//!
//! An execution is a `begin` event written before the program starts (write-ahead) and a
//! `finish` event when it ends; a service that died in between leaves the `begin` alone, and
//! the next start appends `interrupted`. A request refused before an id could run is one
//! `rejected` event. Records ([`AuditRecord`]) are those events joined by execution id.

pub mod chain;
pub mod head;
mod postgres_store;
mod recorder;
mod sqlite;
mod store;
pub mod time;

use serde::{Deserialize, Serialize};

pub use chain::{event_hash, GENESIS};
pub use postgres_store::PostgresStore;
pub use recorder::{AuditLog, Owner, REFUSAL_CODE_MAX_BYTES, REFUSAL_MESSAGE_MAX_BYTES, REFUSAL_NAMES_MAX, REFUSAL_NAME_MAX_BYTES};
pub use sqlite::SqliteStore;
pub use store::{open_store, AuditStore, Begin, Lease};

/// Version of the event body format, stored in every event.
pub const SCHEMA_VERSION: u32 = 1;

/// Syncs the directory holding `path` (fdatasync(2) of the directory): makes a file's new
/// entry in it durable, which fsync(2) of the file alone does not promise ("an explicit fsync()
/// on a file descriptor for the directory is also needed").
/// Errors: the directory cannot be opened or synced.
pub(crate) fn sync_parent_dir(path: &std::path::Path) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    std::fs::File::open(dir)?.sync_data()
}

/// A failure of the audit store.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The database refused an operation.
    #[error("audit database {op} failed")]
    Db {
        /// What was attempted.
        op: &'static str,
        /// The database's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The head file (or its lock) could not be read, written or locked.
    #[error("audit head file {0}")]
    Head(std::path::PathBuf, #[source] std::io::Error),
    /// The head file holds something other than a head mark.
    #[error("audit head file {0} is not a head mark")]
    HeadCorrupt(std::path::PathBuf, #[source] serde_json::Error),
    /// The data directory could not be created, or synced after the log's files were created
    /// in it.
    #[error("cannot create or sync the audit log's directory {0}")]
    Io(std::path::PathBuf, #[source] std::io::Error),
    /// The SQLite file could not be made readable by its owner only (mode 0600).
    #[error("cannot make the audit log {0} private (mode 0600)")]
    Private(std::path::PathBuf, #[source] std::io::Error),
    /// PostgreSQL refused an operation.
    #[error("audit database (postgres) {op} failed")]
    Pg {
        /// What was attempted.
        op: &'static str,
        /// The database's error.
        #[source]
        source: postgres::Error,
    },
    /// The database answered something its schema rules out: the chain's last event without
    /// a sequence number or a hash (both `NOT NULL`).
    #[error("audit database (postgres) answered the chain's last event without its {0}")]
    Malformed(&'static str),
    /// An event body could not be encoded or decoded.
    #[error("audit event body is not valid JSON")]
    Json(#[from] serde_json::Error),
    /// A stored event has a kind this version does not know (a newer writer, or tampering).
    #[error("audit event {seq} has unknown kind {kind:?}")]
    UnknownKind {
        /// The event's sequence number.
        seq: i64,
        /// The kind as stored.
        kind: String,
    },
}

/// Kinds of events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// An execution was admitted or refused by the engine; written before anything runs.
    Begin,
    /// An execution ended (any status, rejections by the engine included).
    Finish,
    /// An execution's service died before `finish`; found at the next start.
    Interrupted,
    /// A request refused before it reached the engine (authentication, queue, body).
    Rejected,
    /// Retention removed the events up to `prunedThroughSeq`; `prunedHash` is the hash of the
    /// last one, so the chain still verifies from the first event kept.
    Checkpoint,
}

impl EventKind {
    /// The kind stored as `kind` in event `seq`.
    /// Errors: [`AuditError::UnknownKind`]; an unknown kind is never read as another one.
    pub fn parse(kind: &str, seq: i64) -> Result<Self, AuditError> {
        match kind {
            "begin" => Ok(Self::Begin),
            "finish" => Ok(Self::Finish),
            "interrupted" => Ok(Self::Interrupted),
            "rejected" => Ok(Self::Rejected),
            "checkpoint" => Ok(Self::Checkpoint),
            _ => Err(AuditError::UnknownKind { seq, kind: kind.to_owned() }),
        }
    }

    /// `begin`, `finish`, `interrupted` or `rejected`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Begin => "begin",
            Self::Finish => "finish",
            Self::Interrupted => "interrupted",
            Self::Rejected => "rejected",
            Self::Checkpoint => "checkpoint",
        }
    }
}

/// One event to append. `body` is the event's JSON detail.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// The execution id (a fresh id for a `rejected` event).
    pub execution_id: String,
    /// The kind.
    pub kind: EventKind,
    /// When, in ms since the Unix epoch.
    pub at_ms: i64,
    /// Who asked (API key name, `cli:<user>`, `mcp:<client>`, `anonymous`).
    pub caller: String,
    /// Profile named in the request.
    pub profile: String,
    /// Language, when known.
    pub language: Option<String>,
    /// `running` for `begin`, the final status for `finish`, `interrupted`, `rejected`.
    pub status: String,
    /// Detail (request summary, result, reason), JSON.
    pub body: serde_json::Value,
}

/// A stored event with its place in the chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredEvent {
    /// Position in the chain, from 1, without gaps.
    pub seq: i64,
    /// The execution id.
    pub execution_id: String,
    /// The kind.
    pub kind: EventKind,
    /// When, in ms since the Unix epoch.
    pub at_ms: i64,
    /// Who asked.
    pub caller: String,
    /// Profile.
    pub profile: String,
    /// Language.
    pub language: Option<String>,
    /// Status at this event.
    pub status: String,
    /// Detail, JSON.
    pub body: serde_json::Value,
    /// Hash of the previous event ([`GENESIS`] for the first).
    pub prev_hash: String,
    /// SHA-256 over this event's fields and `prev_hash`, hex.
    pub hash: String,
}

/// One execution as the log knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// Execution id.
    pub execution_id: String,
    /// Where the execution is in its life.
    pub state: RecordState,
    /// Final status (`ok`, `error`, `timeout`, ..., `rejected`, `interrupted`), or `running`.
    pub status: String,
    /// Who asked.
    pub caller: String,
    /// Profile.
    pub profile: String,
    /// Language.
    pub language: Option<String>,
    /// When the request was received, ms since the Unix epoch.
    pub received_at_ms: i64,
    /// When it ended, if it has.
    pub finished_at_ms: Option<i64>,
    /// The request as recorded (code capped, file digests, ...).
    pub request: serde_json::Value,
    /// The outcome as recorded (output capped, file digests, usage, timing, error), if ended.
    pub result: Option<serde_json::Value>,
    /// Sequence number of the first event (the listing cursor).
    pub seq: i64,
}

/// Where an execution recorded in the log is: the kinds of its first and last events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordState {
    /// Begun and not ended (or its service died and recovery has not run yet).
    Running,
    /// Ended with a `finish` event (any status).
    Finished,
    /// Its service died before `finish`; recovery marked it.
    Interrupted,
    /// Refused before it reached the engine (authentication, queue, body).
    Rejected,
}

impl RecordState {
    /// The wire name: `running`, `finished`, `interrupted` or `rejected`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Finished => "finished",
            Self::Interrupted => "interrupted",
            Self::Rejected => "rejected",
        }
    }
}

/// Every status a record can have: the final [`sandbox_core::Status`] values, and `interrupted`
/// (the service died during the run) and `running` (not finished yet).
pub const STATUSES: &[&str] = &["ok", "error", "timeout", "memory_limit", "output_limit", "rejected", "internal_error", "interrupted", "running"];

/// Filters of a listing; `None` matches everything. Newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only this profile.
    pub profile: Option<String>,
    /// Only this final status.
    pub status: Option<String>,
    /// Only this language.
    pub language: Option<String>,
    /// Only this caller (exact).
    pub caller: Option<String>,
    /// Only callers whose name starts with this (`key:`, `mcp:key:agent-1/`).
    pub caller_prefix: Option<String>,
    /// Received at or after, ms since the epoch.
    pub since_ms: Option<i64>,
    /// Received before, ms since the epoch.
    pub until_ms: Option<i64>,
    /// Only records older than this cursor (a previous page's `next_cursor`).
    pub before_seq: Option<i64>,
    /// Page size (at most 1000).
    pub limit: u32,
}

/// One page of records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Page {
    /// Records, newest first.
    pub records: Vec<AuditRecord>,
    /// Pass as `before_seq` to get the next page; absent on the last page.
    pub next_cursor: Option<i64>,
}

/// The outcome of walking the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    /// Events checked.
    pub events: u64,
    /// The first broken place, if any.
    pub broken: Option<Broken>,
    /// The head mark checked (from the head file, [`head`]); `None` when there is none (no
    /// append on this host yet, or a log written before head files existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<head::HeadMark>,
}

/// Where and how the chain breaks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Broken {
    /// Sequence number of the first event that does not check out.
    pub seq: i64,
    /// Its execution id.
    pub execution_id: String,
    /// `changed` (its hash does not match its content), `removed` (an event before it is
    /// missing), `reordered` (it does not follow the event before it), `truncated` (the newest
    /// event the head file names is gone: events at the end were removed) or `rewritten`
    /// (another event holds the place the head file names).
    pub problem: String,
}

/// What [`SqliteStore::prune`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PruneReport {
    /// Events removed.
    pub events: u64,
    /// The last sequence number removed (0: nothing was).
    pub through_seq: i64,
}

/// Caps on what one event stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Code kept, in bytes (the full length and sha256 are kept too).
    pub code_max_bytes: usize,
    /// Stdout and stderr kept each, in bytes.
    pub output_max_bytes: usize,
}

impl Default for Caps {
    fn default() -> Self {
        Self { code_max_bytes: 256 << 10, output_max_bytes: 256 << 10 }
    }
}

/// Keeps at most `max` bytes of `text` (on a character boundary), with the full length and
/// SHA-256 when something was cut: `{ "text", "bytes", "sha256", "truncated" }`.
pub fn capped_text(text: &str, max: usize) -> serde_json::Value {
    use sha2::Digest;
    if text.len() <= max {
        return serde_json::json!({ "text": text, "bytes": text.len(), "truncated": false });
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    serde_json::json!({
        "text": &text[..cut],
        "bytes": text.len(),
        "sha256": hex::encode(sha2::Sha256::digest(text.as_bytes())),
        "truncated": true,
    })
}
