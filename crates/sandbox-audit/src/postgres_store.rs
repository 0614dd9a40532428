//! The PostgreSQL backend, for several nodes sharing one log: the same table, the same chain.
//! Appends from every node are serialized by a transaction-scoped advisory lock, so the chain
//! stays one sequence without gaps. Each node anchors the newest event it appended in a head
//! file of its own ([`crate::head`]; a row in the same database would not be outside it).
//!
//! Leases (`execution_leases`): a `begin` inserts one (execution id, node id, quota key,
//! expiry by the database's clock) in its append transaction, after counting the quota key's
//! unexpired leases under the same lock; `finish` and `interrupted` delete it in theirs. Nodes
//! renew the leases of the executions they run; any node reaps expired ones (a node that died).
//! A lost connection is re-opened by the next call, so a node recovers by itself when the
//! database returns.
//!
//! Round trips: what an execution waits for is its `begin` and its `finish`, each one
//! transaction. A statement sent as text is parsed and described by the server before it runs,
//! one more round trip, so the statements of those transactions are prepared once per
//! connection ([`Statements`]); `BEGIN`, the advisory lock and the read of the chain's last
//! event with the head's check (is the event the head file names still there) go as one simple
//! query ([`Locked::begin`]; it sends no value but integers); the event, its `audit_open` entry
//! and its lease are written by one statement. An append is then 3 round trips (begin, lock and
//! read; write; commit; a `begin` with a quota one more, to count its leases) where it took 14.

use std::collections::HashMap;

use postgres::{Client, GenericClient, NoTls, Statement};

use crate::chain::RawEvent;
use crate::head::{HeadFile, HeadLock, HeadMark};
use crate::sqlite::record_of;
use crate::{event_hash, AuditError, AuditRecord, Begin, EventKind, Lease, ListFilter, NewEvent, Page, PruneReport, StoredEvent, VerifyReport, GENESIS};

/// Advisory lock key held while appending (any constant; "sandbox audit").
const APPEND_LOCK: i64 = 0x5a4e_4442_4155_4454;

/// Advisory lock key held while keeping a result (any constant other than [`APPEND_LOCK`]).
const KEPT_LOCK: i64 = 0x5a4e_4442_4b45_5054;

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

