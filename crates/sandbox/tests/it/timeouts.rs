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
    // The CLI exits 124 (coreutils' `timeout`), not the program's 143 or 137: a script tells it
    // from an interrupted `sandbox run` (143) and from the program's own exit.
    assert_eq!(r.status, 124, "{r:?}");
    assert_gone(r.json["executionId"].as_str().unwrap());
    r
}

#[test]
fn busy_loop_times_out() {
    check_timeout("py-small", "while True: pass");
}

/// `cli` (a `sandbox run` of a program that prints `started` and sleeps) spawned with its
/// output piped, once its program runs (its first line streamed).
fn spawned_and_started(mut cli: Command) -> std::process::Child {
    use std::io::BufRead as _;
    let mut cli = cli.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let mut stdout = std::io::BufReader::new(cli.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "started\n");
    cli
}

/// Ctrl-C (SIGINT) or a SIGTERM to `sandbox run` while its program runs: the execution is ended
/// as a service's shutdown ends it (killed, torn down, recorded as `internal_error`), the command
/// says so and ends by the signal (a shell sees 128+signal, and a script running it stops), and
/// nothing of the execution stays on the host (no cgroup, mount or directory: the command used
/// to die at once and leave them for the next run's recovery).
#[test]
fn an_interrupted_cli_run_ends_its_execution_and_leaves_nothing_behind() {
    for sig in [nix::sys::signal::Signal::SIGINT, nix::sys::signal::Signal::SIGTERM] {
        let mut args = vec!["run", "-c", "import time\nprint('started', flush=True)\ntime.sleep(60)"];
        args.extend(warm_flag());
        let cli = spawned_and_started(interruptible(&sandbox(&args)));
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(cli.id()).unwrap()), sig).unwrap();
        let out = cli.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ended_by(out.status, sig, &stderr);
        assert!(stderr.contains(&format!("interrupted by {sig}")) && stderr.contains("error[internal_error]"), "{stderr}");
        let id = stderr.split("(execution ").nth(1).and_then(|r| r.split(')').next()).unwrap_or_else(|| panic!("no execution id in {stderr}"));
        assert_gone(id);
        // Its record ends as the command said.
        let shown = sandbox(&["audit", "show", id]).output().unwrap();
        assert!(String::from_utf8_lossy(&shown.stdout).contains("internal_error"), "{}", String::from_utf8_lossy(&shown.stdout));
    }
}

/// A `sandbox run` started with SIGINT ignored, as a shell without job control starts a
/// background job (`cmd &` in a script) and as CI starts this suite, leaves it ignored: a
/// terminal's Ctrl-C, which reaches the whole foreground process group, does not end a
/// background job, as it does not end a backgrounded `sleep`. It used to take SIGINT over and
/// end its execution. A SIGTERM still ends it cleanly (the execution ended, nothing left).
#[test]
fn a_run_started_with_sigint_ignored_leaves_it_ignored() {
    let mut args = vec!["run", "-c", "import time\nprint('started', flush=True)\ntime.sleep(60)"];
    args.extend(warm_flag());
    let mut cli = spawned_and_started(sigint_ignored(&sandbox(&args)));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(cli.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(cli.try_wait().unwrap().is_none(), "a SIGINT ended a run that was started with it ignored");
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = cli.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ended_by(out.status, nix::sys::signal::Signal::SIGTERM, &stderr);
    assert!(stderr.contains("interrupted by SIGTERM") && !stderr.contains("SIGINT"), "{stderr}");
    let id = stderr.split("(execution ").nth(1).and_then(|r| r.split(')').next()).unwrap_or_else(|| panic!("no execution id in {stderr}"));
    assert_gone(id);
}

/// Ctrl-C (SIGINT) or a SIGTERM to `sandbox run --warm` while its template or pooled sandbox
/// is still starting: the warm start is stopped and removed, the command says so and ends by
/// the signal, nothing ran, and nothing of the warm start stays on the host (the command used
/// to die at once and leave its cgroup and directory to the next run's recovery). The
/// `python-analysis` profile: its template imports pandas and matplotlib (~1 s), so the signal
/// lands in the start. The suite's warm mode, else `--warm`.
#[test]
fn an_interrupted_warm_start_is_stopped_and_leaves_nothing_behind() {
    environments_installed();
    let flag = warm_flag().unwrap_or("--warm");
    for sig in [nix::sys::signal::Signal::SIGINT, nix::sys::signal::Signal::SIGTERM] {
        let data = tempfile::Builder::new().prefix("warm-start-").tempdir_in(&env().dir).unwrap().keep();
        std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let cli = interruptible(Command::new(bin()).arg("--config").arg(&env().config).arg("--data-dir").arg(&data).args([
            "run",
            flag,
            "--profile",
            "python-analysis",
            "-c",
            "print('RAN')",
        ]))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
        // The warm start has begun once its directory exists.
        let executions = data.join("executions");
        let entries = || -> Vec<String> {
            std::fs::read_dir(&executions).map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default()
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let started = loop {
            let names = entries();
            if !names.is_empty() {
                break names;
            }
            assert!(Instant::now() < deadline, "{flag}: no warm start began");
            std::thread::sleep(Duration::from_millis(2));
        };
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(cli.id()).unwrap()), sig).unwrap();
        let out = cli.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ended_by(out.status, sig, &format!("{flag}: {stderr}"));
        assert!(stderr.contains(&format!("interrupted by {sig} during the warm start")), "{flag} {sig}: {stderr}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("RAN"), "{flag} {sig}: the program ran");
        assert!(entries().is_empty(), "{flag} {sig}: left in {}: {:?}", executions.display(), entries());
        for id in &started {
            assert_gone_from(&data, id);
        }
    }
}

/// A program ended by a real-time signal is reported as ended by it, not as a timeout: init
/// decoded its program's status with a library that has no name for real-time signals, lost it
/// (the child already reaped), and waited for the timeout (status `timeout`, SIGKILL). Found by
/// an attack review: any program could hold its slot until the timeout this way.
#[test]
fn a_program_ended_by_a_real_time_signal_is_reported_so_not_as_a_timeout() {
    // The program's own SIGRTMIN (its C library's), not this test's: a musl build's is 35.
    let r =
        run("python-default", "import os, signal\nprint(int(signal.SIGRTMIN), flush=True)\nos.kill(os.getpid(), signal.SIGRTMIN + 2)", &["--timeout", "20s"]);
    let rtmin: i32 = r.json["stdout"].as_str().and_then(|s| s.trim().parse().ok()).unwrap_or_else(|| panic!("{r:?}"));
    assert_eq!(
        (r.status(), r.json["signal"].as_i64(), r.json["signalName"].as_str(), r.status),
        ("error", Some(i64::from(rtmin + 2)), Some("SIGRTMIN+2"), 128 + rtmin + 2),
        "{r:?}"
    );
}
