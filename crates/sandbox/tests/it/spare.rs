//! Helpers started ahead of their cold start (`sandbox-engine/src/spare.rs`): a service keeps
//! one waiting, `sandbox run` starts one before it opens its audit log. Each holds nothing of any
//! execution until its spec arrives, serves one execution, and leaves nothing behind.

use super::http::Server;
use super::*;

/// The service's own children running our binary as the helper (`sandbox-init`), each with
/// whether it has a child (an init, so it serves an execution) or waits for its spec.
fn helpers_of(server: u32) -> Vec<(i32, bool)> {
    let kids = std::fs::read_to_string(format!("/proc/{server}/task/{server}/children")).unwrap_or_default();
    let mut all: Vec<String> = kids.split_whitespace().map(str::to_owned).collect();
    // Threads fork too: a helper's parent may be any of the service's threads.
    for t in std::fs::read_dir(format!("/proc/{server}/task")).map(|d| d.filter_map(Result::ok).collect::<Vec<_>>()).unwrap_or_default() {
        all.extend(std::fs::read_to_string(t.path().join("children")).unwrap_or_default().split_whitespace().map(str::to_owned));
    }
    all.sort();
    all.dedup();
    all.into_iter()
        .filter_map(|p| p.parse::<i32>().ok())
        .filter(|p| std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default().starts_with(b"sandbox-init\0"))
        .map(|p| {
            let children = std::fs::read_dir(format!("/proc/{p}/task"))
                .map(|d| d.filter_map(Result::ok).any(|t| !std::fs::read_to_string(t.path().join("children")).unwrap_or_default().trim().is_empty()))
                .unwrap_or(false);
            (p, children)
        })
        .collect()
}

/// Whether `pid` is blocked reading its control socket (fd 3): `/proc/<pid>/syscall` names
/// `read` (0) or `recvfrom` (45) on it. Until then it may still be loading.
fn blocked_on_control_socket(pid: i32) -> bool {
    let call = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
    call.starts_with("0 0x3 ") || call.starts_with("45 0x3 ")
}

/// The one helper of `server` waiting for its spec, once the service has started it and it
/// blocks reading its control socket.
#[track_caller]
fn waiting_helper(server: u32) -> i32 {
    let deadline = Instant::now() + slack(Duration::from_secs(30));
    loop {
        let waiting: Vec<i32> = helpers_of(server).into_iter().filter(|(p, busy)| !busy && blocked_on_control_socket(*p)).map(|(p, _)| p).collect();
        match waiting.as_slice() {
            [one] => return *one,
            [] | [_, _, ..] if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            other => panic!(
                "expected one waiting helper, found {other:?}; helpers (pid, busy, syscall): {:?}",
                helpers_of(server)
                    .into_iter()
                    .map(|(p, b)| (p, b, std::fs::read_to_string(format!("/proc/{p}/syscall")).unwrap_or_default()))
                    .collect::<Vec<_>>()
            ),
        }
    }
}