const MIGRATIONS: &[&str] = &[
    r"
    CREATE TABLE audit_events (
        seq          BIGINT PRIMARY KEY,
        execution_id TEXT NOT NULL,
        kind         TEXT NOT NULL,
        at_ms        BIGINT NOT NULL,
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
    CREATE TABLE execution_leases (
        execution_id  TEXT PRIMARY KEY,
        node_id       TEXT NOT NULL,
        quota_key     TEXT,
        expires_at_ms BIGINT NOT NULL
    );
    CREATE INDEX execution_leases_quota ON execution_leases (quota_key);
    CREATE INDEX execution_leases_expiry ON execution_leases (expires_at_ms);
",
    r"
    CREATE TABLE kept_results (
        execution_id TEXT PRIMARY KEY,
        owner        TEXT NOT NULL,
        bytes        BIGINT NOT NULL,
        kept_seq     BIGSERIAL NOT NULL,
        result       TEXT NOT NULL
    );
    CREATE INDEX kept_results_owner ON kept_results (owner, kept_seq);
    CREATE INDEX kept_results_seq ON kept_results (kept_seq);
",
    // The open executions (see the SQLite store's `UNFINISHED`): recovery and retention read
    // these, not every `begin` of the log's history.
    r"
    CREATE TABLE audit_open (
        execution_id TEXT PRIMARY KEY,
        seq          BIGINT NOT NULL
    );
    INSERT INTO audit_open (execution_id, seq)
        SELECT execution_id, MAX(seq) FROM audit_events b WHERE kind = 'begin' AND NOT EXISTS
            (SELECT 1 FROM audit_events f WHERE f.execution_id = b.execution_id AND f.kind IN ('finish', 'interrupted'))
        GROUP BY execution_id;
",
    // Retention by age (under the append lock, which every node's appends wait for) and
    // listing by time read the events in a time range, not the whole table.
    r"
    CREATE INDEX IF NOT EXISTS audit_events_at_ms ON audit_events (at_ms);
",
];

/// The open executions' `begin`s: candidates from `audit_open`, checked against the events (an
/// entry a build without the table left behind is not open).
const OPEN_BEGIN: &str = "audit_events.seq IN (SELECT seq FROM audit_open) AND audit_events.kind = 'begin' AND NOT EXISTS
    (SELECT 1 FROM audit_events f WHERE f.execution_id = audit_events.execution_id AND f.kind IN ('finish', 'interrupted'))";

/// The database's clock in ms since the Unix epoch (one clock for every node's leases).
const DB_NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::BIGINT";

/// How long connecting may take before a call fails (the database host is unreachable), in s.
const CONNECT_TIMEOUT_S: u64 = 5;

fn pg(op: &'static str) -> impl FnOnce(postgres::Error) -> AuditError {
    move |source| AuditError::Pg { op, source }
}

const COLUMNS: &str = "seq, execution_id, kind, at_ms, caller, profile, language, status, body, prev_hash, hash";

/// The audit log in a PostgreSQL database.
pub struct PostgresStore {
    config: postgres::Config,
    /// `None` after a call lost the connection; the next call connects again.
    client: Option<Client>,
    /// The statements prepared on `client`.
    statements: Statements,
    head: Option<HeadFile>,
}

/// Statements prepared on the current connection, by their SQL: each is parsed and described
/// by the server once per connection instead of before every run. Emptied whenever a call
/// fails (a new connection has none; a server error may come from a statement a schema change
/// made stale).
#[derive(Default)]
struct Statements(HashMap<String, Statement>);

impl Statements {
    /// `sql` prepared on `c` (the connection or a transaction on it), once.
    fn get(&mut self, c: &mut impl GenericClient, sql: &str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.0.get(sql) {
            return Ok(s.clone());
        }
        let s = c.prepare(sql)?;
        self.0.insert(sql.to_owned(), s.clone());
        Ok(s)
    }
}

impl PostgresStore {
    /// Connects (`postgres://user@host:port/db` or libpq `host=... port=...`; a connect timeout
    /// of 5 s unless the URL sets one) and applies pending migrations (tracked in
    /// `audit_schema`, under the append lock so nodes do not race).
    /// Errors: [`AuditError::Pg`].
    pub fn connect(url: &str) -> Result<Self, AuditError> {
        let mut config: postgres::Config = url.parse().map_err(pg("connect"))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(CONNECT_TIMEOUT_S));
        }
        let mut store = Self { config, client: None, statements: Statements::default(), head: None };
        off_runtime(|| store.client().map(|_| ()))?;
        Ok(store)
    }

    /// The connection, opened (and the schema migrated) if there is none.
    fn client(&mut self) -> Result<&mut Client, AuditError> {
        if self.client.as_ref().is_some_and(Client::is_closed) {
            self.client = None;
        }
        if self.client.is_none() {
            self.statements = Statements::default();
            self.client = Some(Self::open(&self.config)?);
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    /// Runs `f` on the connection; an error that is not the server refusing a statement (the
    /// connection broke) drops the connection, so the next call opens a fresh one.
    fn with<T>(&mut self, f: impl FnOnce(&mut Client) -> Result<T, AuditError>) -> Result<T, AuditError> {
        self.with_statements(|c, _| f(c))
    }

    /// [`PostgresStore::with`], `f` also given the connection's prepared statements.
    fn with_statements<T>(&mut self, f: impl FnOnce(&mut Client, &mut Statements) -> Result<T, AuditError>) -> Result<T, AuditError> {
        self.client()?;
        let client = self.client.as_mut().expect("connected above");
        let r = f(client, &mut self.statements);
        if let Err(AuditError::Pg { source, .. }) = &r {
            self.statements = Statements::default();
            if source.code().is_none() || source.is_closed() {
                self.client = None;
            }
        }
        r
    }

    fn open(config: &postgres::Config) -> Result<Client, AuditError> {
        let mut client = config.connect(NoTls).map_err(pg("connect"))?;
        let mut tx = client.transaction().map_err(pg("migrate"))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&APPEND_LOCK]).map_err(pg("migrate"))?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS audit_schema (version INTEGER NOT NULL)").map_err(pg("migrate"))?;
        let applied: i64 = tx.query_one("SELECT COUNT(*) FROM audit_schema", &[]).map_err(pg("migrate"))?.get(0);
        for (i, m) in MIGRATIONS.iter().enumerate().skip(usize::try_from(applied).unwrap_or(0)) {
            tx.batch_execute(m).map_err(pg("migrate"))?;
            let v = i32::try_from(i + 1).unwrap_or(i32::MAX);
            tx.execute("INSERT INTO audit_schema (version) VALUES ($1)", &[&v]).map_err(pg("migrate"))?;
        }
        tx.commit().map_err(pg("migrate"))?;
        Ok(client)
    }

    /// Anchors this node's appends in `head` ([`crate::head`]): every append moves it, `verify`
    /// checks it. Without one (a bare [`PostgresStore::connect`]), no head is kept or checked.
    pub fn with_head(mut self, head: HeadFile) -> Self {
        self.head = Some(head);
        self
    }

    /// The head file name for the database `url` names, in a node's data directory:
    /// `audit-postgres-<12 hex digits>.head`, the digits a SHA-256 of the server's hosts, ports
    /// and database name (not of the password, which may rotate).
    /// Errors: [`AuditError::Pg`] when `url` does not parse.
    pub fn head_file_name(url: &str) -> Result<String, AuditError> {
        use sha2::Digest as _;
        let config: postgres::Config = url.parse().map_err(pg("parse url"))?;
        let hosts: Vec<String> = config
            .get_hosts()
            .iter()
            .map(|h| match h {
                postgres::config::Host::Tcp(t) => t.clone(),
                postgres::config::Host::Unix(p) => p.display().to_string(),
            })
            .collect();
        let id = serde_json::json!([hosts, config.get_ports(), config.get_dbname(), config.get_user()]).to_string();
        Ok(format!("audit-postgres-{}.head", &hex::encode(sha2::Sha256::digest(id.as_bytes()))[..12]))
    }

    fn lock_head(&self) -> Result<Option<HeadLock>, AuditError> {
        self.head.as_ref().map(HeadFile::lock).transpose()
    }

    /// Moves the head to `mark` (taken after its transaction committed), if this store keeps one.
    fn advance_head(&mut self, lock: Option<HeadLock>, mark: Option<HeadMark>) -> Result<(), AuditError> {
        let (Some(head), Some(lock), Some(mark)) = (self.head.clone(), lock, mark) else { return Ok(()) };
        self.with_statements(|client, st| {
            head.advance(&lock, &mark, |old| {
                // Still stored, or before the first event kept (HeadFile::advance).
                let check = st.get(client, "SELECT (SELECT hash FROM audit_events WHERE seq = $1), (SELECT MIN(seq) FROM audit_events)").map_err(pg("head"))?;
                let row = client.query_one(&check, &[&old.seq]).map_err(pg("head"))?;
                let (hash, first): (Option<String>, Option<i64>) = (row.get(0), row.get(1));
                Ok(hash.as_deref() == Some(old.hash.as_str()) || first.is_some_and(|f| old.seq < f))
            })
        })?;
        Ok(())
    }

    fn query_events(&mut self, clause: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) -> Result<Vec<StoredEvent>, AuditError> {
        let rows = self.with(|c| c.query(&format!("SELECT {COLUMNS} FROM audit_events WHERE {clause} ORDER BY seq"), params).map_err(pg("query")))?;
        rows.iter().map(|r| stored(&raw(r))).collect()
    }
}

