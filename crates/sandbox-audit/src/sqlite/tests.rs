#![allow(clippy::print_stderr)] // a visible skip when no PostgreSQL is configured
//! The store suite: every test runs on SQLite and, when `SANDBOX_TEST_POSTGRES_URL` names a
//! server (CI starts one), on PostgreSQL, so both backends keep the same behaviour.

use crate::{open_store, AuditStore, EventKind, ListFilter, NewEvent, PruneReport, RecordState, VerifyReport};

fn event(id: &str, kind: EventKind, status: &str) -> NewEvent {
    NewEvent {
        execution_id: id.into(),
        kind,
        at_ms: 1_700_000_000_000,
        caller: "alice".into(),
        profile: "python-default".into(),
        language: Some("python".into()),
        status: status.into(),
        body: serde_json::json!({"code": {"text": "print(1)"}}),
    }
}

/// Keeps a test's database alive: the SQLite directory, or the PostgreSQL database to drop.
pub(crate) enum Scratch {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres { admin_url: String, db: String },
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Self::Postgres { admin_url, db } = self {
            if let Ok(mut c) = postgres::Client::connect(admin_url, postgres::NoTls) {
                let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
            }
        }
    }
}

/// A fresh PostgreSQL database (dropped with the [`Scratch`]) and its URL, when
/// `SANDBOX_TEST_POSTGRES_URL` is set; CI requires it, elsewhere `None` is a visible skip.
pub(crate) fn postgres_scratch() -> Option<(Scratch, String)> {
    match std::env::var("SANDBOX_TEST_POSTGRES_URL") {
        Ok(admin_url) => {
            let db = format!("audit_test_{}", uuid::Uuid::now_v7().simple());
            postgres::Client::connect(&admin_url, postgres::NoTls).unwrap().batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
            let url = format!("{admin_url} dbname={db}");
            Some((Scratch::Postgres { admin_url, db }, url))
        }
        Err(_) if std::env::var_os("CI").is_some() => panic!("CI must provide SANDBOX_TEST_POSTGRES_URL (scripts/test.sh starts PostgreSQL)"),
        Err(_) => {
            eprintln!("skipped: PostgreSQL backend (set SANDBOX_TEST_POSTGRES_URL to run it)");
            None
        }
    }
}

/// Runs `test` on every backend available: SQLite always; PostgreSQL when
/// `SANDBOX_TEST_POSTGRES_URL` is set, which CI requires (a missing server fails on CI and is a
/// visible skip elsewhere).
pub(crate) fn on_each_backend(test: impl Fn(&mut dyn AuditStore, &dyn Fn() -> Box<dyn AuditStore>)) {
    each_backend(|s, reopen, _| test(s, reopen));
}

/// [`on_each_backend`], also handing the test the directory that holds the store's head file.
fn each_backend(test: impl Fn(&mut dyn AuditStore, &dyn Fn() -> Box<dyn AuditStore>, &std::path::Path)) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    let reopen = {
        let path = path.clone();
        move || open_store(None, &path).unwrap()
    };
    let mut s = reopen();
    test(s.as_mut(), &reopen, &path);
    drop(s);
    drop(Scratch::Sqlite(dir));
    match std::env::var("SANDBOX_TEST_POSTGRES_URL") {
        Ok(admin_url) => {
            let db = format!("audit_test_{}", uuid::Uuid::now_v7().simple());
            postgres::Client::connect(&admin_url, postgres::NoTls).unwrap().batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
            let scratch = Scratch::Postgres { admin_url: admin_url.clone(), db: db.clone() };
            let url = format!("{admin_url} dbname={db}");
            // The node's data directory, which holds its head file.
            let node = tempfile::tempdir().unwrap();
            let node_dir = node.path().to_owned();
            let reopen = {
                let node_dir = node_dir.clone();
                move || open_store(Some(&url), &node_dir).unwrap()
            };
            let mut s = reopen();
            test(s.as_mut(), &reopen, &node_dir);
            drop(s);
            drop(scratch);
        }
        Err(_) if std::env::var_os("CI").is_some() => panic!("CI must provide SANDBOX_TEST_POSTGRES_URL (scripts/test.sh starts PostgreSQL)"),
        Err(_) => eprintln!("skipped: PostgreSQL backend (set SANDBOX_TEST_POSTGRES_URL to run it)"),
    }
}

