//! Timeouts: SIGTERM to everything, a grace period, SIGKILL of the whole sandbox; nothing left.

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

#[test]
fn long_sleep_times_out() {
    let r = check_timeout("py-small", "import time\nprint('sleeping', flush=True)\ntime.sleep(120)\nprint('BUG')");
    assert_eq!(r.stdout(), "sleeping\n");
    assert_eq!(r.json["signalName"], "SIGTERM", "a sleeping program takes the polite signal: {r:?}");
}

#[test]
fn ignoring_sigterm_gets_sigkill() {
    let r = check_timeout(
        "py-small",
        "import signal, time\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n    signal.signal(s, signal.SIG_IGN)\nwhile True: time.sleep(0.1)\nprint('BUG')",
    );
    assert_eq!(r.json["signalName"], "SIGKILL", "{r:?}");
    assert!(r.elapsed >= Duration::from_millis(2900), "the grace period was honoured: {r:?}");
}

#[test]
fn detached_grandchild_holding_stdout_does_not_stall() {
    let code = "import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True)\n\
                print('spawned', flush=True)\ntime.sleep(120)";
    let r = check_timeout("py-small", code);
    assert_eq!(r.stdout(), "spawned\n");
}

#[test]
fn typescript_busy_loop_is_killed() {
    check_timeout("ts-small", "console.log('spinning');\nlet n = 0;\nwhile (true) { n++; }");
}

#[test]
fn run_ends_when_main_process_exits_even_if_a_child_keeps_the_pipe() {
    let code = "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\nprint('main done', flush=True)";
    let r = run("py-small", code, &[]);
    assert_eq!((r.status(), r.stdout()), ("ok", "main done\n"), "{r:?}");
    assert_eq!(r.json["killedAtTeardown"], 1, "{r:?}");
    assert!(r.elapsed < Duration::from_secs(3), "{r:?}");
    assert_gone(r.json["executionId"].as_str().unwrap());
}