/// What an append does to the execution's lease, in the statement that writes the event.
enum LeaseChange<'a> {
    /// Nothing.
    Keep,
    /// A `begin`'s: taken by `node_id`, counted under `quota_key`, expiring `ttl_ms` from now by
    /// the database's clock.
    Take { node_id: &'a str, quota_key: Option<&'a str>, ttl_ms: i64 },
    /// A `finish`'s or `interrupted`'s: dropped.
    Drop,
}

/// Appends `e` at the end of the chain inside `tx`, which holds the append lock: reads the last
/// event, then writes the event, its `audit_open` entry (a `begin` adds it, a `finish` or
/// `interrupted` removes it) and its `lease` change in one statement.
fn append_in(tx: &mut impl GenericClient, st: &mut Statements, e: &NewEvent, lease: LeaseChange<'_>) -> Result<StoredEvent, AuditError> {
    Ok(append_checked(tx, st, e, lease, None, None)?.0)
}

/// The chain's last event as an append reads it under the lock: `(seq, hash, hash of the event
/// at the head file's seq, the first stored seq)`; `None` for an empty chain.
type Last = Option<(i64, String, Option<String>, Option<i64>)>;

/// The query reading [`Last`] for a head file at `head_seq` (0: none).
fn last_sql(head_seq: &str) -> String {
    format!(
        "SELECT seq, hash, (SELECT hash FROM audit_events WHERE seq = {head_seq}), (SELECT MIN(seq) FROM audit_events) FROM audit_events ORDER BY seq DESC LIMIT 1"
    )
}

