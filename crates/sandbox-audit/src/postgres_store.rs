//! The PostgreSQL backend, for several nodes sharing one log: the same table, the same chain.
//! Appends from every node are serialized by a transaction-scoped advisory lock, so the chain
//! stays one sequence without gaps. Each node anchors the newest event it appended in a head
//! file of its own ([`crate::head`]; a row in the same database would not be outside it).

use postgres::{Client, NoTls};

use crate::chain::RawEvent;
use crate::head::{HeadFile, HeadLock, HeadMark};
use crate::sqlite::record_of;
use crate::{event_hash, AuditError, AuditRecord, EventKind, ListFilter, NewEvent, Page, PruneReport, StoredEvent, VerifyReport, GENESIS};

/// Advisory lock key held while appending (any constant; "sandbox audit").
const APPEND_LOCK: i64 = 0x5a4e_4442_4155_4454;

const MIGRATIONS: &[&str] = &[r"
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
"];

fn pg(op: &'static str) -> impl FnOnce(postgres::Error) -> AuditError {
    move |source| AuditError::Pg { op, source }
}

const COLUMNS: &str = "seq, execution_id, kind, at_ms, caller, profile, language, status, body, prev_hash, hash";

/// The audit log in a PostgreSQL database.
pub struct PostgresStore {
    client: Client,
    head: Option<HeadFile>,
}

impl PostgresStore {
    /// Connects (`postgres://user@host:port/db` or libpq `host=... port=...`) and applies pending
    /// migrations (tracked in `audit_schema`, under the append lock so nodes do not race).
    /// Errors: [`AuditError::Pg`].
    pub fn connect(url: &str) -> Result<Self, AuditError> {
        off_runtime(|| Self::connect_inner(url))
    }

    fn connect_inner(url: &str) -> Result<Self, AuditError> {
        let mut client = Client::connect(url, NoTls).map_err(pg("connect"))?;
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
        Ok(Self { client, head: None })
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

    fn advance_head(&mut self, lock: Option<HeadLock>, mark: HeadMark) -> Result<(), AuditError> {
        let (Some(head), Some(lock)) = (self.head.clone(), lock) else { return Ok(()) };
        let client = &mut self.client;
        head.advance(&lock, &mark, |old| {
            let row = client.query_opt("SELECT hash FROM audit_events WHERE seq = $1", &[&old.seq]).map_err(pg("head"))?;
            Ok(row.map(|r| r.get::<_, String>(0)).as_deref() == Some(old.hash.as_str()))
        })?;
        Ok(())
    }

    fn query_events(&mut self, clause: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) -> Result<Vec<StoredEvent>, AuditError> {
        let rows = self.client.query(&format!("SELECT {COLUMNS} FROM audit_events WHERE {clause} ORDER BY seq"), params).map_err(pg("query"))?;
        rows.iter().map(|r| stored(&raw(r))).collect()
    }
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
    fn append_inner(&mut self, e: &NewEvent) -> Result<StoredEvent, AuditError> {
        let lock = self.lock_head()?;
        let mut tx = self.client.transaction().map_err(pg("append"))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&APPEND_LOCK]).map_err(pg("append"))?;
        let last = tx.query_opt("SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1", &[]).map_err(pg("append"))?;
        let (seq, prev_hash): (i64, String) = match last {
            Some(r) => (r.get::<_, i64>(0) + 1, r.get(1)),
            None => (1, GENESIS.to_owned()),
        };
        let body = e.body.to_string();
        let hash = event_hash(seq, &e.execution_id, e.kind.as_str(), e.at_ms, &e.caller, &e.profile, e.language.as_deref(), &e.status, &body, &prev_hash);
        tx.execute(
            &format!("INSERT INTO audit_events ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"),
            &[&seq, &e.execution_id, &e.kind.as_str(), &e.at_ms, &e.caller, &e.profile, &e.language, &e.status, &body, &prev_hash, &hash],
        )
        .map_err(pg("append"))?;
        tx.commit().map_err(pg("append"))?;
        self.advance_head(lock, HeadMark { seq, hash: hash.clone(), execution_id: e.execution_id.clone() })?;
        stored(&RawEvent {
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
        })
    }

    fn unfinished_inner(&mut self) -> Result<Vec<StoredEvent>, AuditError> {
        self.query_events(
            "kind = 'begin' AND NOT EXISTS (SELECT 1 FROM audit_events f WHERE f.execution_id = audit_events.execution_id AND f.kind IN ('finish', 'interrupted'))",
            &[],
        )
    }

    fn get_inner(&mut self, execution_id: &str) -> Result<Option<AuditRecord>, AuditError> {
        let events = self.query_events("execution_id = $1", &[&execution_id])?;
        Ok(record_of(&events))
    }

    fn list_inner(&mut self, f: &ListFilter) -> Result<Page, AuditError> {
        let limit = i64::from(f.limit.clamp(1, 1000));
        let rows = self
            .client
            .query(
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
            .map_err(pg("list"))?;
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
        let rows = self.client.query(&format!("SELECT {COLUMNS} FROM audit_events ORDER BY seq"), &[]).map_err(pg("verify"))?;
        let events: Vec<RawEvent> = rows.iter().map(raw).collect();
        let checkpoints: Vec<serde_json::Value> =
            events.iter().filter(|r| r.kind == "checkpoint").filter_map(|r| serde_json::from_str(&r.body).ok()).collect();
        let first = events.first().map(|r| r.seq);
        let hashes: std::collections::HashMap<i64, String> = events.iter().map(|r| (r.seq, r.hash.clone())).collect();
        let report = crate::chain::verify_events(events, &checkpoints);
        let mark = self.head.as_ref().map(HeadFile::read).transpose()?.flatten();
        Ok(crate::head::checked(report, mark, first, |seq| hashes.get(&seq).cloned()))
    }

    fn prune_inner(&mut self, before_ms: Option<i64>, keep_last: Option<u64>, now_ms: i64) -> Result<PruneReport, AuditError> {
        let lock = self.lock_head()?;
        let mut tx = self.client.transaction().map_err(pg("prune"))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&APPEND_LOCK]).map_err(pg("prune"))?;
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
        let open = one(
            &mut tx,
            "SELECT MIN(seq) FROM audit_events b WHERE kind = 'begin' AND NOT EXISTS
               (SELECT 1 FROM audit_events f WHERE f.execution_id = b.execution_id AND f.kind IN ('finish', 'interrupted'))",
            &[],
        )?;
        if let Some(o) = open {
            cut = cut.min(o - 1);
        }
        let first = one(&mut tx, "SELECT MIN(seq) FROM audit_events", &[])?.unwrap_or(0);
        if cut < first || cut >= last {
            return Ok(PruneReport { events: 0, through_seq: 0 });
        }
        let pruned_hash: String = tx.query_one("SELECT hash FROM audit_events WHERE seq = $1", &[&cut]).map_err(pg("prune"))?.get(0);
        let last_hash: String = tx.query_one("SELECT hash FROM audit_events WHERE seq = $1", &[&last]).map_err(pg("prune"))?.get(0);
        let events = one(&mut tx, "SELECT COUNT(*) FROM audit_events WHERE seq <= $1", &[&cut])?.unwrap_or(0);
        let body = serde_json::json!({ "schemaVersion": crate::SCHEMA_VERSION, "prunedThroughSeq": cut, "prunedHash": pruned_hash, "prunedEvents": events }).to_string();
        let seq = last + 1;
        let id = format!("checkpoint-{seq}");
        let hash = event_hash(seq, &id, "checkpoint", now_ms, "retention", "", None, "checkpoint", &body, &last_hash);
        tx.execute(
            &format!("INSERT INTO audit_events ({COLUMNS}) VALUES ($1, $2, 'checkpoint', $3, 'retention', '', NULL, 'checkpoint', $4, $5, $6)"),
            &[&seq, &id, &now_ms, &body, &last_hash, &hash],
        )
        .map_err(pg("prune"))?;
        tx.execute("DELETE FROM audit_events WHERE seq <= $1", &[&cut]).map_err(pg("prune"))?;
        tx.commit().map_err(pg("prune"))?;
        self.advance_head(lock, HeadMark { seq, hash, execution_id: id })?;
        Ok(PruneReport { events: u64::try_from(events).unwrap_or(0), through_seq: cut })
    }

    fn execute_raw_inner(&mut self, sql: &str) -> Result<u64, AuditError> {
        self.client.execute(sql, &[]).map_err(pg("execute"))
    }
}

/// The sync `postgres` client drives its own runtime and refuses to run inside another (the
/// engine calls the recorder from async code), so each call runs on a short-lived thread.
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(f).join().expect("a postgres call panicked"))
}

impl crate::AuditStore for PostgresStore {
    fn append(&mut self, e: &NewEvent) -> Result<StoredEvent, AuditError> {
        off_runtime(|| self.append_inner(e))
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
}
