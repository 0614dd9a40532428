//! The SQLite backend: one file, WAL mode, migrations by `user_version`.

use std::path::Path;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use crate::chain::RawEvent;
use crate::head::{HeadFile, HeadLock, HeadMark};
use crate::{event_hash, AuditError, AuditRecord, EventKind, ListFilter, NewEvent, Page, PruneReport, RecordState, StoredEvent, VerifyReport, GENESIS};

/// WAL size (pages) past which a commit checkpoints the WAL into the database
/// (`PRAGMA wal_autocheckpoint`; SQLite's default is 1000): a `sandbox run` appends ~8 pages.
const WAL_PAGES: i64 = 64;

/// The WAL of the database at `path`: `<path>-wal`, SQLite's name for it.
fn wal_path(path: &Path) -> std::path::PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    wal.into()
}

/// The (device, inode) of the file at `path`, `None` when there is none.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Makes the WAL's directory entry durable when this open may have created it: the bundled
/// SQLite is built without its own directory syncs (`SQLITE_DISABLE_DIRSYNC`,
/// `.cargo/config.toml`), which sync the directory at every connection's first WAL sync: one
/// more disk flush in every `sandbox run` (a connection of its own), for an entry that is on
/// the disk already but in a log's first open. Synced here: a WAL that was not there before
/// the open, or another file now (a closer deleted it meanwhile), or an empty one (created by a
/// process that died before its own sync here: no commit has written to it since, as every
/// open syncs before its first commit; or emptied by a `TRUNCATE` checkpoint: a harmless
/// extra sync). Without the entry on the disk, a power loss would lose the WAL and every
/// commit it held, synced or not: fsync(2) asks for the directory's sync ("an explicit fsync() on
/// a file descriptor for the directory is also needed"); ext4 (with a journal,
/// or without one: `ext4_sync_parent`), XFS and btrfs also persist a new file's entry at the
/// file's own fsync. The directory's sync also makes the database file's own creation durable
/// (the same open).
/// Errors: [`AuditError::Io`] (the directory could not be opened or synced).
fn sync_dir_if_new(wal: &Path, before: Option<(u64, u64)>) -> Result<(), AuditError> {
    use std::os::unix::fs::MetadataExt as _;
    let kept = std::fs::symlink_metadata(wal).is_ok_and(|m| m.len() > 0 && before == Some((m.dev(), m.ino())));
    if kept {
        return Ok(());
    }
    crate::sync_parent_dir(wal).map_err(|e| AuditError::Io(wal.parent().unwrap_or(Path::new(".")).to_owned(), e))
}

/// Migrations, applied in order; `PRAGMA user_version` counts those applied.
const MIGRATIONS: &[&str] = &[
    r"
    CREATE TABLE audit_events (
        seq          INTEGER PRIMARY KEY,
        execution_id TEXT NOT NULL,
        kind         TEXT NOT NULL,
        at_ms        INTEGER NOT NULL,
        caller       TEXT NOT NULL,
        profile      TEXT NOT NULL,
        language     TEXT,
        status       TEXT NOT NULL,
        body         TEXT NOT NULL,
        prev_hash    TEXT NOT NULL,
        hash         TEXT NOT NULL
    );
    CREATE INDEX audit_events_execution ON audit_events (execution_id);
    CREATE INDEX audit_events_kind_seq ON audit_events (kind, seq);
",
    r"
    CREATE TABLE audit_open (
        execution_id TEXT PRIMARY KEY,
        seq          INTEGER NOT NULL
    ) WITHOUT ROWID;
    INSERT OR REPLACE INTO audit_open (execution_id, seq)
        SELECT execution_id, seq FROM audit_events b WHERE kind = 'begin' AND NOT EXISTS
            (SELECT 1 FROM audit_events f WHERE f.execution_id = b.execution_id AND f.kind IN ('finish', 'interrupted'));
",
];

