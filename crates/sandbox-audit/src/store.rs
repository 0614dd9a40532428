//! [`AuditStore`]: the one interface both backends implement, with the same behaviour (and
//! the same test suite).

use crate::{AuditError, AuditRecord, ListFilter, NewEvent, Page, PruneReport, StoredEvent, VerifyReport};

/// An append-only, hash-chained event log (SQLite or PostgreSQL).
pub trait AuditStore: Send {
    /// Appends one event at the end of the chain, durably.
    /// Errors: the backend's; nothing is appended then.
    fn append(&mut self, e: &NewEvent) -> Result<StoredEvent, AuditError>;
    /// `begin` events with neither `finish` nor `interrupted`, oldest first.
    /// Errors: the backend's.
    fn unfinished(&mut self) -> Result<Vec<StoredEvent>, AuditError>;
    /// One execution's record.
    /// Errors: the backend's.
    fn get(&mut self, execution_id: &str) -> Result<Option<AuditRecord>, AuditError>;
    /// A page of records, newest first.
    /// Errors: the backend's.
    fn list(&mut self, f: &ListFilter) -> Result<Page, AuditError>;
    /// Every event in chain order.
    /// Errors: the backend's.
    fn events(&mut self) -> Result<Vec<StoredEvent>, AuditError>;
    /// Walks the chain; names the first event changed, removed or reordered.
    /// Errors: the backend's.
    fn verify(&mut self) -> Result<VerifyReport, AuditError>;
    /// Retention behind a chained checkpoint (see [`crate::SqliteStore::prune`]).
    /// Errors: the backend's; nothing is removed then.
    fn prune(&mut self, before_ms: Option<i64>, keep_last: Option<u64>, now_ms: i64) -> Result<PruneReport, AuditError>;
    /// Runs raw SQL, as an attacker with database access would (tests of tamper evidence).
    /// Errors: the backend's.
    fn execute_raw(&mut self, sql: &str) -> Result<u64, AuditError>;
    /// Whether `begin` events hold leases in this store (PostgreSQL: a database several nodes
    /// share); `false` for SQLite (one node, whose own process counts its quotas).
    fn has_leases(&self) -> bool {
        false
    }
    /// Appends the `begin` event `e` and, in a store with leases, its lease (`lease.node_id`,
    /// expiring `lease.ttl_ms` from now by the database's clock), in one transaction under the
    /// append lock, unless `lease.quota`'s key already holds `max_concurrent` unexpired leases.
    /// With leases, `e.at_ms` is replaced by the time of the append (taken under the lock, so
    /// that on one clock no begin is stamped before the finish that freed its place).
    /// Errors: the backend's; nothing is appended then.
    fn append_begin(&mut self, e: &NewEvent, _lease: &Lease<'_>) -> Result<Begin, AuditError> {
        self.append(e).map(|s| Begin::Appended(Box::new(s)))
    }
    /// Appends the `finish` or `interrupted` event `e` and drops the execution's lease, in one
    /// transaction (with leases, `e.at_ms` is the time of the append, as for
    /// [`AuditStore::append_begin`]).
    /// Errors: the backend's; nothing is appended then.
    fn append_end(&mut self, e: &NewEvent) -> Result<StoredEvent, AuditError> {
        self.append(e)
    }
    /// Extends the leases of `node_id`'s executions `ids` to `ttl_ms` from now (database clock);
    /// returns how many it extended.
    /// Errors: the backend's.
    fn renew_leases(&mut self, _node_id: &str, _ids: &[String], _ttl_ms: u64) -> Result<u64, AuditError> {
        Ok(0)
    }
    /// Ends every expired lease: appends `interrupted` (its `reason` naming the lease's node) for
    /// each execution that had not ended, and removes the lease, in one transaction under the
    /// append lock, so two nodes reaping at once append each `interrupted` once. Returns the
    /// execution ids marked interrupted.
    /// Errors: the backend's; nothing is changed then.
    fn reap_expired_leases(&mut self) -> Result<Vec<String>, AuditError> {
        Ok(Vec::new())
    }
    /// Keeps `result` (JSON) of `execution_id` for `owner`, `bytes` long as counted, so any node
    /// sharing this store can read it back; drops the oldest kept results past `keep_results`
    /// or `keep_bytes` in all. Stores that are not shared (SQLite) keep nothing: the MCP server
    /// keeps results in its own memory then.
    /// Errors: the backend's.
    fn keep_result(&mut self, _owner: &str, _execution_id: &str, _result: &str, _bytes: u64, _keep_results: u64, _keep_bytes: u64) -> Result<(), AuditError> {
        Ok(())
    }
    /// The result (JSON) kept for `owner` under `execution_id`.
    /// Errors: the backend's.
    fn kept_result(&mut self, _owner: &str, _execution_id: &str) -> Result<Option<String>, AuditError> {
        Ok(None)
    }
    /// The results (JSON) kept for `owner`, newest first.
    /// Errors: the backend's.
    fn kept_results(&mut self, _owner: &str) -> Result<Vec<String>, AuditError> {
        Ok(Vec::new())
    }
}