/// [`append_in`], also answering whether a head file whose mark is `head` may move to the new
/// event (see [`HeadFile::advance`]: no mark yet, or the event it names is still there and
/// older), asked in the same query as the chain's last event; `read`: that query's answer when
/// the caller read it already, under the same lock ([`Locked::begin`]).
fn append_checked(
    tx: &mut impl GenericClient,
    st: &mut Statements,
    e: &NewEvent,
    lease: LeaseChange<'_>,
    head: Option<&HeadMark>,
    read: Option<Last>,
) -> Result<(StoredEvent, bool), AuditError> {
    let last = match read {
        Some(last) => last,
        None => {
            let q = st.get(tx, &last_sql("$1::BIGINT")).map_err(pg("append"))?;
            let head_seq = head.map_or(0, |h| h.seq);
            tx.query_opt(&q, &[&head_seq]).map_err(pg("append"))?.map(|r| (r.get::<_, i64>(0), r.get(1), r.get(2), r.get(3)))
        }
    };
    let (seq, prev_hash, head_hash, first): (i64, String, Option<String>, Option<i64>) = match last {
        Some((seq, hash, head_hash, first)) => (seq + 1, hash, head_hash, first),
        None => (1, GENESIS.to_owned(), None, None),
    };
    // Still stored, or before the first event kept (HeadFile::advance).
    let advance = head.is_none_or(|h| h.seq < seq && (head_hash.as_deref() == Some(h.hash.as_str()) || first.is_some_and(|f| h.seq < f)));
    let body = e.body.to_string();
    let hash = event_hash(seq, &e.execution_id, e.kind.as_str(), e.at_ms, &e.caller, &e.profile, e.language.as_deref(), &e.status, &body, &prev_hash);
    // Data-modifying statements in WITH all run, to completion, whether or not the query reads
    // them (PostgreSQL manual, "WITH Queries", 7.8.4).
    let open = match e.kind {
        EventKind::Begin => {
            ", open AS (INSERT INTO audit_open (execution_id, seq) VALUES ($2, $1) ON CONFLICT (execution_id) DO UPDATE SET seq = EXCLUDED.seq)"
        }
        EventKind::Finish | EventKind::Interrupted => ", open AS (DELETE FROM audit_open WHERE execution_id = $2)",
        EventKind::Rejected | EventKind::Checkpoint => "",
    };
    let lease_sql = match lease {
        LeaseChange::Keep => String::new(),
        LeaseChange::Take { .. } => {
            format!(", lease AS (INSERT INTO execution_leases (execution_id, node_id, quota_key, expires_at_ms) VALUES ($2, $12, $13, {DB_NOW_MS} + $14))")
        }
        LeaseChange::Drop => ", lease AS (DELETE FROM execution_leases WHERE execution_id = $2)".to_owned(),
    };
    let sql = format!("WITH ev AS (INSERT INTO audit_events ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING seq){open}{lease_sql} SELECT seq FROM ev");
    let write = st.get(tx, &sql).map_err(pg("append"))?;
    let kind = e.kind.as_str();
    let mut params: Vec<&(dyn postgres::types::ToSql + Sync)> =
        vec![&seq, &e.execution_id, &kind, &e.at_ms, &e.caller, &e.profile, &e.language, &e.status, &body, &prev_hash, &hash];
    if let LeaseChange::Take { node_id, quota_key, ttl_ms } = &lease {
        params.extend([node_id as &(dyn postgres::types::ToSql + Sync), quota_key, ttl_ms]);
    }
    tx.query_one(&write, &params).map_err(pg("append"))?;
    let stored = stored(&RawEvent {
        seq,
        execution_id: e.execution_id.clone(),
        kind: e.kind.as_str().into(),
        at_ms: e.at_ms,
        caller: e.caller.clone(),
        profile: e.profile.clone(),
        language: e.language.clone(),
        status: e.status.clone(),
        body,
        prev_hash,
        hash,
    })?;
    Ok((stored, advance))
}

/// The head mark naming `e`.
fn mark_of(e: &StoredEvent) -> HeadMark {
    HeadMark { seq: e.seq, hash: e.hash.clone(), execution_id: e.execution_id.clone() }
}

/// A transaction holding the append lock, begun and locked by one simple query (`BEGIN;
/// SELECT pg_advisory_xact_lock(..)`, with the read of the chain's last event: one round trip
/// where `Client::transaction`, the lock and the read take three). Rolled back when dropped
/// uncommitted.
struct Locked<'c> {
    c: &'c mut Client,
    open: bool,
}

impl<'c> Locked<'c> {
    /// Begins, takes the append lock and reads the chain's last event (with the check of the
    /// event at `head`'s seq) in one round trip: the three statements go as one simple query
    /// (values come back as text; the only value sent is `head`'s seq, an integer).
    fn begin(c: &'c mut Client, op: &'static str, head: Option<&HeadMark>) -> Result<(Self, Last), AuditError> {
        let tx = Self { c, open: true };
        let head_seq = head.map_or(0, |h| h.seq);
        let sql = format!("BEGIN; SELECT pg_advisory_xact_lock({APPEND_LOCK}); {}", last_sql(&head_seq.to_string()));
        let messages = tx.c.simple_query(&sql).map_err(pg(op))?;
        // The last statement's row: the one after the first two statements completed.
        let mut completed = 0;
        let mut last = None;
        for m in &messages {
            match m {
                postgres::SimpleQueryMessage::CommandComplete(_) => completed += 1,
                postgres::SimpleQueryMessage::Row(r) if completed == 2 => last = Some(r),
                _ => {}
            }
        }
        let last = match last {
            None => None,
            Some(r) => {
                let text = |i: usize| r.get(i).map(str::to_owned);
                let seq = text(0).and_then(|s| s.parse::<i64>().ok()).ok_or(AuditError::Malformed("sequence number"))?;
                let hash = text(1).ok_or(AuditError::Malformed("hash"))?;
                Some((seq, hash, text(2), text(3).and_then(|s| s.parse::<i64>().ok())))
            }
        };
        Ok((tx, last))
    }

    fn commit(mut self, op: &'static str) -> Result<(), AuditError> {
        self.open = false;
        self.c.batch_execute("COMMIT").map_err(pg(op))
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if self.open {
            // A connection that broke is dropped by `with`; on a live one this ends the
            // failed transaction (and releases the lock) before the next call.
            let _ = self.c.batch_execute("ROLLBACK");
        }
    }
}