#[test]
fn a_services_spare_helper_holds_nothing_serves_once_survives_being_killed_and_is_gone_at_shutdown() {
    // No warm pools: every execution here starts cold, so each takes the spare.
    let mut s = Server::start_with("", &["--no-warm"]);
    let server = s.pid();
    let client = s.client(None);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = |code: &str| {
        rt.block_on(client.execute(&sandbox_core::ExecutionRequest { profile: "python-default".into(), code: code.into(), ..Default::default() })).unwrap()
    };

    let first = waiting_helper(server);
    // It holds nothing of an execution: an empty environment, no cgroup of one, no child, and
    // no descriptor but its stdio, control socket, side channel and network channel (0-5).
    assert_eq!(std::fs::read(format!("/proc/{first}/environ")).unwrap(), b"", "the spare's environment must be empty");
    let cgroups = std::fs::read_to_string(format!("/proc/{first}/cgroup")).unwrap();
    assert!(!cgroups.lines().any(|l| l.contains("/sandbox/")), "the spare joined an execution's cgroup before its spec: {cgroups}");
    let fds: Vec<i32> = std::fs::read_dir(format!("/proc/{first}/fd")).unwrap().filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    assert!(fds.iter().all(|fd| (0..=5).contains(fd)), "the spare holds descriptors beyond 0-5: {fds:?}");

    // An execution takes it (it becomes that execution's helper: its uid, its namespaces) and
    // another one is started for the next.
    let r = run("import os; print(os.getuid())");
    assert_eq!((r.status.as_str(), r.exit_code), ("ok", Some(0)), "{r:?}");
    assert!(std::fs::metadata(format!("/proc/{first}")).is_err(), "the spare that served an execution must be gone after it");
    let second = waiting_helper(server);
    assert_ne!(second, first, "a helper serves one execution only");

    // Killed from outside while waiting, it fails nothing: the next cold start uses another.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(second), nix::sys::signal::Signal::SIGKILL).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let r = run("print('after the kill')");
    assert_eq!((r.status.as_str(), r.stdout.as_str()), ("ok", "after the kill\n"), "{r:?}");
    let third = waiting_helper(server);
    // Killed with no execution coming, it is replaced all the same (the refill thread checks).
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(third), nix::sys::signal::Signal::SIGKILL).unwrap();
    let deadline = Instant::now() + slack(Duration::from_secs(20));
    let third = loop {
        let now = helpers_of(server).into_iter().filter(|(p, busy)| *p != third && !busy && blocked_on_control_socket(*p)).map(|(p, _)| p).next();
        match now {
            Some(p) => break p,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            None => panic!("the killed spare helper {third} was not replaced"),
        }
    };

    // SIGTERM: the waiting helper goes with the service.
    assert!(s.terminate().success());
    let deadline = Instant::now() + slack(Duration::from_secs(10));
    while std::fs::read(format!("/proc/{third}/cmdline")).is_ok_and(|c| c.starts_with(b"sandbox-init\0")) {
        assert!(Instant::now() < deadline, "the spare helper {third} outlived the service");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(s.executions_left().is_empty(), "{:?}", s.executions_left());
}

/// The helper that replaces the one an execution took is started once that execution has
/// ended (at most 1 s after the take), not beside it: its exec, loading and network namespace
/// took the CPU the execution needed. While a 0.8 s program runs, the service has its busy
/// helper and no waiting one; after it, one waits again.
#[test]
fn a_services_next_spare_helper_starts_after_the_execution_that_took_the_last() {
    let s = Server::start_with("", &["--no-warm"]);
    let server = s.pid();
    let first = waiting_helper(server);
    let client = s.client(None);
    std::thread::scope(|scope| {
        // The take comes after `asked`, and the program runs 0.8 s: until `asked` + 0.7 s it
        // still runs, and its deferral (1 s from the take) holds.
        let asked = Instant::now();
        let run = scope.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let r = sandbox_core::ExecutionRequest {
                profile: "python-default".into(),
                code: "import time; time.sleep(0.8); print('done')".into(),
                ..Default::default()
            };
            rt.block_on(client.execute(&r)).unwrap()
        });
        // Until the execution has taken it (it has an init of its own then).
        let deadline = Instant::now() + slack(Duration::from_secs(30));
        while !helpers_of(server).contains(&(first, true)) {
            assert!(Instant::now() < deadline && !run.is_finished(), "the execution did not take the waiting helper: {:?}", helpers_of(server));
            std::thread::sleep(Duration::from_millis(10));
        }
        while asked.elapsed() < Duration::from_millis(600) {
            let idle: Vec<i32> = helpers_of(server).into_iter().filter(|(_, busy)| !busy).map(|(p, _)| p).collect();
            if asked.elapsed() < Duration::from_millis(700) {
                assert!(idle.is_empty(), "a helper {idle:?} was started while the execution that took the last one ran");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let r = run.join().unwrap();
        assert_eq!((r.status.as_str(), r.stdout.as_str()), ("ok", "done\n"), "{r:?}");
    });
    assert_ne!(waiting_helper(server), first);
}