/// The lease a `begin` takes (see [`AuditStore::append_begin`]).
#[derive(Debug, Clone, Copy)]
pub struct Lease<'a> {
    /// The node that runs the execution and renews the lease.
    pub node_id: &'a str,
    /// How long the lease lasts without renewal, in ms.
    pub ttl_ms: u64,
    /// The caller's limit of running executions, if any.
    pub quota: Option<&'a sandbox_core::record::Quota>,
}

/// What [`AuditStore::append_begin`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Begin {
    /// The begin (and its lease) was appended.
    Appended(Box<StoredEvent>),
    /// Nothing was appended: the quota's key already holds `running` leases.
    Limited {
        /// Unexpired leases of the key.
        running: u32,
    },
}

impl AuditStore for crate::SqliteStore {
    fn append(&mut self, e: &NewEvent) -> Result<StoredEvent, AuditError> {
        Self::append(self, e)
    }
    fn unfinished(&mut self) -> Result<Vec<StoredEvent>, AuditError> {
        Self::unfinished(self)
    }
    fn get(&mut self, execution_id: &str) -> Result<Option<AuditRecord>, AuditError> {
        Self::get(self, execution_id)
    }
    fn list(&mut self, f: &ListFilter) -> Result<Page, AuditError> {
        Self::list(self, f)
    }
    fn events(&mut self) -> Result<Vec<StoredEvent>, AuditError> {
        Self::events(self)
    }
    fn verify(&mut self) -> Result<VerifyReport, AuditError> {
        Self::verify(self)
    }
    fn prune(&mut self, before_ms: Option<i64>, keep_last: Option<u64>, now_ms: i64) -> Result<PruneReport, AuditError> {
        Self::prune(self, before_ms, keep_last, now_ms)
    }
    fn execute_raw(&mut self, sql: &str) -> Result<u64, AuditError> {
        self.connection().execute(sql, []).map(|n| n as u64).map_err(|source| AuditError::Db { op: "execute", source })
    }
}

/// Opens the store named by `url`: `postgres://...` (or a libpq key=value string starting with
/// `host=`) for PostgreSQL, with this node's head file in `data_dir`
/// ([`crate::PostgresStore::head_file_name`]); else the SQLite file `<data_dir>/audit.db`, with
/// `audit.db.head` next to it.
/// Errors: the backend's.
pub fn open_store(url: Option<&str>, data_dir: &std::path::Path) -> Result<Box<dyn AuditStore>, AuditError> {
    match url {
        Some(u) if u.starts_with("postgres://") || u.starts_with("postgresql://") || u.starts_with("host=") => {
            let head = crate::head::HeadFile::new(data_dir.join(crate::PostgresStore::head_file_name(u)?));
            Ok(Box::new(crate::PostgresStore::connect(u)?.with_head(head)))
        }
        _ => Ok(Box::new(crate::SqliteStore::open(&data_dir.join("audit.db"))?)),
    }
}