fn filled(s: &mut dyn AuditStore) {
    for (i, status) in ["ok", "error", "timeout"].iter().enumerate() {
        let id = format!("e{i}");
        s.append(&event(&id, EventKind::Begin, "running")).unwrap();
        s.append(&event(&id, EventKind::Finish, status)).unwrap();
    }
    s.append(&event("r1", EventKind::Rejected, "rejected")).unwrap();
    s.append(&event("e9", EventKind::Begin, "running")).unwrap();
}

#[test]
fn records_join_events_and_list_newest_first_with_cursor() {
    on_each_backend(|s, _| records_join_events_and_list(s));
}

fn records_join_events_and_list(s: &mut dyn AuditStore) {
    filled(s);
    let r = s.get("e1").unwrap().unwrap();
    assert_eq!((r.state.as_str(), r.status.as_str(), r.caller.as_str()), ("finished", "error", "alice"));
    assert_eq!(s.get("r1").unwrap().unwrap().state, RecordState::Rejected);
    assert_eq!(s.get("e9").unwrap().unwrap().state, RecordState::Running);
    let page = s.list(&ListFilter { limit: 2, ..Default::default() }).unwrap();
    let ids: Vec<&str> = page.records.iter().map(|r| r.execution_id.as_str()).collect();
    assert_eq!(ids, ["e9", "r1"]);
    let next = s.list(&ListFilter { limit: 2, before_seq: page.next_cursor, ..Default::default() }).unwrap();
    let ids: Vec<&str> = next.records.iter().map(|r| r.execution_id.as_str()).collect();
    assert_eq!(ids, ["e2", "e1"]);
    let last = s.list(&ListFilter { limit: 2, before_seq: next.next_cursor, ..Default::default() }).unwrap();
    assert_eq!(last.records.len(), 1);
    assert_eq!(last.next_cursor, None);
    let timeouts = s.list(&ListFilter { status: Some("timeout".into()), limit: 10, ..Default::default() }).unwrap();
    assert_eq!(timeouts.records.len(), 1);
    let mut prefixed = |p: &str| s.list(&ListFilter { caller_prefix: Some(p.into()), limit: 10, ..Default::default() }).unwrap().records.len();
    assert_eq!((prefixed("ali"), prefixed("alice"), prefixed("alicex"), prefixed("bob")), (5, 5, 0, 0));
    assert_eq!(s.unfinished().unwrap().iter().map(|e| e.execution_id.as_str()).collect::<Vec<_>>(), ["e9"]);
}

#[test]
fn verify_passes_untouched_and_names_a_changed_row() {
    on_each_backend(|s, _| changed_row(s));
}

fn changed_row(s: &mut dyn AuditStore) {
    filled(s);
    assert_eq!(s.verify().unwrap(), VerifyReport { events: 8, broken: None, head: s.verify().unwrap().head });
    s.execute_raw("UPDATE audit_events SET status = 'ok' WHERE execution_id = 'e1' AND kind = 'finish'").unwrap();
    let b = s.verify().unwrap().broken.unwrap();
    assert_eq!((b.seq, b.execution_id.as_str(), b.problem.as_str()), (4, "e1", "changed"));
}

#[test]
fn verify_names_a_removed_row() {
    on_each_backend(|s, _| removed_row(s));
}

fn removed_row(s: &mut dyn AuditStore) {
    filled(s);
    s.execute_raw("DELETE FROM audit_events WHERE seq = 3").unwrap();
    let b = s.verify().unwrap().broken.unwrap();
    assert_eq!((b.seq, b.execution_id.as_str(), b.problem.as_str()), (4, "e1", "removed"));
}

/// Issue 17, item 5: a chain alone cannot see its tail cut off; the head file can.
#[track_caller]
fn check_truncation(s: &mut dyn AuditStore, delete_from_seq: i64, appended_after: &[&str], want: Option<(i64, &str, &str)>) {
    filled(s);
    assert_eq!(s.verify().unwrap().broken, None);
    s.execute_raw(&format!("DELETE FROM audit_events WHERE seq >= {delete_from_seq}")).unwrap();
    for id in appended_after {
        s.append(&event(id, EventKind::Rejected, "rejected")).unwrap();
    }
    let b = s.verify().unwrap().broken;
    assert_eq!(b.as_ref().map(|b| (b.seq, b.execution_id.as_str(), b.problem.as_str())), want);
}