/// Starts a transaction on `c` holding the append lock (taken by a simple query: one round
/// trip, nothing to prepare).
fn locked<'c>(c: &'c mut Client, op: &'static str) -> Result<postgres::Transaction<'c>, AuditError> {
    let mut tx = c.transaction().map_err(pg(op))?;
    tx.batch_execute(&format!("SELECT pg_advisory_xact_lock({APPEND_LOCK})")).map_err(pg(op))?;
    Ok(tx)
}

/// `e` stamped now (this node's clock, read under the append lock).
fn stamped(e: &NewEvent) -> NewEvent {
    NewEvent { at_ms: crate::recorder::now_ms().max(e.at_ms), ..e.clone() }
}

fn raw(r: &postgres::Row) -> RawEvent {
    RawEvent {
        seq: r.get(0),
        execution_id: r.get(1),
        kind: r.get(2),
        at_ms: r.get(3),
        caller: r.get(4),
        profile: r.get(5),
        language: r.get(6),
        status: r.get(7),
        body: r.get(8),
        prev_hash: r.get(9),
        hash: r.get(10),
    }
}

fn stored(r: &RawEvent) -> Result<StoredEvent, AuditError> {
    let kind = EventKind::parse(&r.kind, r.seq)?;
    Ok(StoredEvent {
        seq: r.seq,
        execution_id: r.execution_id.clone(),
        kind,
        at_ms: r.at_ms,
        caller: r.caller.clone(),
        profile: r.profile.clone(),
        language: r.language.clone(),
        status: r.status.clone(),
        body: serde_json::from_str(&r.body)?,
        prev_hash: r.prev_hash.clone(),
        hash: r.hash.clone(),
    })
}

impl PostgresStore {
    /// Appends `e`, stamped under the lock when `stamp` is set; a `finish` or `interrupted`
    /// drops the execution's lease in the same transaction.
    fn append_inner(&mut self, e: &NewEvent, stamp: bool) -> Result<StoredEvent, AuditError> {
        let (lock, head) = self.lock_and_read_head()?;
        let (stored, advance) = self.with_statements(|c, st| {
            let (tx, last) = Locked::begin(c, "append", head.as_ref())?;
            let lease = if matches!(e.kind, EventKind::Finish | EventKind::Interrupted) { LeaseChange::Drop } else { LeaseChange::Keep };
            let e = if stamp { stamped(e) } else { e.clone() };
            let appended = append_checked(tx.c, st, &e, lease, head.as_ref(), Some(last))?;
            tx.commit("append")?;
            Ok(appended)
        })?;
        self.write_head(lock, &stored, advance)?;
        Ok(stored)
    }

    /// The head file's lock and the mark it holds, when this store keeps one.
    fn lock_and_read_head(&self) -> Result<(Option<HeadLock>, Option<HeadMark>), AuditError> {
        let lock = self.lock_head()?;
        let mark = match (&self.head, &lock) {
            (Some(head), Some(_)) => head.read()?,
            _ => None,
        };
        Ok((lock, mark))
    }

    /// Moves the head to `stored` (committed) when [`append_checked`] said it may.
    fn write_head(&self, lock: Option<HeadLock>, stored: &StoredEvent, advance: bool) -> Result<(), AuditError> {
        match (&self.head, lock) {
            (Some(head), Some(lock)) if advance => head.write(&lock, &mark_of(stored)),
            _ => Ok(()),
        }
    }

    fn append_begin_inner(&mut self, e: &NewEvent, lease: &Lease<'_>) -> Result<Begin, AuditError> {
        let (lock, head) = self.lock_and_read_head()?;
        let begun = self.with_statements(|c, st| {
            let (tx, last) = Locked::begin(c, "begin", head.as_ref())?;
            let key = lease.quota.map(|q| q.key.as_str());
            if let Some(q) = lease.quota {
                let count = st
                    .get(tx.c, &format!("SELECT COUNT(*) FROM execution_leases WHERE quota_key = $1 AND expires_at_ms > {DB_NOW_MS}"))
                    .map_err(pg("begin"))?;
                let n: i64 = tx.c.query_one(&count, &[&q.key]).map_err(pg("begin"))?.get(0);
                let running = u32::try_from(n).unwrap_or(u32::MAX);
                if running >= q.max_concurrent {
                    return Ok(Err(running));
                }
            }
            let ttl_ms = i64::try_from(lease.ttl_ms).unwrap_or(i64::MAX);
            let appended =
                append_checked(tx.c, st, &stamped(e), LeaseChange::Take { node_id: lease.node_id, quota_key: key, ttl_ms }, head.as_ref(), Some(last))?;
            tx.commit("begin")?;
            Ok(Ok(appended))
        })?;
        match begun {
            Ok((stored, advance)) => {
                self.write_head(lock, &stored, advance)?;
                Ok(Begin::Appended(Box::new(stored)))
            }
            Err(running) => Ok(Begin::Limited { running }),
        }
    }