/// `sandbox run` starts its helper before it opens the audit log; a request refused before it
/// runs (here a timeout above the profile's maximum) leaves that helper behind nowhere.
#[test]
fn a_refused_cli_run_leaves_no_helper_behind() {
    // The helper inherits the CLI's working directory: a directory of its own finds it.
    let cwd = tempfile::Builder::new().prefix("spare-cwd-").tempdir_in(&env().dir).unwrap();
    let out = sandbox(&["run", "--json", "--timeout", "99999999", "-c", "pass"]).current_dir(cwd.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert_no_process_in(cwd.path());
}

/// Nor does a run whose audit log cannot be opened (nothing runs then): its helper was started
/// before the log was tried.
#[test]
fn a_cli_run_without_its_audit_log_leaves_no_helper_behind() {
    let cwd = tempfile::Builder::new().prefix("spare-cwd-").tempdir_in(&env().dir).unwrap();
    let data = tempfile::Builder::new().prefix("spare-data-").tempdir_in(&env().dir).unwrap();
    // A directory where the log's file should be: SQLite cannot open it.
    std::fs::create_dir(data.path().join("audit.db")).unwrap();
    let out = Command::new(bin())
        .arg("--config")
        .arg(&env().config)
        .arg("--data-dir")
        .arg(data.path())
        .args(["run", "--json", "-c", "pass"])
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert!(!out.status.success(), "ran without its audit log: {}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains("audit log"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_no_process_in(cwd.path());
}

/// A run that never uses its helper (a TypeScript syntax error is answered before any sandbox
/// is prepared) kills it and reaps it itself before it ends: `sandbox run` ends its process as
/// soon as the result is written, and a helper still unreaped then would be handed to whoever
/// inherits it, a zombie under a PID 1 that reaps no stranger. Here the test's wrapper is that
/// inheritor (`PR_SET_CHILD_SUBREAPER`) and counts what it is handed; each run of 10 must hand
/// it nothing. Before the fix, 8 to 15 runs of 20 left it a zombie helper.
#[test]
fn a_cli_run_that_never_uses_its_helper_reaps_it_before_it_ends() {
    let wrapper = "import ctypes, os, subprocess, sys, time\n\
                   ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)\n\
                   handed = 0\n\
                   for _ in range(10):\n    \
                       r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n    \
                       assert r.returncode == 1, r\n    \
                       time.sleep(0.05)\n    \
                       while True:\n        \
                           try:\n            \
                               pid, _ = os.waitpid(-1, os.WNOHANG)\n        \
                           except ChildProcessError:\n            \
                               break\n        \
                           if pid == 0:\n            \
                               break\n        \
                           handed += 1\n\
                   print(handed)";
    let cli = sandbox(&["run", "--json", "-l", "typescript", "-c", "let x: = ;"]);
    let out = Command::new("/usr/bin/python3").arg("-c").arg(wrapper).arg(cli.get_program()).args(cli.get_args()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0", "processes the CLI left to be reaped by another");
}

/// `sandbox run` forks its helper from its own `main`, before clap and the configuration, instead
/// of executing the binary again. That helper, and the init it clones into the sandbox, must
/// still hold nothing of the invocation that the sandbox is not given: not the CLI's
/// environment (an API key, a cloud credential in the caller's shell) and not its arguments.
/// While the program runs, the host reads both processes: `/proc/PID/cmdline`
/// says `sandbox-init`, `/proc/PID/environ` holds only NUL bytes, they hold no descriptor past
/// their own (0-4), and neither secret is anywhere in their writable memory.
#[test]
fn a_cli_runs_helper_and_init_hold_nothing_of_the_clis_environment_or_arguments() {
    let nonce = format!("{}x{}", std::process::id(), std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    // Each secret is looked for by its tail: a freed heap block keeps its text past its first
    // 16 bytes (the allocator's free-list links overwrite those).
    let (env_tail, arg_tail) = (format!("{nonce}env"), format!("{nonce}arg"));
    let env_secret = format!("credential-{env_tail}");
    // An argument the program is not given (an output glob stays with the CLI).
    let arg_secret = format!("output-glob-{arg_tail}");
    let cli = sandbox(&["run", "--json", "--output", &arg_secret, "-c", "import time\ntime.sleep(120)"])
        .env("SANDBOX_TEST_CREDENTIAL", &env_secret)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let cli_pid = cli.id();
    let children = |pid: u32| -> Vec<u32> {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.filter_map(Result::ok).collect::<Vec<_>>()).unwrap_or_default();
        tasks
            .iter()
            .flat_map(|t| {
                std::fs::read_to_string(t.path().join("children")).unwrap_or_default().split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>()
            })
            .collect()
    };
    // The CLI's helper (its child) and the helper's child, init, once init has started the
    // program (init's own child).
    let deadline = Instant::now() + slack(Duration::from_secs(30));
    let (helper, init) = loop {
        let found = children(cli_pid).into_iter().find_map(|h| children(h).into_iter().find(|i| !children(*i).is_empty()).map(|i| (h, i)));
        if let Some(pair) = found {
            break pair;
        }
        assert!(Instant::now() < deadline, "no helper with a running init appeared under the CLI {cli_pid}");
        std::thread::sleep(Duration::from_millis(10));
    };
    for (what, pid) in [("helper", helper), ("init", init)] {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        assert!(cmdline.starts_with(b"sandbox-init\0") && cmdline[13..].iter().all(|b| *b == 0), "{what}'s cmdline: {:?}", String::from_utf8_lossy(&cmdline));
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        assert!(environ.iter().all(|b| *b == 0), "{what}'s environment: {:?}", String::from_utf8_lossy(&environ));
        // Only its own descriptors: stdio and the control socket (and, in init, nothing the
        // CLI held: the CLI's ends of these pipes would keep the helper from ever reading EOF).
        let fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| format!("{} -> {}", e.file_name().to_string_lossy(), std::fs::read_link(e.path()).map(|l| l.display().to_string()).unwrap_or_default()))
            .collect();
        assert!(fds.iter().all(|f| f.split(' ').next().and_then(|n| n.parse::<u32>().ok()).is_some_and(|n| n <= 4)), "{what}'s descriptors: {fds:?}");
        for secret in [&env_tail, &arg_tail] {
            let at = writable_memory_holding(pid, secret.as_bytes());
            assert!(at.is_empty(), "{what} (pid {pid}) holds {secret:?} in {at:?}");
        }
    }
    // Done: a SIGTERM ends the CLI, and the helper and init with it.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(cli_pid).unwrap()), nix::sys::signal::Signal::SIGTERM).unwrap();
    let _ = cli.wait_with_output().unwrap();
    let deadline = Instant::now() + slack(Duration::from_secs(10));
    while [helper, init].iter().any(|p| Path::new(&format!("/proc/{p}")).exists()) {
        assert!(Instant::now() < deadline, "the helper {helper} or init {init} outlived the CLI");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The writable mappings of process `pid` (`/proc/PID/maps`: heap, stacks, anonymous and data
/// pages, where anything it received or copied lives) whose memory (`/proc/PID/mem`) contains
/// `needle`. Panics if the process is gone.
fn writable_memory_holding(pid: u32, needle: &[u8]) -> Vec<String> {
    use std::io::{Read as _, Seek as _};
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_else(|e| panic!("/proc/{pid}/maps: {e}"));
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap_or_else(|e| panic!("/proc/{pid}/mem: {e}"));
    let mut found = Vec::new();
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else { continue };
        let Some((a, b)) = range.split_once('-') else { continue };
        let (a, b) = (u64::from_str_radix(a, 16).unwrap(), u64::from_str_radix(b, 16).unwrap());
        if !perms.starts_with("rw") {
            continue;
        }
        let mut data = vec![0u8; usize::try_from(b - a).unwrap()];
        mem.seek(std::io::SeekFrom::Start(a)).unwrap();
        mem.read_exact(&mut data).unwrap_or_else(|e| panic!("/proc/{pid}/mem at {line}: {e}"));
        if data.windows(needle.len()).any(|w| w == needle) {
            found.push(line.to_owned());
        }
    }
    found
}

/// Waits (up to 10 s) until no process has `cwd` as its working directory.
#[track_caller]
fn assert_no_process_in(cwd: &std::path::Path) {
    let deadline = Instant::now() + slack(Duration::from_secs(10));
    loop {
        let left: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
            .filter(|e| std::fs::read_link(e.path().join("cwd")).is_ok_and(|c| c == cwd))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "processes of the run still running: {left:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