#[test]
fn verify_names_the_newest_event_removed() {
    on_each_backend(|s, _| check_truncation(s, 8, &[], Some((8, "e9", "truncated"))));
}

#[test]
fn verify_names_the_newest_events_removed() {
    on_each_backend(|s, _| check_truncation(s, 3, &[], Some((8, "e9", "truncated"))));
}

#[test]
fn verify_names_a_truncation_that_later_appends_cover() {
    // One append after the cut: the chain's new end is seq 7, the head still names seq 8.
    on_each_backend(|s, _| check_truncation(s, 7, &["x1"], Some((8, "e9", "truncated"))));
    // Two: seq 8 exists again, but it is another event.
    on_each_backend(|s, _| check_truncation(s, 7, &["x1", "x2"], Some((8, "e9", "rewritten"))));
}

#[test]
fn verify_passes_a_whole_chain_and_an_emptied_log_is_truncated() {
    on_each_backend(|s, _| check_truncation(s, 9, &[], None));
    on_each_backend(|s, _| check_truncation(s, 1, &[], Some((8, "e9", "truncated"))));
}

/// The head file's writes are not synced, so a power loss can set it back, to a mark a prune
/// has removed since. The next append moves it on, so a later cut of the newest events is
/// still reported. (The mark stayed there for good: `verify` passes a mark before the first
/// event kept, and no cut was ever reported again.)
#[test]
fn a_head_set_back_past_a_prune_moves_on_and_still_reports_a_cut() {
    each_backend(|s, _, dir| {
        let head = || {
            let found: Vec<_> =
                std::fs::read_dir(dir).unwrap().filter_map(Result::ok).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "head")).collect();
            assert_eq!(found.len(), 1, "{found:?}");
            found[0].clone()
        };
        s.append(&event("old", EventKind::Rejected, "rejected")).unwrap();
        let set_back = std::fs::read(head()).unwrap();
        filled(s);
        assert!(s.prune(None, Some(2), 1_800_000_000_000).unwrap().events > 0);
        // The disk after a power loss: the first mark, whose event the prune removed.
        std::fs::write(head(), &set_back).unwrap();
        assert_eq!(s.verify().unwrap().head.map(|h| h.seq), Some(1));
        let x = s.append(&event("x1", EventKind::Rejected, "rejected")).unwrap();
        let report = s.verify().unwrap();
        assert_eq!((report.head.map(|h| h.seq), report.broken), (Some(x.seq), None), "the head moved on to the newest event");
        s.execute_raw(&format!("DELETE FROM audit_events WHERE seq >= {}", x.seq)).unwrap();
        let b = s.verify().unwrap().broken.unwrap();
        assert_eq!((b.seq, b.execution_id.as_str(), b.problem.as_str()), (x.seq, "x1", "truncated"));
    });
}

#[test]
fn verify_names_a_reordered_row() {
    on_each_backend(|s, _| reordered_row(s));
}

fn reordered_row(s: &mut dyn AuditStore) {
    filled(s);
    // Swap two events' positions, rehashing neither: each no longer follows its predecessor.
    s.execute_raw("UPDATE audit_events SET seq = 100 WHERE seq = 2").unwrap();
    s.execute_raw("UPDATE audit_events SET seq = 2 WHERE seq = 3").unwrap();
    s.execute_raw("UPDATE audit_events SET seq = 3 WHERE seq = 100").unwrap();
    let b = s.verify().unwrap().broken.unwrap();
    assert_eq!(b.seq, 2);
    assert!(b.problem == "changed" || b.problem == "reordered", "{b:?}");
}

#[test]
fn reopening_keeps_the_chain_and_migrations_are_idempotent() {
    on_each_backend(|s, reopen| {
        filled(s);
        let mut s = reopen();
        reopened(s.as_mut());
    });
}

fn reopened(s: &mut dyn AuditStore) {
    s.append(&event("e10", EventKind::Begin, "running")).unwrap();
    let report = s.verify().unwrap();
    assert_eq!((report.events, report.broken), (9, None));
    assert_eq!(report.head.map(|h| (h.seq, h.execution_id)), Some((9, "e10".to_owned())), "the head file names the newest event");
}