    fn renew_inner(&mut self, node_id: &str, ids: &[String], ttl_ms: u64) -> Result<u64, AuditError> {
        let ttl = i64::try_from(ttl_ms).unwrap_or(i64::MAX);
        self.with(|c| {
            c.execute(
                &format!("UPDATE execution_leases SET expires_at_ms = {DB_NOW_MS} + $3 WHERE node_id = $1 AND execution_id = ANY($2)"),
                &[&node_id, &ids, &ttl],
            )
            .map_err(pg("renew"))
        })
    }

    fn reap_inner(&mut self) -> Result<Vec<String>, AuditError> {
        // Most calls find nothing: look before taking the head's and the database's locks.
        let any: bool = self.with(|c| {
            c.query_one(&format!("SELECT EXISTS (SELECT 1 FROM execution_leases WHERE expires_at_ms <= {DB_NOW_MS})"), &[])
                .map_err(pg("reap"))
                .map(|r| r.get(0))
        })?;
        if !any {
            return Ok(Vec::new());
        }
        let lock = self.lock_head()?;
        let mut last = None;
        let ids = self.with_statements(|c, st| {
            let mut tx = locked(c, "reap")?;
            let expired = tx
                .query(&format!("SELECT execution_id, node_id FROM execution_leases WHERE expires_at_ms <= {DB_NOW_MS} ORDER BY execution_id"), &[])
                .map_err(pg("reap"))?;
            let mut ids = Vec::new();
            for row in &expired {
                let (id, node): (String, String) = (row.get(0), row.get(1));
                let begin = tx
                    .query_opt(
                        &format!(
                            "SELECT {COLUMNS} FROM audit_events b WHERE b.execution_id = $1 AND b.kind = 'begin' AND NOT EXISTS
                               (SELECT 1 FROM audit_events f WHERE f.execution_id = b.execution_id AND f.kind IN ('finish', 'interrupted'))"
                        ),
                        &[&id],
                    )
                    .map_err(pg("reap"))?;
                if let Some(b) = begin {
                    let b = raw(&b);
                    let reason = format!("node {node} stopped renewing the execution's lease (it died, or lost the database) before it finished");
                    let e = NewEvent {
                        execution_id: id.clone(),
                        kind: EventKind::Interrupted,
                        at_ms: crate::recorder::now_ms(),
                        caller: b.caller,
                        profile: b.profile,
                        language: b.language,
                        status: "interrupted".into(),
                        body: serde_json::json!({ "schemaVersion": crate::SCHEMA_VERSION, "reason": reason, "node": node }),
                    };
                    last = Some(mark_of(&append_in(&mut tx, st, &e, LeaseChange::Drop)?));
                    ids.push(id.clone());
                } else {
                    tx.execute("DELETE FROM execution_leases WHERE execution_id = $1", &[&id]).map_err(pg("reap"))?;
                }
            }
            tx.commit().map_err(pg("reap"))?;
            Ok(ids)
        })?;
        self.advance_head(lock, last)?;
        Ok(ids)
    }

    fn unfinished_inner(&mut self) -> Result<Vec<StoredEvent>, AuditError> {
        self.query_events(OPEN_BEGIN, &[])
    }

    fn get_inner(&mut self, execution_id: &str) -> Result<Option<AuditRecord>, AuditError> {
        let events = self.query_events("execution_id = $1", &[&execution_id])?;
        Ok(record_of(&events))
    }

    fn list_inner(&mut self, f: &ListFilter) -> Result<Page, AuditError> {
        let limit = i64::from(f.limit.clamp(1, 1000));
        let rows = self.with(|c| {
            c.query(
                "SELECT b.execution_id FROM audit_events b
                 LEFT JOIN audit_events e ON e.execution_id = b.execution_id AND e.kind IN ('finish', 'interrupted')
                 WHERE b.kind IN ('begin', 'rejected')
                   AND ($1::TEXT IS NULL OR b.profile = $1)
                   AND ($2::TEXT IS NULL OR COALESCE(e.status, b.status) = $2)
                   AND ($3::TEXT IS NULL OR COALESCE(e.language, b.language) = $3)
                   AND ($4::TEXT IS NULL OR b.caller = $4)
                   AND ($9::TEXT IS NULL OR left(b.caller, length($9)) = $9)
                   AND ($5::BIGINT IS NULL OR b.at_ms >= $5)
                   AND ($6::BIGINT IS NULL OR b.at_ms < $6)
                   AND ($7::BIGINT IS NULL OR b.seq < $7)
                 ORDER BY b.seq DESC LIMIT $8",
                &[&f.profile, &f.status, &f.language, &f.caller, &f.since_ms, &f.until_ms, &f.before_seq, &(limit + 1), &f.caller_prefix],
            )
            .map_err(pg("list"))
        })?;
        let ids: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        let mut records = Vec::new();
        for id in ids.iter().take(usize::try_from(limit).unwrap_or(1000)) {
            if let Some(r) = self.get_inner(id)? {
                records.push(r);
            }
        }
        let next_cursor = if ids.len() as i64 > limit { records.last().map(|r| r.seq) } else { None };
        Ok(Page { records, next_cursor })
    }