/// Where retention by age may cut: the last event older than `t` (ms since the epoch), 0 when
/// there is none, found by a binary search over `seq` (events are stamped as they are appended,
/// so `at_ms` grows with `seq`). Retention runs under the write lock that every execution's
/// `begin` and `finish` wait for: `MAX(seq) WHERE at_ms < t` read the whole log, and an index
/// on `at_ms` would cost every append a page more (0.0-0.3 ms per `sandbox run` in three runs). Each probe is a
/// lookup by primary key. Where stamps are not in order (writers whose clocks or appends
/// interleave), the cut is still an event older than `t` with every earlier event cut with it,
/// as `MAX(seq)` would cut, and never past that one. Returns the cut and the probes made.
pub(crate) fn age_cut(c: &rusqlite::Connection, t: i64) -> rusqlite::Result<(i64, u32)> {
    let last: i64 = c.query_row("SELECT COALESCE(MAX(seq), 0) FROM audit_events", [], |r| r.get(0))?;
    let mut probe = c.prepare_cached("SELECT seq, at_ms FROM audit_events WHERE seq >= ?1 ORDER BY seq LIMIT 1")?;
    // `lo`: 0 or an event older than `t`; `hi`: past the log or an event that is not.
    let (mut lo, mut hi, mut probes) = (0i64, last + 1, 0u32);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        probes += 1;
        match probe.query_row([mid], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))).optional()? {
            Some((seq, at)) if seq < hi => {
                if at < t {
                    lo = seq;
                } else {
                    hi = seq;
                }
            }
            // No event in [mid, hi): a gap left by retention.
            _ => hi = mid,
        }
    }
    Ok((lo, probes))
}

/// The `begin` events with neither `finish` nor `interrupted`, oldest first. Candidates come
/// from `audit_open` (a `begin` adds its execution there, a `finish` or `interrupted` removes
/// it, in the same transaction), so the query reads the open executions, not the whole log:
/// every `sandbox run` recovers at start, and a scan of every `begin` would make each run's
/// cost grow with the log's history. The `NOT EXISTS` check stays, so an entry a build without
/// `audit_open` left behind (one that appended a `finish` to a shared file without removing
/// it) is not taken for an open execution.
pub(crate) const UNFINISHED: &str = "SELECT seq, execution_id, kind, at_ms, caller, profile, language, status, body, prev_hash, hash
     FROM audit_events b WHERE b.seq IN (SELECT seq FROM audit_open) AND b.kind = 'begin' AND NOT EXISTS
         (SELECT 1 FROM audit_events f WHERE f.execution_id = b.execution_id AND f.kind IN ('finish', 'interrupted'))
     ORDER BY b.seq";

fn db(op: &'static str) -> impl FnOnce(rusqlite::Error) -> AuditError {
    move |source| AuditError::Db { op, source }
}

/// The audit log in one SQLite file, its head anchored in `<file>.head` ([`crate::head`]).
pub struct SqliteStore {
    conn: Connection,
    head: HeadFile,
}

