//! Leases and quotas through the recorder, as nodes use them: two logs on one PostgreSQL
//! database are two nodes.

use std::time::Duration;

use sandbox_core::record::{BeginError, Quota, Recorder};
use sandbox_core::{ExecutionRequest, ExecutionResult, Status};

use crate::sqlite::tests::postgres_scratch;
use crate::{AuditLog, Caps};

fn request() -> ExecutionRequest {
    serde_json::from_value(serde_json::json!({ "profile": "python-default", "language": "python", "code": "print(1)" })).unwrap()
}

fn finished(id: &str) -> ExecutionResult {
    ExecutionResult { execution_id: id.into(), status: Status::Ok, profile: "python-default".into(), ..Default::default() }
}

fn node(url: &str, name: &str, ttl_ms: u64) -> AuditLog {
    AuditLog::open_url(Some(url), std::path::Path::new("/nonexistent"), Caps::default()).unwrap().with_node(name, ttl_ms)
}

/// Whether `log` may begin `id` under `quota`: `None`, or the code of its refusal.
#[track_caller]
fn check(log: &AuditLog, id: &str, quota: &Quota, want_limited: bool) {
    let r = log.begin(id, "key:k", &request(), Some(quota));
    match (r, want_limited) {
        (Ok(()), false) => {}
        (Err(BeginError::ConcurrencyLimited { running, max, .. }), true) => assert_eq!((running, max), (quota.max_concurrent, quota.max_concurrent)),
        (r, _) => panic!("begin {id}: {r:?}, wanted limited: {want_limited}"),
    }
}

fn status(log: &AuditLog, id: &str) -> String {
    log.store().get(id).unwrap().map(|r| r.status).unwrap_or_default()
}

#[test]
fn a_quota_holds_over_nodes_and_frees_its_place_at_finish() {
    let quota = Quota { key: "key:k".into(), max_concurrent: 2 };
    // One node on SQLite: counted in the process.
    let dir = tempfile::tempdir().unwrap();
    let one = AuditLog::open(dir.path(), Caps::default()).unwrap();
    assert!(one.local() && !one.shares_results(), "a file on this host");
    check(&one, "s1", &quota, false);
    check(&one, "s2", &quota, false);
    check(&one, "s3", &quota, true);
    one.finish("key:k", &finished("s1")).unwrap();
    check(&one, "s3", &quota, false);
    // A refused begin recorded nothing.
    assert_eq!(status(&one, "s3"), "running");
    let Some((_scratch, url)) = postgres_scratch() else { return };
    let (a, b) = (node(&url, "a", 10_000), node(&url, "b", 10_000));
    assert!(!a.local() && a.shares_results(), "a database a network away");
    check(&a, "p1", &quota, false);
    check(&b, "p2", &quota, false);
    check(&a, "p3", &quota, true);
    check(&b, "p3", &quota, true);
    assert_eq!(status(&a, "p3"), "");
    // Another key is not counted.
    check(&b, "o1", &Quota { key: "key:other".into(), max_concurrent: 1 }, false);
    a.finish("key:k", &finished("p1")).unwrap();
    check(&b, "p3", &quota, false);
    // An abandoned execution keeps its place until its lease is reaped.
    b.abandoned("p2");
    check(&a, "p4", &quota, true);
}

#[test]
fn a_dead_nodes_executions_are_interrupted_by_a_survivor_and_a_live_ones_are_not() {
    let Some((_scratch, url)) = postgres_scratch() else { return };
    let ttl_ms = 600;
    let survivor = node(&url, "survivor", ttl_ms);
    let alive = node(&url, "alive", ttl_ms);
    let dying = node(&url, "dying", ttl_ms);
    alive.begin("kept", "key:k", &request(), None).unwrap();
    dying.begin("lost", "key:k", &request(), None).unwrap();
    dying.begin("done", "key:k", &request(), None).unwrap();
    dying.finish("key:k", &finished("done")).unwrap();
    // Before the lease ran out nothing is reaped.
    assert_eq!(survivor.tend_leases().unwrap(), Vec::<String>::new());
    // The node dies: nothing renews its lease any more.
    drop(dying);
    std::thread::sleep(Duration::from_millis(ttl_ms * 2));
    // The lease threads of the survivors may have reaped it already; either way, once.
    let reaped = survivor.tend_leases().unwrap();
    assert!(reaped.is_empty() || reaped == ["lost"], "{reaped:?}");
    assert_eq!((status(&survivor, "lost").as_str(), status(&survivor, "kept").as_str(), status(&survivor, "done").as_str()), ("interrupted", "running", "ok"));
    let events = survivor.store().events().unwrap();
    assert_eq!(events.iter().filter(|e| e.execution_id == "lost" && e.kind == crate::EventKind::Interrupted).count(), 1);
    let body = &events.iter().find(|e| e.execution_id == "lost" && e.kind == crate::EventKind::Interrupted).unwrap().body;
    assert_eq!(body["node"], "dying");
    // The live node's execution still finishes normally, and the chain verifies.
    alive.finish("key:k", &finished("kept")).unwrap();
    assert_eq!(status(&survivor, "kept"), "ok");
    assert_eq!(survivor.store().verify().unwrap().broken, None);
}
