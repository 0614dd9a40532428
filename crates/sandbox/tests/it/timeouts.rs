//! Timeouts: SIGTERM to everything, a grace period, SIGKILL of the whole sandbox; nothing left.
//! The real-world timeout cases are in the case table (cases.rs): a sleeping program ended by
//! SIGTERM (C13), ignored signals escalated to SIGKILL after the grace period (C11), a detached
//! grandchild with or without the run's stdout (C02), a TypeScript busy loop (C14), and a run
//! ending with its main process while a child keeps the pipe (C01).

use super::*;

/// Runs `code` under py-small (grace 1 s) with a 2 s timeout (stretched by
/// `SANDBOX_TEST_TIME_FACTOR`: under the v2 guest's TCG a program may need more than 2 s to
/// reach its first line) and checks the timeout contract.
#[track_caller]
fn check_timeout(profile: &str, code: &str) -> Run {
    let timeout = slack(Duration::from_secs(2));
    let r = run(profile, code, &["--timeout", &format!("{}ms", timeout.as_millis())]);
    assert_eq!((r.status(), r.json["timedOut"].as_bool()), ("timeout", Some(true)), "{r:?}");
    // timeout + grace + 1 s, plus start-up on a busy 2-core machine.
    assert!(r.elapsed < timeout + slack(Duration::from_millis(1000 + 1000 + 500)), "{r:?}");
    assert!(!r.stdout().contains("BUG"), "{r:?}");
    assert_ne!(r.json["exitCode"], 0);
    assert_gone(r.json["executionId"].as_str().unwrap());
    r
}

#[test]
fn busy_loop_times_out() {
    check_timeout("py-small", "while True: pass");
}