#[test]
fn capped_text_keeps_length_and_digest() {
    let v = crate::capped_text("héllo world", 3);
    assert_eq!(v["text"], "hé");
    assert_eq!(v["bytes"], 12);
    assert_eq!(v["truncated"], true);
    assert_eq!(v["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(crate::capped_text("ok", 3)["truncated"], false);
}

#[test]
fn retention_prunes_a_prefix_that_still_verifies_and_its_checkpoint_is_guarded() {
    on_each_backend(|s, _| retention_prefix(s));
}

fn retention_prefix(s: &mut dyn AuditStore) {
    filled(s);
    // e9 is still running: its begin (seq 8) and everything after stay.
    let r = s.prune(None, Some(2), 1_800_000_000_000).unwrap();
    assert_eq!(r, PruneReport { events: 6, through_seq: 6 });
    assert_eq!(s.verify().unwrap().broken, None);
    assert!(s.get("e0").unwrap().is_none());
    assert_eq!(s.get("e9").unwrap().unwrap().state, RecordState::Running);
    // Keeping nothing still stops at e9's begin: only the rejection (seq 7) before it goes.
    assert_eq!(s.prune(None, Some(0), 1_800_000_000_000).unwrap(), PruneReport { events: 1, through_seq: 7 });
    assert_eq!(s.prune(None, Some(0), 1_800_000_000_000).unwrap().events, 0);
    assert_eq!(s.verify().unwrap().broken, None);
    // Removing the checkpoints breaks the chain at the first event kept.
    s.execute_raw("DELETE FROM audit_events WHERE kind = 'checkpoint'").unwrap();
    let b = s.verify().unwrap().broken.unwrap();
    assert_eq!((b.seq, b.problem.as_str()), (8, "removed"));
}

#[test]
fn retention_by_age_keeps_newer_events() {
    on_each_backend(|s, _| retention_age(s));
}

fn retention_age(s: &mut dyn AuditStore) {
    for (i, at) in [1_000, 2_000, 3_000].iter().enumerate() {
        let mut e = event(&format!("x{i}"), EventKind::Begin, "running");
        e.at_ms = *at;
        s.append(&e).unwrap();
        let mut f = event(&format!("x{i}"), EventKind::Finish, "ok");
        f.at_ms = *at + 10;
        s.append(&f).unwrap();
    }
    let r = s.prune(Some(2_500), None, 5_000).unwrap();
    assert_eq!(r.through_seq, 4);
    assert!(s.get("x1").unwrap().is_none() && s.get("x2").unwrap().is_some());
    assert_eq!(s.verify().unwrap().broken, None);
}

#[test]
fn an_unknown_event_kind_is_an_error_not_a_refusal() {
    on_each_backend(|s, _| {
        filled(s);
        s.execute_raw("UPDATE audit_events SET kind = 'bogus' WHERE execution_id = 'r1'").unwrap();
        let err = s.get("r1").unwrap_err();
        assert!(matches!(&err, crate::AuditError::UnknownKind { kind, .. } if kind == "bogus"), "{err:?}");
        let page = s.list(&ListFilter { limit: 50, ..Default::default() }).unwrap();
        assert!(page.records.iter().all(|r| r.execution_id != "r1"), "not listed as a refusal either");
    });
}

/// A closed connection leaves its WAL unmerged (no checkpoint at close), yet the WAL stays
/// bounded by the automatic checkpoint, and a reopened log holds every event.
#[test]
fn the_wal_survives_close_and_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let wal = dir.path().join("audit.db-wal");
    for round in 0..40 {
        let mut s = crate::sqlite::SqliteStore::open(&path).unwrap();
        s.append(&event(&format!("e{round}"), EventKind::Begin, "running")).unwrap();
        s.append(&event(&format!("e{round}"), EventKind::Finish, "ok")).unwrap();
        drop(s);
        assert!(wal.exists(), "round {round}: the WAL was removed at close (checkpointed)");
        let pages = (std::fs::metadata(&wal).unwrap().len() / 4096) as i64;
        assert!(pages <= 2 * super::WAL_PAGES, "round {round}: the WAL holds {pages} pages");
    }
    let s = crate::sqlite::SqliteStore::open(&path).unwrap();
    let report = s.verify().unwrap();
    assert_eq!((report.events, report.broken), (80, None));
}

/// Virtual-machine steps SQLite took to run [`super::UNFINISHED`] to the end: a count of the
/// work, the same on every machine (no clock).
fn unfinished_steps(s: &crate::sqlite::SqliteStore) -> i32 {
    let mut stmt = s.connection().prepare(super::UNFINISHED).unwrap();
    let mut rows = stmt.query([]).unwrap();
    while rows.next().unwrap().is_some() {}
    drop(rows);
    stmt.get_status(rusqlite::StatementStatus::VmStep)
}

/// Every `sandbox run` asks for the unfinished executions at start (recovery), so that query
/// must read the open executions only: a log of 400 finished executions costs it no more than
/// a log of 4.
#[test]
fn finding_unfinished_executions_does_not_read_the_whole_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = crate::sqlite::SqliteStore::open(&dir.path().join("audit.db")).unwrap();
    s.append(&event("open", EventKind::Begin, "running")).unwrap();
    let mut steps = Vec::new();
    for finished in [4, 400] {
        for i in 0..finished {
            let id = format!("f{finished}-{i}");
            s.append(&event(&id, EventKind::Begin, "running")).unwrap();
            s.append(&event(&id, EventKind::Finish, "ok")).unwrap();
        }
        steps.push(unfinished_steps(&s));
    }
    assert!(steps[1] <= steps[0] + 10, "VM steps with 4 finished executions {}, with 404: {}", steps[0], steps[1]);
    assert_eq!(s.unfinished().unwrap().len(), 1);
}