    fn events_inner(&mut self) -> Result<Vec<StoredEvent>, AuditError> {
        self.query_events("TRUE", &[])
    }

    fn verify_inner(&mut self) -> Result<VerifyReport, AuditError> {
        let rows = self.with(|c| c.query(&format!("SELECT {COLUMNS} FROM audit_events ORDER BY seq"), &[]).map_err(pg("verify")))?;
        let events: Vec<RawEvent> = rows.iter().map(raw).collect();
        let checkpoints: Vec<serde_json::Value> = events.iter().filter(|r| r.kind == "checkpoint").filter_map(|r| serde_json::from_str(&r.body).ok()).collect();
        let first = events.first().map(|r| r.seq);
        let hashes: std::collections::HashMap<i64, String> = events.iter().map(|r| (r.seq, r.hash.clone())).collect();
        let report = crate::chain::verify_events(events, &checkpoints);
        let mark = self.head.as_ref().map(HeadFile::read).transpose()?.flatten();
        Ok(crate::head::checked(report, mark, first, |seq| hashes.get(&seq).cloned()))
    }

    fn prune_inner(&mut self, before_ms: Option<i64>, keep_last: Option<u64>, now_ms: i64) -> Result<PruneReport, AuditError> {
        let lock = self.lock_head()?;
        let (report, mark) = self.with(|c| prune_in(c, before_ms, keep_last, now_ms))?;
        self.advance_head(lock, mark)?;
        Ok(report)
    }