impl SqliteStore {
    /// Opens (creating if needed) the log at `path`, in WAL mode with a 10 s busy timeout (several
    /// `sandbox` processes may share it), and applies pending migrations. The chain's head is
    /// anchored in `<path>.head` (e.g. `audit.db.head`), locked through `<path>.head.lock`.
    /// Errors: [`AuditError::Db`].
    pub fn open(path: &Path) -> Result<Self, AuditError> {
        let wal = wal_path(path);
        let wal_before = file_id(&wal);
        let conn = Connection::open(path).map_err(db("open"))?;
        // The log holds every caller's code and output: owner only (its -wal and -shm files
        // take the database file's permissions).
        {
            use std::os::unix::fs::PermissionsExt;
            let private = std::fs::Permissions::from_mode(0o600);
            std::fs::set_permissions(path, private).map_err(|e| AuditError::Private(path.to_owned(), e))?;
        }
        conn.busy_timeout(Duration::from_secs(10)).map_err(db("busy_timeout"))?;
        // WAL is a property of the file, set once; switching needs an exclusive lock that the
        // busy handler does not wait for, so concurrent first opens retry here.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0)).map_err(db("journal_mode"))?;
            if mode.eq_ignore_ascii_case("wal") {
                break;
            }
            match conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0)) {
                Ok(_) => break,
                Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(AuditError::Db { op: "journal_mode", source: e }),
            }
        }
        conn.pragma_update(None, "synchronous", "FULL").map_err(db("synchronous"))?;
        // A closing connection leaves the WAL as it is: no checkpoint and its two fsyncs as a
        // short-lived process (`sandbox run`) ends, and the next process's first commit appends
        // to the same WAL instead of rewriting and syncing its header. A commit that takes the WAL
        // past WAL_PAGES checkpoints it (SQLite's automatic checkpoint), so it stays small and an
        // open's recovery (the first connection reads the whole WAL) stays cheap. Every commit is
        // still durable in the WAL before it returns (`synchronous = FULL`).
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true).map_err(db("no_ckpt_on_close"))?;
        conn.pragma_update(None, "wal_autocheckpoint", WAL_PAGES).map_err(db("wal_autocheckpoint"))?;
        // The connection has the WAL open now (the journal mode's read opened or created it), and
        // holds it: no other connection's close deletes it while this one is open.
        sync_dir_if_new(&wal, wal_before)?;
        let mut head = path.as_os_str().to_owned();
        head.push(".head");
        let mut store = Self { conn, head: HeadFile::new(head.into()) };
        store.migrate()?;
        Ok(store)
    }

    fn migrate(&mut self) -> Result<(), AuditError> {
        // Up to date (every open but the first after an upgrade): read without the write lock,
        // which an open would otherwise wait for behind another process's append.
        let applied: i64 = self.conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(db("migrate"))?;
        if usize::try_from(applied).is_ok_and(|a| a >= MIGRATIONS.len()) {
            return Ok(());
        }
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db("migrate"))?;
        let applied: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(db("migrate"))?;
        for (i, m) in MIGRATIONS.iter().enumerate().skip(usize::try_from(applied).unwrap_or(0)) {
            tx.execute_batch(m).map_err(db("migrate"))?;
            tx.pragma_update(None, "user_version", i + 1).map_err(db("migrate"))?;
        }
        tx.commit().map_err(db("migrate"))
    }

    /// Appends `event` at the end of the chain, durably (one transaction, fsync'd), then moves
    /// the head file to it ([`HeadFile::advance`]).
    /// Errors: [`AuditError::Db`]; nothing is appended then. [`AuditError::Head`] when the head
    /// file cannot be locked (nothing appended) or written (the event is appended).
    pub fn append(&mut self, e: &NewEvent) -> Result<StoredEvent, AuditError> {
        let lock = self.head.lock()?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db("append"))?;
        // Cached statements: a service appends twice per execution, and SQLite's parsing of
        // each statement anew was most of an append's CPU after its fsync.
        let last: Option<(i64, String)> = tx
            .prepare_cached("SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1")
            .and_then(|mut st| st.query_row([], |r| Ok((r.get(0)?, r.get(1)?))).optional())
            .map_err(db("append"))?;
        let (seq, prev_hash) = match last {
            Some((s, h)) => (s + 1, h),
            None => (1, GENESIS.to_owned()),
        };
        let body = e.body.to_string();
        let hash = event_hash(seq, &e.execution_id, e.kind.as_str(), e.at_ms, &e.caller, &e.profile, e.language.as_deref(), &e.status, &body, &prev_hash);
        tx.prepare_cached(
            "INSERT INTO audit_events (seq, execution_id, kind, at_ms, caller, profile, language, status, body, prev_hash, hash)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )
        .and_then(|mut st| st.execute(params![seq, e.execution_id, e.kind.as_str(), e.at_ms, e.caller, e.profile, e.language, e.status, body, prev_hash, hash]))
        .map_err(db("append"))?;
        match e.kind {
            EventKind::Begin => {
                tx.prepare_cached("INSERT OR REPLACE INTO audit_open (execution_id, seq) VALUES (?1, ?2)")
                    .and_then(|mut st| st.execute(params![e.execution_id, seq]))
                    .map_err(db("append"))?;
            }
            EventKind::Finish | EventKind::Interrupted => {
                tx.prepare_cached("DELETE FROM audit_open WHERE execution_id = ?1").and_then(|mut st| st.execute([&e.execution_id])).map_err(db("append"))?;
            }
            EventKind::Rejected | EventKind::Checkpoint => {}
        }
        tx.commit().map_err(db("append"))?;
        self.advance_head(&lock, HeadMark { seq, hash: hash.clone(), execution_id: e.execution_id.clone() })?;
        Ok(StoredEvent {
            seq,
            execution_id: e.execution_id.clone(),
            kind: e.kind,
            at_ms: e.at_ms,
            caller: e.caller.clone(),
            profile: e.profile.clone(),
            language: e.language.clone(),
            status: e.status.clone(),
            body: e.body.clone(),
            prev_hash,
            hash,
        })
    }

    /// Retention: removes the oldest events, those received before `before_ms` and/or all but
    /// the newest `keep_last`, never an unfinished execution's `begin` or anything after it. The
    /// removal is signed off by a `checkpoint` event appended to the chain first, holding the
    /// last removed sequence number and hash, so `verify` still passes from the first event kept
    /// (and fails if the checkpoint itself is removed or altered).
    /// Errors: [`AuditError::Db`]; nothing is removed then.
    pub fn prune(&mut self, before_ms: Option<i64>, keep_last: Option<u64>, now_ms: i64) -> Result<PruneReport, AuditError> {
        let lock = self.head.lock()?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db("prune"))?;
        let last: i64 = tx.query_row("SELECT COALESCE(MAX(seq), 0) FROM audit_events", [], |r| r.get(0)).map_err(db("prune"))?;
        let mut cut: i64 = 0;
        if let Some(t) = before_ms {
            cut = cut.max(age_cut(&tx, t).map_err(db("prune"))?.0);
        }
        if let Some(k) = keep_last {
            cut = cut.max(last - i64::try_from(k).unwrap_or(i64::MAX).min(last));
        }
        // Never cut into an execution that has not ended.
        let open: Option<i64> = tx
            .query_row(
                "SELECT MIN(b.seq) FROM audit_events b WHERE b.seq IN (SELECT seq FROM audit_open) AND b.kind = 'begin' AND NOT EXISTS
                   (SELECT 1 FROM audit_events f WHERE f.execution_id = b.execution_id AND f.kind IN ('finish', 'interrupted'))",
                [],
                |r| r.get(0),
            )
            .map_err(db("prune"))?;
        if let Some(o) = open {
            cut = cut.min(o - 1);
        }
        let first: i64 = tx.query_row("SELECT COALESCE(MIN(seq), 0) FROM audit_events", [], |r| r.get(0)).map_err(db("prune"))?;
        if cut < first || cut >= last {
            return Ok(PruneReport { events: 0, through_seq: 0 });
        }
        let pruned_hash: String = tx.query_row("SELECT hash FROM audit_events WHERE seq = ?1", [cut], |r| r.get(0)).map_err(db("prune"))?;
        let last_hash: String = tx.query_row("SELECT hash FROM audit_events WHERE seq = ?1", [last], |r| r.get(0)).map_err(db("prune"))?;
        let events: i64 = tx.query_row("SELECT COUNT(*) FROM audit_events WHERE seq <= ?1", [cut], |r| r.get(0)).map_err(db("prune"))?;
        let body = serde_json::json!({ "schemaVersion": crate::SCHEMA_VERSION, "prunedThroughSeq": cut, "prunedHash": pruned_hash, "prunedEvents": events })
            .to_string();
        let seq = last + 1;
        let id = format!("checkpoint-{seq}");
        let hash = event_hash(seq, &id, "checkpoint", now_ms, "retention", "", None, "checkpoint", &body, &last_hash);
        tx.execute(
            "INSERT INTO audit_events (seq, execution_id, kind, at_ms, caller, profile, language, status, body, prev_hash, hash)
             VALUES (?1, ?2, 'checkpoint', ?3, 'retention', '', NULL, 'checkpoint', ?4, ?5, ?6)",
            params![seq, id, now_ms, body, last_hash, hash],
        )
        .map_err(db("prune"))?;
        tx.execute("DELETE FROM audit_events WHERE seq <= ?1", [cut]).map_err(db("prune"))?;
        // Nothing at or before the cut is open: what is listed there was left by an older build.
        tx.execute("DELETE FROM audit_open WHERE seq <= ?1", [cut]).map_err(db("prune"))?;
        tx.commit().map_err(db("prune"))?;
        self.advance_head(&lock, HeadMark { seq, hash, execution_id: id })?;
        Ok(PruneReport { events: u64::try_from(events).unwrap_or(0), through_seq: cut })
    }

    /// `begin` events with neither `finish` nor `interrupted`: executions that are running, or
    /// whose service died. Oldest first. Reads the open executions (`UNFINISHED`), not the
    /// whole log.
    /// Errors: [`AuditError::Db`].
    pub fn unfinished(&self) -> Result<Vec<StoredEvent>, AuditError> {
        self.query_events(UNFINISHED)
    }

    fn query_events(&self, sql: &str) -> Result<Vec<StoredEvent>, AuditError> {
        let mut stmt = self.conn.prepare(sql).map_err(db("query"))?;
        let rows = stmt.query_map([], row_to_event).map_err(db("query"))?;
        let mut out = Vec::new();
        for r in rows {
            out.push(r.map_err(db("query"))??);
        }
        Ok(out)
    }

    /// One execution's record.
    /// Errors: [`AuditError::Db`].
    pub fn get(&self, execution_id: &str) -> Result<Option<AuditRecord>, AuditError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT seq, execution_id, kind, at_ms, caller, profile, language, status, body, prev_hash, hash
                 FROM audit_events WHERE execution_id = ?1 ORDER BY seq",
            )
            .map_err(db("get"))?;
        let rows = stmt.query_map([execution_id], row_to_event).map_err(db("get"))?;
        let mut events = Vec::new();
        for r in rows {
            events.push(r.map_err(db("get"))??);
        }
        Ok(record_of(&events))
    }

    /// A page of records matching `f`, newest first.
    /// Errors: [`AuditError::Db`].
    pub fn list(&self, f: &ListFilter) -> Result<Page, AuditError> {
        let limit = i64::from(f.limit.clamp(1, 1000));
        let mut stmt = self
            .conn
            .prepare(
                "SELECT b.execution_id FROM audit_events b
                 LEFT JOIN audit_events e ON e.execution_id = b.execution_id AND e.kind IN ('finish', 'interrupted')
                 WHERE b.kind IN ('begin', 'rejected')
                   AND (?1 IS NULL OR b.profile = ?1)
                   AND (?2 IS NULL OR COALESCE(e.status, b.status) = ?2)
                   AND (?3 IS NULL OR COALESCE(e.language, b.language) = ?3)
                   AND (?4 IS NULL OR b.caller = ?4)
                   AND (?9 IS NULL OR substr(b.caller, 1, length(?9)) = ?9)
                   AND (?5 IS NULL OR b.at_ms >= ?5)
                   AND (?6 IS NULL OR b.at_ms < ?6)
                   AND (?7 IS NULL OR b.seq < ?7)
                 ORDER BY b.seq DESC LIMIT ?8",
            )
            .map_err(db("list"))?;
        let ids: Vec<String> = stmt
            .query_map(params![f.profile, f.status, f.language, f.caller, f.since_ms, f.until_ms, f.before_seq, limit + 1, f.caller_prefix], |r| r.get(0))
            .map_err(db("list"))?
            .collect::<Result<_, _>>()
            .map_err(db("list"))?;
        let mut records = Vec::new();
        for id in ids.iter().take(usize::try_from(limit).unwrap_or(1000)) {
            if let Some(r) = self.get(id)? {
                records.push(r);
            }
        }
        let next_cursor = if ids.len() as i64 > limit { records.last().map(|r| r.seq) } else { None };
        Ok(Page { records, next_cursor })
    }

    /// Every event in chain order (for export).
    /// Errors: [`AuditError::Db`].
    pub fn events(&self) -> Result<Vec<StoredEvent>, AuditError> {
        self.query_events("SELECT seq, execution_id, kind, at_ms, caller, profile, language, status, body, prev_hash, hash FROM audit_events ORDER BY seq")
    }

    /// Walks the chain from the first event and reports the first one that was changed,
    /// removed or reordered (see [`crate::chain::verify_events`]), then checks the head file:
    /// the event it names must still be there (else `truncated`) with its hash (else
    /// `rewritten`).
    /// Errors: [`AuditError::Db`]; [`AuditError::Head`] or [`AuditError::HeadCorrupt`] when the
    /// head file exists but cannot be read.
    pub fn verify(&self) -> Result<VerifyReport, AuditError> {
        let mut stmt = self
            .conn
            .prepare("SELECT seq, execution_id, kind, at_ms, caller, profile, language, status, body, prev_hash, hash FROM audit_events ORDER BY seq")
            .map_err(db("verify"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(RawEvent {
                    seq: r.get(0)?,
                    execution_id: r.get(1)?,
                    kind: r.get(2)?,
                    at_ms: r.get(3)?,
                    caller: r.get(4)?,
                    profile: r.get(5)?,
                    language: r.get(6)?,
                    status: r.get(7)?,
                    body: r.get(8)?,
                    prev_hash: r.get(9)?,
                    hash: r.get(10)?,
                })
            })
            .map_err(db("verify"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db("verify"))?;
        let checkpoints: Vec<serde_json::Value> = rows.iter().filter(|r| r.kind == "checkpoint").filter_map(|r| serde_json::from_str(&r.body).ok()).collect();
        let first = rows.first().map(|r| r.seq);
        let hashes: std::collections::HashMap<i64, String> = rows.iter().map(|r| (r.seq, r.hash.clone())).collect();
        let report = crate::chain::verify_events(rows, &checkpoints);
        let mark = self.head.read()?;
        Ok(crate::head::checked(report, mark, first, |seq| hashes.get(&seq).cloned()))
    }

    /// The head file ([`crate::head`]).
    pub fn head(&self) -> &HeadFile {
        &self.head
    }

    fn advance_head(&self, lock: &HeadLock, mark: HeadMark) -> Result<bool, AuditError> {
        self.head.advance(lock, &mark, |old| {
            // Still stored, or before the first event kept (HeadFile::advance).
            let (h, first): (Option<String>, Option<i64>) = self
                .conn
                .prepare_cached("SELECT (SELECT hash FROM audit_events WHERE seq = ?1), (SELECT MIN(seq) FROM audit_events)")
                .and_then(|mut st| st.query_row([old.seq], |r| Ok((r.get(0)?, r.get(1)?))))
                .map_err(db("head"))?;
            Ok(h.as_deref() == Some(old.hash.as_str()) || first.is_some_and(|f| old.seq < f))
        })
    }

    /// The raw connection, for tests that tamper with the file as an attacker would.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

fn row_to_event(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<StoredEvent, AuditError>> {
    let kind: String = r.get(2)?;
    let body: String = r.get(8)?;
    let seq: i64 = r.get(0).unwrap_or_default();
    let kind = match EventKind::parse(&kind, seq) {
        Ok(k) => k,
        Err(e) => return Ok(Err(e)),
    };
    Ok(serde_json::from_str(&body).map_err(AuditError::from).map(|body| StoredEvent {
        seq,
        execution_id: r.get(1).unwrap_or_default(),
        kind,
        at_ms: r.get(3).unwrap_or_default(),
        caller: r.get(4).unwrap_or_default(),
        profile: r.get(5).unwrap_or_default(),
        language: r.get(6).unwrap_or_default(),
        status: r.get(7).unwrap_or_default(),
        body,
        prev_hash: r.get(9).unwrap_or_default(),
        hash: r.get(10).unwrap_or_default(),
    }))
}

/// Joins one execution's events into a record.
pub(crate) fn record_of(events: &[StoredEvent]) -> Option<AuditRecord> {
    let first = events.first()?;
    let end = events.iter().rev().find(|e| matches!(e.kind, EventKind::Finish | EventKind::Interrupted));
    let (state, status) = match (first.kind, end.map(|e| e.kind)) {
        (EventKind::Rejected, _) => (RecordState::Rejected, "rejected".to_owned()),
        (_, Some(EventKind::Interrupted)) => (RecordState::Interrupted, "interrupted".to_owned()),
        (_, Some(_)) => (RecordState::Finished, end.map(|e| e.status.clone()).unwrap_or_default()),
        (_, None) => (RecordState::Running, "running".to_owned()),
    };
    Some(AuditRecord {
        execution_id: first.execution_id.clone(),
        state,
        status,
        caller: first.caller.clone(),
        profile: first.profile.clone(),
        language: first.language.clone().or_else(|| end.and_then(|e| e.language.clone())),
        received_at_ms: first.at_ms,
        finished_at_ms: end.map(|e| e.at_ms),
        request: first.body.clone(),
        result: end.map(|e| e.body.clone()),
        seq: first.seq,
    })
}

#[cfg(test)]
pub(crate) mod tests;