/// Retention by age runs under the write lock that every execution's `begin` and `finish`
/// wait for, so finding its cut must not read the whole log: a binary search over `seq`
/// (probes, each a lookup by primary key, grow with the log's logarithm), which finds the same
/// cut as `MAX(seq) WHERE at_ms < t`, also across the gap an earlier pass left and where stamps
/// are out of order.
#[test]
fn retention_by_age_does_not_read_the_whole_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = crate::sqlite::SqliteStore::open(&dir.path().join("audit.db")).unwrap();
    let full_scan = |s: &crate::sqlite::SqliteStore, t: i64| -> i64 {
        s.connection().query_row("SELECT COALESCE(MAX(seq), 0) FROM audit_events WHERE at_ms < ?1", [t], |r| r.get(0)).unwrap()
    };
    let mut at = 1_000;
    for i in 0..1000 {
        for kind in [EventKind::Begin, EventKind::Finish] {
            let mut e = event(&format!("x{i}"), kind, "ok");
            at += 10;
            e.at_ms = at;
            s.append(&e).unwrap();
        }
    }
    for t in [0, 1_000, 1_005, 1_010, 1_011, 5_555, 20_000, 20_010, 20_011, 1_000_000] {
        let (cut, probes) = super::age_cut(s.connection(), t).unwrap();
        assert_eq!(cut, full_scan(&s, t), "cut before {t}");
        assert!(probes <= 12, "{probes} probes for 2000 events");
    }
    // After a pass the log starts past a gap.
    let expected = full_scan(&s, 10_000);
    assert_eq!(s.prune(Some(10_000), None, 2_000_000).unwrap().through_seq, expected);
    for t in [0, 10_000, 10_011, 15_000, 1_000_000] {
        assert_eq!(super::age_cut(s.connection(), t).unwrap().0, full_scan(&s, t), "cut before {t} after a pass");
    }
    // Stamps out of order (writers whose appends interleave): an event older than t, never one
    // past the last such event.
    let mut e = event("late", EventKind::Rejected, "rejected");
    e.at_ms = 5;
    s.append(&e).unwrap();
    let (cut, _) = super::age_cut(s.connection(), 10).unwrap();
    assert!(cut <= full_scan(&s, 10), "{cut}");
    let stamped: i64 = s.connection().query_row("SELECT at_ms FROM audit_events WHERE seq = ?1", [cut], |r| r.get(0)).unwrap_or(0);
    assert!(cut == 0 || stamped < 10, "the cut's event is older than t: {stamped}");
}