    fn keep_result_inner(&mut self, owner: &str, id: &str, result: &str, bytes: u64, keep_results: u64, keep_bytes: u64) -> Result<(), AuditError> {
        let (bytes, keep_results, keep_bytes) = (to_i64(bytes), to_i64(keep_results), to_i64(keep_bytes));
        self.with(|c| {
            let mut tx = c.transaction().map_err(pg("keep result"))?;
            // One writer at a time trims, so two nodes never both keep past the caps.
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&KEPT_LOCK]).map_err(pg("keep result"))?;
            tx.execute(
                "INSERT INTO kept_results (execution_id, owner, bytes, result) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (execution_id) DO UPDATE SET owner = $2, bytes = $3, result = $4",
                &[&id, &owner, &bytes, &result],
            )
            .map_err(pg("keep result"))?;
            // The newest results whose running total stays within both caps are kept.
            tx.execute(
                "DELETE FROM kept_results WHERE execution_id IN (
                   SELECT execution_id FROM (
                     SELECT execution_id,
                            ROW_NUMBER() OVER (ORDER BY kept_seq DESC) AS n,
                            SUM(bytes) OVER (ORDER BY kept_seq DESC) AS total
                     FROM kept_results) k
                   WHERE k.n > $1::BIGINT OR k.total > $2::BIGINT)",
                &[&keep_results, &keep_bytes],
            )
            .map_err(pg("keep result"))?;
            tx.commit().map_err(pg("keep result"))
        })
    }

    fn kept_result_inner(&mut self, owner: &str, id: &str) -> Result<Option<String>, AuditError> {
        self.with(|c| {
            let row = c.query_opt("SELECT result FROM kept_results WHERE execution_id = $1 AND owner = $2", &[&id, &owner]).map_err(pg("kept result"))?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    fn kept_results_inner(&mut self, owner: &str) -> Result<Vec<String>, AuditError> {
        self.with(|c| {
            let rows = c.query("SELECT result FROM kept_results WHERE owner = $1 ORDER BY kept_seq DESC", &[&owner]).map_err(pg("kept results"))?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn execute_raw_inner(&mut self, sql: &str) -> Result<u64, AuditError> {
        self.with(|c| c.execute(sql, &[]).map_err(pg("execute")))
    }
}

/// Prunes inside one locked transaction; returns the report and, when a checkpoint was
/// appended, the head mark it leaves.
fn prune_in(c: &mut Client, before_ms: Option<i64>, keep_last: Option<u64>, now_ms: i64) -> Result<(PruneReport, Option<HeadMark>), AuditError> {
    {
        let mut tx = locked(c, "prune")?;
        let one = |tx: &mut postgres::Transaction<'_>, sql: &str, p: &[&(dyn postgres::types::ToSql + Sync)]| -> Result<Option<i64>, AuditError> {
            Ok(tx.query_one(sql, p).map_err(pg("prune"))?.get::<_, Option<i64>>(0))
        };
        let last = one(&mut tx, "SELECT MAX(seq) FROM audit_events", &[])?.unwrap_or(0);
        let mut cut = 0;
        if let Some(t) = before_ms {
            cut = cut.max(one(&mut tx, "SELECT MAX(seq) FROM audit_events WHERE at_ms < $1", &[&t])?.unwrap_or(0));
        }
        if let Some(k) = keep_last {
            cut = cut.max(last - i64::try_from(k).unwrap_or(i64::MAX).min(last));
        }
        let open = one(&mut tx, &format!("SELECT MIN(seq) FROM audit_events WHERE {OPEN_BEGIN}"), &[])?;
        if let Some(o) = open {
            cut = cut.min(o - 1);
        }
        let first = one(&mut tx, "SELECT MIN(seq) FROM audit_events", &[])?.unwrap_or(0);
        if cut < first || cut >= last {
            return Ok((PruneReport { events: 0, through_seq: 0 }, None));
        }
        let pruned_hash: String = tx.query_one("SELECT hash FROM audit_events WHERE seq = $1", &[&cut]).map_err(pg("prune"))?.get(0);
        let last_hash: String = tx.query_one("SELECT hash FROM audit_events WHERE seq = $1", &[&last]).map_err(pg("prune"))?.get(0);
        let events = one(&mut tx, "SELECT COUNT(*) FROM audit_events WHERE seq <= $1", &[&cut])?.unwrap_or(0);
        let body = serde_json::json!({ "schemaVersion": crate::SCHEMA_VERSION, "prunedThroughSeq": cut, "prunedHash": pruned_hash, "prunedEvents": events })
            .to_string();
        let seq = last + 1;
        let id = format!("checkpoint-{seq}");
        let hash = event_hash(seq, &id, "checkpoint", now_ms, "retention", "", None, "checkpoint", &body, &last_hash);
        tx.execute(
            &format!("INSERT INTO audit_events ({COLUMNS}) VALUES ($1, $2, 'checkpoint', $3, 'retention', '', NULL, 'checkpoint', $4, $5, $6)"),
            &[&seq, &id, &now_ms, &body, &last_hash, &hash],
        )
        .map_err(pg("prune"))?;
        tx.execute("DELETE FROM audit_events WHERE seq <= $1", &[&cut]).map_err(pg("prune"))?;
        // Nothing at or before the cut is open: what is listed there was left by an older build.
        tx.execute("DELETE FROM audit_open WHERE seq <= $1", &[&cut]).map_err(pg("prune"))?;
        tx.commit().map_err(pg("prune"))?;
        Ok((PruneReport { events: u64::try_from(events).unwrap_or(0), through_seq: cut }, Some(HeadMark { seq, hash, execution_id: id })))
    }
}

/// The sync `postgres` client drives its own runtime and refuses to run inside another (the
/// engine calls the recorder from async code), so each call runs on a short-lived thread.
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(f).join().expect("a postgres call panicked"))
}

impl crate::AuditStore for PostgresStore {
    fn append(&mut self, e: &NewEvent) -> Result<StoredEvent, AuditError> {
        off_runtime(|| self.append_inner(e, false))
    }
    fn unfinished(&mut self) -> Result<Vec<StoredEvent>, AuditError> {
        off_runtime(|| self.unfinished_inner())
    }
    fn get(&mut self, execution_id: &str) -> Result<Option<AuditRecord>, AuditError> {
        off_runtime(|| self.get_inner(execution_id))
    }
    fn list(&mut self, f: &ListFilter) -> Result<Page, AuditError> {
        off_runtime(|| self.list_inner(f))
    }
    fn events(&mut self) -> Result<Vec<StoredEvent>, AuditError> {
        off_runtime(|| self.events_inner())
    }
    fn verify(&mut self) -> Result<VerifyReport, AuditError> {
        off_runtime(|| self.verify_inner())
    }
    fn prune(&mut self, before_ms: Option<i64>, keep_last: Option<u64>, now_ms: i64) -> Result<PruneReport, AuditError> {
        off_runtime(|| self.prune_inner(before_ms, keep_last, now_ms))
    }
    fn execute_raw(&mut self, sql: &str) -> Result<u64, AuditError> {
        off_runtime(|| self.execute_raw_inner(sql))
    }
    fn has_leases(&self) -> bool {
        true
    }
    fn append_begin(&mut self, e: &NewEvent, lease: &Lease<'_>) -> Result<Begin, AuditError> {
        off_runtime(|| self.append_begin_inner(e, lease))
    }
    fn append_end(&mut self, e: &NewEvent) -> Result<StoredEvent, AuditError> {
        off_runtime(|| self.append_inner(e, true))
    }
    fn renew_leases(&mut self, node_id: &str, ids: &[String], ttl_ms: u64) -> Result<u64, AuditError> {
        off_runtime(|| self.renew_inner(node_id, ids, ttl_ms))
    }
    fn reap_expired_leases(&mut self) -> Result<Vec<String>, AuditError> {
        off_runtime(|| self.reap_inner())
    }
    fn keep_result(&mut self, owner: &str, execution_id: &str, result: &str, bytes: u64, keep_results: u64, keep_bytes: u64) -> Result<(), AuditError> {
        off_runtime(|| self.keep_result_inner(owner, execution_id, result, bytes, keep_results, keep_bytes))
    }
    fn kept_result(&mut self, owner: &str, execution_id: &str) -> Result<Option<String>, AuditError> {
        off_runtime(|| self.kept_result_inner(owner, execution_id))
    }
    fn kept_results(&mut self, owner: &str) -> Result<Vec<String>, AuditError> {
        off_runtime(|| self.kept_results_inner(owner))
    }
}
