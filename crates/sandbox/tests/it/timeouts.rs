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

/// Ctrl-C (SIGINT) or a SIGTERM to `sandbox run` while its program runs: the execution is ended
/// as a service's shutdown ends it (killed, torn down, recorded as `internal_error`), the command
/// says so and exits 128+signal, and nothing of the execution stays on the host (no cgroup, mount
/// or directory: the command used to die at once and leave them for the next run's recovery).
#[test]
fn an_interrupted_cli_run_ends_its_execution_and_leaves_nothing_behind() {
    use std::io::BufRead as _;
    for (sig, code) in [(nix::sys::signal::Signal::SIGINT, 130), (nix::sys::signal::Signal::SIGTERM, 143)] {
        let mut args = vec!["run", "-c", "import time\nprint('started', flush=True)\ntime.sleep(60)"];
        args.extend(warm_flag());
        let mut cli = sandbox(&args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        // The program runs once its first line is streamed.
        let mut stdout = std::io::BufReader::new(cli.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "started\n");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(cli.id()).unwrap()), sig).unwrap();
        let out = cli.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{sig}: {stderr}");
        assert!(stderr.contains(&format!("interrupted by {sig}")) && stderr.contains("error[internal_error]"), "{stderr}");
        let id = stderr.split("(execution ").nth(1).and_then(|r| r.split(')').next()).unwrap_or_else(|| panic!("no execution id in {stderr}"));
        assert_gone(id);
        // Its record ends as the command said.
        let shown = sandbox(&["audit", "show", id]).output().unwrap();
        assert!(String::from_utf8_lossy(&shown.stdout).contains("internal_error"), "{}", String::from_utf8_lossy(&shown.stdout));
    }
}