fn ids(events: Vec<crate::StoredEvent>) -> Vec<String> {
    events.into_iter().map(|e| e.execution_id).collect()
}

#[test]
fn unfinished_executions_are_the_open_ones_oldest_first() {
    on_each_backend(|s, _| {
        s.append(&event("old-open", EventKind::Begin, "running")).unwrap();
        for i in 0..5 {
            s.append(&event(&format!("f{i}"), EventKind::Begin, "running")).unwrap();
            s.append(&event(&format!("f{i}"), EventKind::Finish, "ok")).unwrap();
        }
        s.append(&event("crashed", EventKind::Begin, "running")).unwrap();
        s.append(&event("crashed", EventKind::Interrupted, "interrupted")).unwrap();
        s.append(&event("r", EventKind::Rejected, "rejected")).unwrap();
        s.append(&event("new-open", EventKind::Begin, "running")).unwrap();
        assert_eq!(ids(s.unfinished().unwrap()), ["old-open", "new-open"]);
        s.append(&event("old-open", EventKind::Finish, "ok")).unwrap();
        assert_eq!(ids(s.unfinished().unwrap()), ["new-open"]);
        // The open table holds the open execution only: each end removed its entry.
        assert_eq!(s.execute_raw("DELETE FROM audit_open WHERE execution_id <> 'new-open'").unwrap(), 0);
        assert_eq!(s.verify().unwrap().broken, None);
    });
}

/// A log written before the open-executions table existed gets it filled from its events on
/// the first open, and recovery and retention see the same open executions as before.
#[test]
fn a_log_from_before_the_open_table_is_migrated() {
    on_each_backend(|s, reopen| {
        for id in ["a", "b", "c"] {
            s.append(&event(id, EventKind::Begin, "running")).unwrap();
        }
        s.append(&event("b", EventKind::Finish, "ok")).unwrap();
        s.append(&event("d", EventKind::Begin, "running")).unwrap();
        s.append(&event("d", EventKind::Interrupted, "interrupted")).unwrap();
        // Back to what the schema version before it wrote: no open table (nor the later index).
        s.execute_raw("DROP TABLE audit_open").unwrap();
        if s.has_leases() {
            // PostgreSQL's later migration, an index on at_ms, goes too.
            s.execute_raw("DROP INDEX audit_events_at_ms").unwrap();
        }
        let older = if s.has_leases() { "DELETE FROM audit_schema WHERE version >= 4" } else { "PRAGMA user_version = 1" };
        s.execute_raw(older).unwrap();
        let mut s = reopen();
        assert_eq!(ids(s.unfinished().unwrap()), ["a", "c"]);
        // Retention stops at a's begin (seq 1): nothing before it to cut.
        assert_eq!(s.prune(None, Some(0), 1_800_000_000_000).unwrap().events, 0);
        s.append(&event("a", EventKind::Finish, "ok")).unwrap();
        // Now up to c's begin (seq 3): a's and b's begins go.
        assert_eq!(s.prune(None, Some(0), 1_800_000_000_000).unwrap(), PruneReport { events: 2, through_seq: 2 });
        assert_eq!(s.verify().unwrap().broken, None);
    });
}

/// A `finish` appended by a build that did not know the open table (two versions sharing one
/// log during an upgrade) leaves its execution's entry behind; it is still not taken for open.
#[test]
fn an_entry_left_in_the_open_table_by_an_older_build_is_not_an_open_execution() {
    on_each_backend(|s, _| {
        s.append(&event("x", EventKind::Begin, "running")).unwrap();
        s.append(&event("x", EventKind::Finish, "ok")).unwrap();
        s.append(&event("y", EventKind::Begin, "running")).unwrap();
        s.execute_raw("INSERT INTO audit_open (execution_id, seq) VALUES ('x', 1)").unwrap();
        assert_eq!(ids(s.unfinished().unwrap()), ["y"]);
        assert_eq!(s.prune(None, Some(0), 1_800_000_000_000).unwrap().through_seq, 2, "x's events go, y's begin stays");
        // The left-over entry went with x's events.
        assert_eq!(s.execute_raw("DELETE FROM audit_open WHERE execution_id = 'x'").unwrap(), 0);
    });
}

#[path = "../../examples/common/relay.rs"]
mod relay;

/// A PostgreSQL append takes 3 round trips (`BEGIN`, the append lock and the chain's last event
/// in one query; the write; `COMMIT`), a `begin` with its lease and an `end` dropping it too,
/// counted by a relay between the store and the server once the connection's statements are
/// prepared: what ARCHITECTURE.md "The audit log" says, kept from growing back.
#[test]
fn a_postgres_append_takes_three_round_trips() {
    let Some((scratch, url)) = postgres_scratch() else { return };
    let config: postgres::Config = url.parse().unwrap();
    let postgres::config::Host::Tcp(host) = config.get_hosts()[0].clone() else { panic!("SANDBOX_TEST_POSTGRES_URL: a TCP host, not a socket") };
    let trips = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let port = relay::relay((host, config.get_ports().first().copied().unwrap_or(5432)), std::time::Duration::ZERO, trips.clone());
    let user = config.get_user().map(|u| format!(" user={u}")).unwrap_or_default();
    let relayed = format!("host=127.0.0.1 port={port} dbname={}{user}", config.get_dbname().unwrap());
    let node = tempfile::tempdir().unwrap();
    let mut s = open_store(Some(&relayed), node.path()).unwrap();
    let lease = crate::Lease { node_id: "n1", ttl_ms: 60_000, quota: None };
    let round = |s: &mut Box<dyn AuditStore>, id: &str| {
        assert!(matches!(s.append_begin(&event(id, EventKind::Begin, "running"), &lease).unwrap(), crate::Begin::Appended(_)));
        s.append_end(&event(id, EventKind::Finish, "ok")).unwrap();
        s.append(&event(&format!("{id}-r"), EventKind::Rejected, "rejected")).unwrap();
    };
    // The first round prepares each statement once on this connection.
    round(&mut s, "warm-up");
    let before = trips.load(std::sync::atomic::Ordering::Relaxed);
    for i in 0..5 {
        round(&mut s, &format!("e{i}"));
    }
    let trips = trips.load(std::sync::atomic::Ordering::Relaxed) - before;
    assert_eq!(trips, 15 * 3, "{trips} round trips for 15 appends, not 3 each");
    assert_eq!(s.verify().unwrap().broken, None);
    drop(s);
    drop(scratch);
}

/// Runs `f` on a thread of its own whose `syscall` fails with EIO (a seccomp filter on that
/// thread only: its no_new_privs and filter do not reach the test's other threads).
fn with_failing_syscall<T: Send>(syscall: &str, f: impl FnOnce() -> T + Send) -> T {
    use libseccomp::{ScmpAction, ScmpFilterContext, ScmpSyscall};
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let mut filter = ScmpFilterContext::new(ScmpAction::Allow).unwrap();
                filter.add_rule(ScmpAction::Errno(libc::EIO), ScmpSyscall::from_name(syscall).unwrap()).unwrap();
                filter.load().unwrap();
                f()
            })
            .join()
            .unwrap()
    })
}

/// Every sync of the SQLite log (the WAL at each commit, the database at a checkpoint, the head
/// file) is an fdatasync(2): the bundled SQLite is built with HAVE_FDATASYNC
/// (`.cargo/config.toml`), else it calls fsync(2), which also writes the inode whenever its
/// mtime moved, one more synchronous write per append. And the appends are still synced: with
/// fdatasync failing, an append fails.
#[test]
fn commits_sync_with_fdatasync_never_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let appended = with_failing_syscall("fsync", || -> Result<usize, crate::AuditError> {
        let mut s = crate::SqliteStore::open(&path)?;
        // Past WAL_PAGES, so that checkpoints and a WAL restart are among the syncs.
        for i in 0..40 {
            let id = format!("e{i}");
            s.append(&event(&id, EventKind::Begin, "running"))?;
            s.append(&event(&id, EventKind::Finish, "ok"))?;
        }
        Ok(80)
    });
    assert_eq!(appended.map_err(|e| e.to_string()), Ok(80), "an append called fsync(2)");
    let failed = with_failing_syscall("fdatasync", || crate::SqliteStore::open(&path).and_then(|mut s| s.append(&event("x", EventKind::Begin, "running"))));
    assert!(failed.is_err(), "an append that could not sync succeeded: {failed:?}");
}
