//! The real-world cases of `shared/cases/real-world.jsonl`, each run through `sandbox run` and
//! its free-text `expect` encoded as concrete assertions, one `#[test]` per case id.
//! `every_case_is_covered` fails when the file gains a case this table does not know.
#![allow(clippy::print_stdout)] // skips are printed so they stay visible

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;

use crate::{assert_gone, assert_started_as_asked, env, sandbox, scratch_file, warm_flag, Run};

/// The case file: the repository is cloned next to a `shared/` folder (CI has it too).
const CASES_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/cases/real-world.jsonl");

/// Grace between SIGTERM and SIGKILL in every profile the cases use (`grace_ms`).
const GRACE: Duration = Duration::from_millis(1000);
/// Slack on wall-time bounds for a loaded 2-core CI machine (CLI start, set-up, teardown).
const SLACK: Duration = Duration::from_millis(1500);

/// One line of the case file.
#[derive(Debug, Clone)]
struct Case {
    id: String,
    language: String,
    code: String,
    timeout: Duration,
    memory_mb: Option<u64>,
    pids: Option<u64>,
    files: Vec<(String, String)>,
    network: Option<String>,
}

fn cases() -> &'static [Case] {
    static CASES: OnceLock<Vec<Case>> = OnceLock::new();
    CASES.get_or_init(|| {
        let text = std::fs::read_to_string(CASES_FILE)
            .unwrap_or_else(|e| panic!("cannot read the case file {CASES_FILE}: {e} (clone the repository next to shared/)"));
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, line)| {
                let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{CASES_FILE} line {}: {e}", i + 1));
                let s = |k: &str| v[k].as_str().unwrap_or_else(|| panic!("line {}: no string {k:?}", i + 1)).to_owned();
                let limits = &v["limits"];
                Case {
                    id: s("id"),
                    language: s("language"),
                    code: s("code"),
                    timeout: Duration::from_millis(limits["timeout_ms"].as_u64().expect("limits.timeout_ms")),
                    memory_mb: limits["memory_mb"].as_u64(),
                    pids: limits["pids"].as_u64(),
                    files: v["files"]
                        .as_object()
                        .map(|m| m.iter().map(|(k, c)| (k.clone(), c.as_str().expect("file content is text").to_owned())).collect())
                        .unwrap_or_default(),
                    network: v["network"].as_str().map(str::to_owned),
                }
            })
            .collect()
    })
}

fn case(id: &str) -> Case {
    cases().iter().find(|c| c.id == id).unwrap_or_else(|| panic!("case {id} is not in {CASES_FILE}")).clone()
}

/// The profile with exactly the case's memory and pids limits (see TEST_CONFIG).
/// Cases that import numpy or matplotlib run in the python-analysis environment.
fn profile(c: &Case) -> &'static str {
    if c.language == "python" && (c.code.contains("import numpy") || c.code.contains("import matplotlib")) {
        return match (c.memory_mb, c.pids) {
            (None | Some(512), Some(32)) => "cases-py-analysis-pids32",
            (None | Some(512), None) => "cases-py-analysis",
            other => panic!("{}: no analysis test profile for {other:?}; add one to TEST_CONFIG", c.id),
        };
    }
    match (c.language.as_str(), c.memory_mb, c.pids) {
        ("python", None | Some(512), None) => "python-default",
        ("typescript", None | Some(512), None) => "typescript-default",
        ("python", None | Some(512), Some(32)) => "cases-py-pids32",
        ("python", None | Some(512), Some(16)) => "cases-py-pids16",
        ("python", Some(256), Some(64)) => "py-small",
        ("python", Some(256), None) => "cases-py-256m",
        ("typescript", Some(256), None) => "cases-ts-256m",
        other => panic!("{}: no test profile for {other:?}; add one to TEST_CONFIG", c.id),
    }
}

// ---------------------------------------------------------------------------------------------
// Running a case

/// Runs `code` under the case's profile and timeout with `files` as inputs (name, bytes) and
/// extra variables in the CLI's environment; then asserts the execution left nothing behind.
fn exec_with(c: &Case, code: &str, files: &[(String, Vec<u8>)], host_env: &[(&str, &str)]) -> Run {
    let timeout = format!("{}ms", c.timeout.as_millis());
    // Host-side names are neutral: the case's names may be hostile (C25).
    let specs: Vec<String> = files.iter().map(|(name, bytes)| format!("{name}={}", scratch_file("input", bytes).display())).collect();
    let mut args = vec!["run", "--json", "--profile", profile(c), "-c", code, "--timeout", &timeout];
    for s in &specs {
        args.extend(["--file", s.as_str()]);
    }
    // Every case runs in the warm start the pass asks for, as the attack suites do.
    args.extend(warm_flag());
    let mut cmd: Command = sandbox(&args);
    cmd.envs(host_env.iter().copied());
    let start = Instant::now();
    let out = cmd.output().expect("sandbox runs");
    let elapsed = start.elapsed();
    let json: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {}\nstderr: {}", c.id, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)));
    let r = Run { json, status: out.status.code().unwrap_or(-1), elapsed, stderr: String::from_utf8_lossy(&out.stderr).into_owned() };
    let id = r.json["executionId"].as_str().unwrap_or_else(|| panic!("{}: no executionId\n{}", c.id, short(&r)));
    assert_gone(id);
    assert_started_as_asked(&r);
    r
}

/// The case as given: its code and its input files.
fn exec(c: &Case) -> Run {
    let files: Vec<(String, Vec<u8>)> = c.files.iter().map(|(n, t)| (n.clone(), t.clone().into_bytes())).collect();
    exec_with(c, &c.code, &files, &[])
}

/// The result with long strings cut, for failure messages.
fn short(r: &Run) -> String {
    fn cut(v: &mut Value) {
        match v {
            Value::String(s) if s.len() > 3000 => {
                let mut end = 3000;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                *s = format!("{}… ({} bytes)", &s[..end], s.len());
            }
            Value::Array(a) => a.iter_mut().for_each(cut),
            Value::Object(o) => o.values_mut().for_each(cut),
            _ => {}
        }
    }
    let mut j = r.json.clone();
    cut(&mut j);
    format!("CLI exit {} in {:?}\n{}\nCLI stderr: {}", r.status, r.elapsed, serde_json::to_string_pretty(&j).unwrap(), r.stderr)
}

// ---------------------------------------------------------------------------------------------
// Assertions shared by the cases

macro_rules! ensure {
    ($r:expr, $cond:expr, $($msg:tt)+) => {
        assert!($cond, "{}\n--- result ---\n{}", format!($($msg)+), short($r))
    };
}

#[track_caller]
fn status(r: &Run, want: &str) {
    ensure!(r, r.status() == want, "status {:?}, expected {want:?}", r.status());
}

/// Ended by its own exit with `code` (no signal); the CLI passes the code on.
#[track_caller]
fn exited(r: &Run, code: i64) {
    ensure!(r, r.json["exitCode"].as_i64() == Some(code), "exitCode {}, expected {code}", r.json["exitCode"]);
    ensure!(r, r.json["signal"].is_null() && r.json["signalName"].is_null(), "unexpected signal");
    ensure!(r, i64::from(r.status) == code, "CLI exit {} differs from the program's {code}", r.status);
}

/// Ended by signal `sig` (`name`): exitCode 128+sig, and the CLI exits with that code.
#[track_caller]
fn signaled(r: &Run, sig: i64, name: &str) {
    ensure!(r, r.json["signal"].as_i64() == Some(sig), "signal {}, expected {sig}", r.json["signal"]);
    ensure!(r, r.json["signalName"].as_str() == Some(name), "signalName {}, expected {name}", r.json["signalName"]);
    ensure!(r, r.json["exitCode"].as_i64() == Some(128 + sig), "exitCode {}, expected {}", r.json["exitCode"], 128 + sig);
    // A run that reached its timeout exits 124 (coreutils' `timeout`), whatever the signal.
    let cli = if r.json["timedOut"].as_bool() == Some(true) { 124 } else { 128 + sig };
    ensure!(r, i64::from(r.status) == cli, "CLI exit {}, expected {cli}", r.status);
}

#[track_caller]
fn flags(r: &Run, timed_out: bool, oom_killed: bool) {
    ensure!(r, r.json["timedOut"].as_bool() == Some(timed_out), "timedOut {}, expected {timed_out}", r.json["timedOut"]);
    ensure!(r, r.json["oomKilled"].as_bool() == Some(oom_killed), "oomKilled {}, expected {oom_killed}", r.json["oomKilled"]);
}

#[track_caller]
fn stdout_is(r: &Run, want: &str) {
    ensure!(r, r.stdout() == want, "stdout {:?}, expected {want:?}", r.stdout());
    ensure!(r, r.json["stdoutBase64"].is_null(), "stdoutBase64 set for valid UTF-8 output");
    ensure!(r, r.json["stdoutTruncated"].as_bool() == Some(false), "stdout marked truncated");
}

#[track_caller]
fn no_bug(r: &Run) {
    ensure!(r, !r.stdout().contains("BUG") && !r.stderr_of_program().contains("BUG"), "a BUG line was printed");
}

/// Wall time from CLI start to result within `bound`.
#[track_caller]
fn within(r: &Run, bound: Duration) {
    let bound = crate::slack(bound);
    ensure!(r, r.elapsed <= bound, "took {:?}, expected at most {bound:?}", r.elapsed);
}

/// A run the timeout ended: status timeout, not before the deadline, within timeout + grace + slack.
#[track_caller]
fn timed_out(r: &Run, c: &Case) {
    ended_by_timeout(r, c);
    flags(r, true, false);
}

/// The run is a `timeout` at `c`'s limit, ended by a signal it reports; the OOM flag unchecked.
#[track_caller]
fn ended_by_timeout(r: &Run, c: &Case) {
    status(r, "timeout");
    ensure!(r, r.json["timedOut"].as_bool() == Some(true), "timedOut {}, expected true", r.json["timedOut"]);
    let ms = r.json["durationMs"].as_u64().unwrap_or(0);
    ensure!(r, u128::from(ms) >= c.timeout.as_millis(), "durationMs {ms} is below the {:?} timeout", c.timeout);
    within(r, c.timeout + GRACE + SLACK);
    let sig = r.json["signal"].as_i64();
    ensure!(r, sig.is_some() && r.json["exitCode"].as_i64() == sig.map(|s| 128 + s), "a timed-out run reports the signal that ended it");
    ensure!(r, r.status == 124, "CLI exit {}, expected 124 for a timeout", r.status);
}

/// The returned files are exactly `want` (name, bytes), each with the right size and SHA-256.
#[track_caller]
fn files_are(r: &Run, want: &[(&str, &[u8])]) {
    let got: BTreeSet<&str> = r.json["files"].as_object().map(|m| m.keys().map(String::as_str).collect()).unwrap_or_default();
    let names: BTreeSet<&str> = want.iter().map(|(n, _)| *n).collect();
    ensure!(r, got == names, "files {got:?}, expected {names:?}");
    for (name, bytes) in want {
        let f = &r.json["files"][*name];
        ensure!(r, r.file_bytes(name).as_deref() == Some(*bytes), "content of {name:?} differs from {:?}", String::from_utf8_lossy(bytes));
        ensure!(r, f["size"].as_u64() == Some(bytes.len() as u64), "size of {name:?}");
        ensure!(r, f["sha256"].as_str() == Some(sha256_hex(bytes).as_str()), "sha256 of {name:?}");
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use std::io::Write as _;
    let mut child =
        Command::new("sha256sum").stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().expect("sha256sum (coreutils) runs");
    child.stdin.take().expect("piped").write_all(bytes).expect("write to sha256sum");
    let out = child.wait_with_output().expect("sha256sum ends");
    String::from_utf8(out.stdout).expect("hex").split_whitespace().next().expect("a digest").to_owned()
}

/// Host processes whose command line contains `needle` (other than this test's own).
fn host_processes_with(needle: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()) && n != me))
                .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .filter(|cmd| cmd.contains(needle) && !cmd.contains("sandbox") && !cmd.contains("cargo"))
                .collect()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// The table: case id -> check

type Check = fn(&Case);

/// The check for each case id; `None` for an id the table does not know.
fn checker(id: &str) -> Option<Check> {
    Some(match id {
        "C01" => c01_grandchild_holds_stdout,
        "C02" => c02_orphan_after_timeout,
        "C04" => c04_fork_bomb,
        "C05" => c05_python_memory_limit,
        "C06" => c06_typescript_memory_limit,
        "C08" => c08_signal_is_not_oom,
        "C10" => c10_sigterm_to_self,
        "C11" => c11_ignored_signals_escalate,
        "C13" => c13_wall_clock_timeout,
        "C14" => c14_busy_loop_killed,
        "C17" => c17_numpy_threads_vs_pids,
        "C19" => c19_output_flood,
        "C21" => c21_partial_output_on_timeout,
        "C23" => c23_invalid_utf8,
        "C24" => c24_unicode_file_names,
        "C25" => c25_input_path_traversal,
        "C27" => c27_symlinks_not_collected,
        "C28" => c28_writes_outside_workdir,
        "C30" => c30_disk_fill,
        "C31" => c31_large_input_file,
        "C32" => c32_matplotlib_home,
        "C34" => c34_environment_allowlist,
        "C36" => c36_timezone_locale,
        "C37" => c37_typescript_esm,
        "C38" | "C40" => network_case,
        "C41" => c41_concurrency_isolation,
        _ => return None,
    })
}

/// Runs case `id`'s check.
fn check(id: &str) {
    let c = case(id);
    let f = checker(id).unwrap_or_else(|| panic!("case {id} has no check in cases.rs"));
    if c.network.is_some() {
        return network_case(&c);
    }
    f(&c);
}

macro_rules! case_tests {
    ($($name:ident => $id:literal),* $(,)?) => {
        $(#[test] fn $name() { check($id) })*
        /// Every id that has a `#[test]`.
        const TESTED: &[&str] = &[$($id),*];
    };
}

case_tests! {
    c01 => "C01", c02 => "C02", c04 => "C04", c05 => "C05", c06 => "C06", c08 => "C08",
    c10 => "C10", c11 => "C11", c13 => "C13", c14 => "C14", c17 => "C17", c19 => "C19",
    c21 => "C21", c23 => "C23", c24 => "C24", c25 => "C25", c27 => "C27", c28 => "C28",
    c30 => "C30", c31 => "C31", c32 => "C32", c34 => "C34", c36 => "C36", c37 => "C37",
    c38 => "C38", c40 => "C40", c41 => "C41",
}

#[test]
fn every_case_is_covered() {
    let in_file: Vec<&str> = cases().iter().map(|c| c.id.as_str()).collect();
    let unique: BTreeSet<&str> = in_file.iter().copied().collect();
    assert_eq!(unique.len(), in_file.len(), "duplicate case ids in {CASES_FILE}");
    let untested: Vec<&str> = in_file.iter().copied().filter(|id| !TESTED.contains(id) || checker(id).is_none()).collect();
    assert!(untested.is_empty(), "cases without a test and check in cases.rs: {untested:?}");
    let stale: Vec<&str> = TESTED.iter().copied().filter(|id| !unique.contains(id)).collect();
    assert!(stale.is_empty(), "tests for cases no longer in {CASES_FILE}: {stale:?}");
    for c in cases() {
        if c.network.is_none() {
            profile(c); // every non-network case has a profile with its limits
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The checks

/// The network cases run under an allowlist profile that names only unrelated test hosts
/// (`network::Fixture`: servers on 198.18.N.0/24, an upstream DNS server that logs questions).
fn network_case(c: &Case) {
    assert_eq!(c.network.as_deref(), Some("allowlist"), "{}: network cases use an allowlist profile", c.id);
    match c.id.as_str() {
        "C38" => c38_dns_exfiltration(c),
        "C40" => c40_proxy_env_bypass(c),
        other => panic!("network case {other} has no check in cases.rs"),
    }
}

/// A secret encoded into a DNS label fails fast, is answered locally (NXDOMAIN), never reaches
/// the upstream resolver, and is recorded as a blocked lookup in the result and the audit log.
fn c38_dns_exfiltration(c: &Case) {
    let fx = crate::network::Fixture::new(6);
    let timeout = format!("{}ms", c.timeout.as_millis());
    let r = fx.run("net-py", &c.code, &["--timeout", &timeout]);
    status(&r, "ok");
    let line = r.stdout().trim();
    ensure!(&r, line.starts_with("lookup failed:"), "the lookup did not fail");
    let secs: f64 = line.rsplit(" in ").next().and_then(|t| t.trim_end_matches('s').parse().ok()).expect("the case prints its lookup time");
    ensure!(&r, secs < 1.0, "the lookup took {secs} s, not < 1 s");
    let seen = fx.queries();
    ensure!(&r, !seen.iter().any(|q| q.contains("exfil-canary")), "the upstream resolver saw {seen:?}");
    let denied = |v: &Value| {
        v["blocked"].as_array().is_some_and(|b| {
            b.iter().any(|e| {
                e["protocol"] == "dns" && e["reason"] == "name_not_allowed" && e["host"].as_str().is_some_and(|h| h.ends_with(".exfil-canary.invalid"))
            })
        })
    };
    ensure!(&r, denied(&r.json["network"]), "the denied lookup is not in the result");
    let rec = fx.audit_record(r.json["executionId"].as_str().unwrap());
    ensure!(&r, denied(&rec["result"]["network"]), "the denied lookup is not in the audit record");
}

/// A client that ignores proxy variables still reaches nothing: 127.0.0.3/127.0.0.4 inside the
/// sandbox are its own loopback (its network namespace), so the harness's servers on the host's
/// 127.0.0.3:8080 and 127.0.0.4:8443 see no connection. (Those attempts never leave the
/// sandbox's namespace, so there is nothing for the engine to report; attempts that do leave
/// are reported, see network::everything_else_is_refused_at_once_and_reported.)
fn c40_proxy_env_bypass(c: &Case) {
    let fx = crate::network::Fixture::new(7);
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for addr in ["127.0.0.3:8080", "127.0.0.4:8443"] {
        let l = std::net::TcpListener::bind(addr).unwrap_or_else(|e| panic!("the harness's server on {addr}: {e}"));
        let hits = hits.clone();
        std::thread::spawn(move || {
            for _ in l.incoming() {
                hits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
    }
    let timeout = format!("{}ms", c.timeout.as_millis());
    let r = fx.run("net-ts", &c.code, &["--timeout", &timeout, "--env", "HTTP_PROXY=http://198.18.7.2:8080"]);
    status(&r, "ok");
    ensure!(&r, !r.stdout().contains("REACHED"), "a request got through");
    ensure!(&r, r.stdout().matches("blocked:").count() == 2, "both requests should print blocked");
    // Refused at once (connection refused), not by the 3 s AbortSignal.
    ensure!(&r, !r.stdout().contains("TimeoutError"), "a request hung until its timeout");
    ensure!(&r, hits.load(std::sync::atomic::Ordering::SeqCst) == 0, "the harness's servers were reached");
    ensure!(&r, r.json["enforcement"]["network"] == "allowlist", "not run under the allowlist");
}

/// The run ends with the entry process; the orphaned sleeper is killed at teardown.
fn c01_grandchild_holds_stdout(c: &Case) {
    let r = exec(c);
    status(&r, "ok");
    exited(&r, 0);
    flags(&r, false, false);
    stdout_is(&r, "main done\n");
    // ~2 s expected; far below the 20 s timeout (the drain after the end is bounded).
    within(&r, Duration::from_secs(3));
    ensure!(&r, r.json["killedAtTeardown"].as_u64() == Some(1), "the sleeper, and only it, is reported killed at teardown");
    let left = host_processes_with("time.sleep(300)");
    ensure!(&r, left.is_empty(), "the sleeper survived on the host: {left:?}");
}

/// A setsid'd grandchild does not outlive the timeout.
fn c02_orphan_after_timeout(c: &Case) {
    let r = exec(c);
    timed_out(&r, c);
    stdout_is(&r, "spawned detached child\n");
    let left = host_processes_with("while True: time.sleep(1)");
    ensure!(&r, left.is_empty(), "the detached child survived on the host: {left:?}");
    // Its twin: the detached grandchild keeps the run's stdout open; the timeout still ends the
    // run on time (the pipe closes with the namespace).
    let holding = c.code.replace(",\n                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)", ")");
    ensure!(&r, holding != c.code, "the case's code changed: update the twin");
    let r = exec_with(c, &holding, &[], &[]);
    timed_out(&r, c);
    stdout_is(&r, "spawned detached child\n");
    let left = host_processes_with("while True: time.sleep(1)");
    ensure!(&r, left.is_empty(), "the detached child holding stdout survived on the host: {left:?}");
}

/// The fork bomb hits pids.max and ends at the timeout or the memory cap; a run beside it
/// completes normally.
fn c04_fork_bomb(c: &Case) {
    let trivial = case_like(c, "python", None, None, Duration::from_secs(30));
    let (bomb, other) = std::thread::scope(|s| {
        let bomb = s.spawn(|| exec(c));
        std::thread::sleep(Duration::from_millis(1500)); // the bomb is at its cap by now
        let other = s.spawn(|| exec_with(&trivial, "print('alive')", &[], &[]));
        (bomb.join().expect("bomb run"), other.join().expect("trivial run"))
    });
    status(&other, "ok");
    exited(&other, 0);
    stdout_is(&other, "alive\n");
    within(&other, Duration::from_secs(10));
    // Both caps hold the bomb, and either may end it: 64 spinning forks copy their parent's pages
    // as they write to them (a cold interpreter's ~2.7 MB of private memory in py-small, a warm
    // start's ~7.6 MB), which on a loaded machine can reach the 256 MiB cap before the 5 s timeout
    // (peaks of 90-256 MiB seen). The kernel then kills one of them: if it is the entry process the
    // run ends `memory_limit`; if not, the rest spin on to the timeout and the run is a `timeout`
    // that says truly that the OOM killer also acted. Which comes first is the only difference.
    let peak = bomb.json["resourceUsage"]["peakMemoryBytes"].as_u64().unwrap_or(0);
    if bomb.status() == "memory_limit" {
        flags(&bomb, false, true);
        within(&bomb, c.timeout + GRACE + SLACK);
    } else {
        ended_by_timeout(&bomb, c);
    }
    if bomb.json["oomKilled"].as_bool() == Some(true) {
        // The flag is only ever the memory cap's doing, never a guess.
        ensure!(&bomb, peak >= 240 << 20, "oomKilled with a peak of {peak} bytes, far below the 256 MiB cap");
    }
    ensure!(&bomb, peak <= 256 << 20, "memory above the cap");
    ensure!(&bomb, bomb.json["killedAtTeardown"].as_u64().unwrap_or(0) <= 64, "more processes than the pids cap");
}

/// A copy of `c` with other limits (for runs beside a case).
fn case_like(c: &Case, language: &str, memory_mb: Option<u64>, pids: Option<u64>, timeout: Duration) -> Case {
    Case { id: format!("{}-aside", c.id), language: language.into(), memory_mb, pids, timeout, files: vec![], network: None, code: String::new() }
}

/// Python over 256 MiB: memory_limit, the allocation lines up to ~192-256 MiB, never BUG.
fn c05_python_memory_limit(c: &Case) {
    let r = exec(c);
    status(&r, "memory_limit");
    flags(&r, false, true);
    signaled(&r, 9, "SIGKILL");
    no_bug(&r);
    let lines: Vec<&str> = r.stdout().lines().collect();
    for (i, l) in lines.iter().enumerate() {
        ensure!(&r, *l == format!("allocated {} MiB", (i + 1) * 32), "unexpected stdout line {l:?}");
    }
    let last = lines.len() * 32;
    ensure!(&r, (192..=256).contains(&last), "last allocation {last} MiB, expected 192..=256 under a 256 MiB limit");
    let peak = r.json["resourceUsage"]["peakMemoryBytes"].as_u64().unwrap_or(0);
    ensure!(&r, ((192 << 20)..=(256 << 20)).contains(&peak), "peakMemoryBytes {peak} not in 192..=256 MiB");
}

/// Node over 256 MiB: memory_limit whether the cgroup killed it or V8 aborted.
fn c06_typescript_memory_limit(c: &Case) {
    let r = exec(c);
    status(&r, "memory_limit");
    flags(&r, false, true);
    let sig = r.json["signal"].as_i64();
    let v8 = r.stderr_of_program().contains("JavaScript heap out of memory");
    match sig {
        Some(9) => signaled(&r, 9, "SIGKILL"),
        Some(6) => {
            signaled(&r, 6, "SIGABRT");
            ensure!(&r, v8, "SIGABRT without V8's heap message");
        }
        None => {
            exited(&r, 134);
            ensure!(&r, v8, "exit 134 without V8's heap message");
        }
        Some(s) => ensure!(&r, false, "ended by signal {s}, neither the OOM killer's nor V8's abort"),
    }
    for l in r.stdout().lines() {
        ensure!(&r, l.starts_with("heap ~") && l.ends_with(" MB"), "unexpected stdout line {l:?}");
    }
}

/// SIGKILL of its own making: an error by signal, not memory_limit.
fn c08_signal_is_not_oom(c: &Case) {
    let r = exec(c);
    status(&r, "error");
    signaled(&r, 9, "SIGKILL");
    flags(&r, false, false);
    stdout_is(&r, "about to SIGKILL myself; memory use is tiny\n");
}

/// SIGTERM to itself ends the program: it is not pid 1.
fn c10_sigterm_to_self(c: &Case) {
    let r = exec(c);
    status(&r, "error");
    signaled(&r, 15, "SIGTERM");
    flags(&r, false, false);
    stdout_is(&r, "sending SIGTERM to myself\n");
    no_bug(&r);
    within(&r, Duration::from_secs(5));
}

/// Polite signals ignored: SIGKILL after the grace period.
fn c11_ignored_signals_escalate(c: &Case) {
    let r = exec(c);
    timed_out(&r, c);
    signaled(&r, 9, "SIGKILL");
    stdout_is(&r, "ignoring polite signals\n");
    no_bug(&r);
    let ms = r.json["durationMs"].as_u64().unwrap_or(0);
    ensure!(&r, u128::from(ms) + 100 >= (c.timeout + GRACE).as_millis(), "durationMs {ms}: SIGKILL came before the grace period ended");
}

/// A sleeping program is ended by the wall clock, with little CPU time.
fn c13_wall_clock_timeout(c: &Case) {
    let r = exec(c);
    timed_out(&r, c);
    stdout_is(&r, "sleeping, using no CPU\n");
    no_bug(&r);
    signaled(&r, 15, "SIGTERM"); // a sleeping program takes the polite signal
    let cpu = r.json["resourceUsage"]["cpuTimeMs"].as_u64();
    ensure!(&r, cpu.is_some_and(|ms| ms < 1000), "cpuTimeMs {cpu:?}, expected a small value for a sleeping program");
}

/// A busy loop is actually killed at the timeout.
fn c14_busy_loop_killed(c: &Case) {
    let r = exec(c);
    timed_out(&r, c);
    stdout_is(&r, "spinning\n");
    let cpu = r.json["resourceUsage"]["cpuTimeMs"].as_u64().unwrap_or(u64::MAX);
    let bound = u64::try_from((c.timeout + GRACE + SLACK).as_millis()).unwrap();
    ensure!(&r, cpu <= bound, "cpuTimeMs {cpu} above the wall time: the loop kept running");
}

/// numpy matmul under 32 pids: BLAS pools sized to the CPU allotment.
fn c17_numpy_threads_vs_pids(c: &Case) {
    crate::environments_installed();
    let r = exec(c);
    status(&r, "ok");
    exited(&r, 0);
    stdout_is(&r, "matmul ok (300, 300) True\n");
    ensure!(&r, !r.stderr_of_program().contains("pthread_create failed"), "thread pool larger than the pids limit");
}

/// A flood stops at the 1 MiB cap with status output_limit.
fn c19_output_flood(c: &Case) {
    let r = exec(c);
    status(&r, "output_limit");
    flags(&r, false, false);
    ensure!(&r, r.json["stdoutTruncated"].as_bool() == Some(true), "stdoutTruncated not set");
    ensure!(&r, r.json["stdoutBase64"].is_null(), "stdoutBase64 set for ASCII output");
    let line = "0123456789".repeat(10) + "\n";
    let want: String = line.repeat((1 << 20) / line.len() + 1).chars().take(1 << 20).collect();
    ensure!(&r, r.stdout().len() == 1 << 20, "stdout is {} bytes, expected exactly 1048576", r.stdout().len());
    ensure!(&r, r.stdout() == want, "stdout is not the program's lines cut at the cap");
    // Stopped at the cap, well before the 10 s timeout.
    within(&r, c.timeout);
}

/// Output printed before the kill is returned (unbuffered Python).
fn c21_partial_output_on_timeout(c: &Case) {
    let r = exec(c);
    timed_out(&r, c);
    stdout_is(&r, "step 1 done\nstep 2 done\n");
}

/// Invalid UTF-8 output: exact bytes in stdoutBase64, lossy text keeps both valid lines.
fn c23_invalid_utf8(c: &Case) {
    let r = exec(c);
    status(&r, "ok");
    exited(&r, 0);
    flags(&r, false, false);
    let mut want = b"valid text before\n\xff\xfe\xc3(\xed\xa0\x80 lone bytes\n".to_vec();
    want.extend(0u8..32);
    want.extend_from_slice(b"\nvalid text after\n");
    let raw = r.json["stdoutBase64"].as_str().map(|b| base64::engine::general_purpose::STANDARD.decode(b).expect("stdoutBase64 is base64"));
    ensure!(&r, raw.as_deref() == Some(want.as_slice()), "stdoutBase64 is not the exact bytes written");
    let text = r.stdout();
    ensure!(&r, text.starts_with("valid text before\n") && text.ends_with("valid text after\n"), "valid lines missing from stdout");
    ensure!(&r, text.contains('\u{FFFD}') && text.contains('\0'), "stdout lacks the replacement characters or the NUL byte");
    ensure!(&r, text == String::from_utf8_lossy(&want), "stdout is not the lossy decoding of the bytes");
}

/// Unicode names in and out, exactly as given.
fn c24_unicode_file_names(c: &Case) {
    let out = "r\u{e9}sultat_\u{5206}\u{6790} (final).txt";
    assert!(c.files.iter().any(|(n, _)| n == "donn\u{e9}es_\u{1f4ca}.csv"), "C24's input name changed in the case file");
    let r = exec(c);
    status(&r, "ok");
    exited(&r, 0);
    flags(&r, false, false);
    stdout_is(&r, &format!("wrote {out}\n"));
    files_are(&r, &[(out, b"total=6\n")]);
}

/// Input names that leave the workspace are rejected before anything runs.
fn c25_input_path_traversal(c: &Case) {
    let executions = env().data.join("executions");
    let mut names: Vec<String> = c.files.iter().map(|(n, _)| n.clone()).collect();
    assert!(names.contains(&"../../escape.txt".to_owned()), "C25's hostile name changed in the case file");
    names.extend(["a/../../x", "..\\..\\escape.txt", "a\\b.txt", "/tmp/escape.txt", "./../escape.txt"].map(String::from));
    println!("C25: NUL variant not sent: a NUL cannot pass through argv (WorkspacePath unit tests cover it)");
    for name in names {
        let r = exec_with(c, &c.code, &[(name.clone(), b"should never be written\n".to_vec())], &[]);
        status(&r, "rejected");
        ensure!(&r, r.status == 2, "CLI exit {}, expected 2 for {name:?}", r.status);
        ensure!(&r, r.json["error"]["type"].as_str() == Some("invalid_file_name"), "error.type for {name:?}");
        let field = r.json["error"]["field"].as_str().unwrap_or("");
        let escaped = name.replace('\\', "\\\\");
        ensure!(&r, field.starts_with("files") && (field.contains(&name) || field.contains(&escaped)), "error.field {field:?} does not name {name:?}");
        ensure!(&r, r.json["exitCode"].is_null() && r.stdout().is_empty(), "the program ran for {name:?}");
        ensure!(&r, r.json["files"].as_object().is_none_or(|m| m.is_empty()), "files returned for {name:?}");
        for p in [executions.join("escape.txt"), env().data.join("escape.txt"), executions.join("x"), env().data.join("x")] {
            ensure!(&r, !p.exists(), "{} was created on the host", p.display());
        }
    }
}

/// Symlinks in the workspace are skipped, never followed.
fn c27_symlinks_not_collected(c: &Case) {
    let r = exec(c);
    status(&r, "ok");
    exited(&r, 0);
    stdout_is(&r, "planted symlinks\n");
    files_are(&r, &[("out/real.txt", b"legit output\n")]);
    let skipped: BTreeSet<(String, String)> = r.json["skippedFiles"]
        .as_array()
        .map(|a| a.iter().map(|s| (s["name"].as_str().unwrap_or("").to_owned(), s["reason"].as_str().unwrap_or("").to_owned())).collect())
        .unwrap_or_default();
    let want: BTreeSet<(String, String)> = ["out/cfg", "out/rel.txt", "out/report.txt"].iter().map(|n| ((*n).to_owned(), "symlink".to_owned())).collect();
    ensure!(&r, skipped == want, "skippedFiles {skipped:?}, expected the three symlinks");
    let text = r.json.to_string();
    ensure!(&r, !text.contains("cm9vdDp4OjA6") && !text.contains("root:x:0:0"), "bytes of a passwd file in the result");
}

/// Writes outside the workspace fail or land in per-run scratch: not returned, not seen later, not on the host.
fn c28_writes_outside_workdir(c: &Case) {
    let targets = ["../planted.txt", "/tmp/planted.txt", "~/planted.txt", "/var/tmp/planted.txt", "/usr/local/lib/planted.txt"];
    let on_host = ["/planted.txt", "/tmp/planted.txt", "/var/tmp/planted.txt", "/usr/local/lib/planted.txt"];
    let before: Vec<bool> = on_host.iter().map(|p| Path::new(p).exists()).collect();
    let r = exec(c);
    status(&r, "ok");
    exited(&r, 0);
    flags(&r, false, false);
    files_are(&r, &[]);
    let lines: Vec<&str> = r.stdout().lines().collect();
    ensure!(&r, lines.len() == targets.len(), "expected one line per target");
    for (line, t) in lines.iter().zip(targets) {
        // The program prints "~/..." expanded (HOME), so only its absoluteness is known here.
        let denied = if t.starts_with('~') { line.starts_with("denied /") } else { line.starts_with(&format!("denied {t} ")) };
        ensure!(&r, denied || line.starts_with("WROTE /"), "unexpected line {line:?} for {t}");
        if let Some(p) = line.strip_prefix("WROTE ") {
            // Writable means per-run scratch; the host and the next run are checked below.
            ensure!(&r, !p.starts_with("/usr") && !p.starts_with("/workspace"), "{t} written at {p}");
        }
    }
    for (p, existed) in on_host.iter().zip(before) {
        if existed {
            println!("C28: {p} existed on the host before the run; not checked there");
        } else {
            ensure!(&r, !Path::new(p).exists(), "{p} appeared on the host");
        }
    }
    let later = exec_with(c, "import os\nfor p in ('/planted.txt', '/tmp/planted.txt', '/var/tmp/planted.txt', '/usr/local/lib/planted.txt', '/workspace/planted.txt'):\n    print(p, os.path.exists(p))\n", &[], &[]);
    status(&later, "ok");
    stdout_is(
        &later,
        "/planted.txt False\n/tmp/planted.txt False\n/var/tmp/planted.txt False\n/usr/local/lib/planted.txt False\n/workspace/planted.txt False\n",
    );
}

/// Filling the disk: ENOSPC in the workspace and in /tmp at their 64 MiB quota, no OOM kill.
fn c30_disk_fill(c: &Case) {
    let r = exec(c);
    status(&r, "ok");
    exited(&r, 0);
    flags(&r, false, false);
    let lines: Vec<&str> = r.stdout().lines().collect();
    ensure!(&r, lines.len() == 3 && lines[2] == "still alive, exiting 0", "expected two error lines and the last line");
    let mut after = Vec::new();
    for (line, path) in lines.iter().zip(["big.bin", "/tmp/big.bin"]) {
        let rest = line.strip_prefix(&format!("{path} -> ")).unwrap_or("");
        let (err, mib) = rest.split_once(" after ").unwrap_or(("", ""));
        ensure!(&r, err == "ENOSPC" || err == "EDQUOT", "{path}: {line:?}, expected ENOSPC or EDQUOT");
        after.push(mib.strip_suffix(" MiB").and_then(|n| n.parse::<u64>().ok()).unwrap_or(u64::MAX));
    }
    // 64 MiB each (the profile's workspace_max_bytes and tmp_max_bytes); the count runs on.
    ensure!(&r, (56..=64).contains(&after[0]), "workspace filled after {} MiB, expected ~64", after[0]);
    ensure!(&r, (56..=64).contains(&(after[1].saturating_sub(after[0]))), "/tmp filled after {} MiB more, expected ~64", after[1].saturating_sub(after[0]));
    // big.bin (64 MiB) is above files_max_bytes (32 MiB): skipped, not returned.
    files_are_named(&r, &[]);
}

/// The names of the returned files are exactly `want` (content not checked).
#[track_caller]
fn files_are_named(r: &Run, want: &[&str]) {
    let got: BTreeSet<&str> = r.json["files"].as_object().map(|m| m.keys().map(String::as_str).collect()).unwrap_or_default();
    let names: BTreeSet<&str> = want.iter().copied().collect();
    ensure!(r, got == names, "files {got:?}, expected {names:?}");
}

/// A 1 MiB input arrives byte-exact.
fn c31_large_input_file(c: &Case) {
    let (name, text) = &c.files[0];
    assert_eq!((name.as_str(), text.len()), ("big.txt", 1 << 20), "C31's input changed in the case file");
    let r = exec(c);
    status(&r, "ok");
    exited(&r, 0);
    flags(&r, false, false);
    stdout_is(&r, "1048576 107b265e8f4929e55502f5983fa1aeecf470db365011336380497fbf43603339\n");
    files_are(&r, &[]); // the input is unchanged, so not an output
}

/// matplotlib with a writable cache dir; chart.png collected.
fn c32_matplotlib_home(c: &Case) {
    crate::environments_installed();
    let r = exec(c);
    status(&r, "ok");
    exited(&r, 0);
    ensure!(&r, r.stdout().starts_with("saved chart.png /"), "stdout {:?}", r.stdout());
    let err = r.stderr_of_program();
    ensure!(&r, !err.contains("OSError") && !err.contains("created a temporary cache directory") && !err.contains("not writable"), "cache dir not writable");
    files_are_named(&r, &["chart.png"]);
    let png = r.file_bytes("chart.png").unwrap_or_default();
    ensure!(&r, png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 1000, "chart.png is not a PNG");
    ensure!(&r, r.json["files"]["chart.png"]["mimeType"].as_str() == Some("image/png"), "mimeType of chart.png");
}

/// Only the documented environment reaches the program, whatever the service's own holds.
fn c34_environment_allowlist(c: &Case) {
    let canaries = [
        ("AWS_SECRET_ACCESS_KEY", "canary-aws-7f3a"),
        ("API_TOKEN", "canary-token-7f3a"),
        ("SUDO_USER", "canary-sudo-7f3a"),
        ("KUBERNETES_SERVICE_HOST", "10.255.0.1"),
        ("DATABASE_URL", "postgres://canary-7f3a"),
        ("SANDBOX_CONFIG", "/canary/config.toml"),
    ];
    let r = exec_with(c, &c.code, &[], &canaries);
    status(&r, "ok");
    exited(&r, 0);
    let allowed = [
        "PATH",
        "HOME",
        "TMPDIR",
        "USER",
        "LOGNAME",
        "LANG",
        "LC_ALL",
        "TZ",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONPATH",
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        "MPLBACKEND",
        "MPLCONFIGDIR",
        "XDG_CONFIG_HOME",
        "XDG_CACHE_HOME",
    ];
    let keys_line = r.stdout().lines().find_map(|l| l.strip_prefix("env keys: ")).unwrap_or("");
    let keys: Vec<&str> = keys_line.trim_start_matches('[').trim_end_matches(']').split(", ").map(|k| k.trim_matches('\'')).filter(|k| !k.is_empty()).collect();
    ensure!(&r, keys.contains(&"PATH") && keys.contains(&"HOME"), "env keys line missing or unparsed: {keys_line:?}");
    let extra: Vec<&&str> = keys.iter().filter(|k| !allowed.contains(k)).collect();
    ensure!(&r, extra.is_empty(), "variables outside the documented allowlist: {extra:?}");
    ensure!(&r, r.stdout().lines().any(|l| l == "suspicious: []"), "suspicious variables present");
    ensure!(&r, !r.stdout().contains("canary") && !r.stdout().contains("10.255.0.1"), "a host variable leaked");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_owned();
    let name = r.stdout().lines().find_map(|l| l.strip_prefix("hostname: ")).unwrap_or("");
    ensure!(&r, !name.is_empty() && name != host, "hostname {name:?} is empty or the host's ({host:?})");
}

/// UTC, UTF-8 everywhere, non-ASCII round-trips.
fn c36_timezone_locale(c: &Case) {
    let s = "na\u{ef}ve caf\u{e9} \u{2013} \u{6771}\u{4eac} \u{2713}";
    let r = exec(c);
    status(&r, "ok");
    exited(&r, 0);
    stdout_is(&r, &format!("tz: ('UTC', 'UTC') 0:00:00\nencoding: UTF-8 utf-8\n{s}\nroundtrip ok: True\n"));
    ensure!(&r, !r.stderr_of_program().contains("UnicodeEncodeError"), "UnicodeEncodeError");
    files_are(&r, &[("unicode.txt", s.as_bytes())]);
}

/// TypeScript runs as an ES module with types erased and top-level await.
fn c37_typescript_esm(c: &Case) {
    let r = exec(c);
    let err = r.stderr_of_program();
    for bad in ["Cannot use import statement outside a module", "await is only valid in async functions", "require is not defined"] {
        ensure!(&r, !err.contains(bad), "stderr has {bad:?}");
    }
    status(&r, "ok");
    exited(&r, 0);
    stdout_is(&r, "total=5 string\n");
    files_are(&r, &[("rows.json", br#"[{"name":"a","score":2},{"name":"b","score":3}]"#)]);
    ensure!(&r, r.json["files"]["rows.json"]["mimeType"].as_str() == Some("application/json"), "mimeType of rows.json");
}

/// 30 concurrent runs each see only their own token and return their own result.txt.
fn c41_concurrency_isolation(c: &Case) {
    const N: usize = 30;
    let (name, template) = &c.files[0];
    assert!(name == "token.txt" && template.contains("REPLACE-WITH-UNIQUE-TOKEN-PER-RUN"), "C41's input changed in the case file");
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let tokens: Vec<String> = (0..N).map(|i| format!("tok-{i:02}-{}-{stamp}", std::process::id())).collect();
    let runs: Vec<Run> = std::thread::scope(|s| {
        let handles: Vec<_> = tokens
            .iter()
            .map(|t| {
                let content = template.replace("REPLACE-WITH-UNIQUE-TOKEN-PER-RUN", t).into_bytes();
                s.spawn(move || exec_with(c, &c.code, &[(name.clone(), content)], &[]))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a concurrent run panicked")).collect()
    });
    let mut ids = BTreeSet::new();
    for (t, r) in tokens.iter().zip(&runs) {
        status(r, "ok");
        exited(r, 0);
        stdout_is(r, &format!("{t} True /workspace\n"));
        files_are(r, &[("result.txt", t.as_bytes())]);
        ids.insert(r.json["executionId"].as_str().unwrap_or("").to_owned());
    }
    assert_eq!(ids.len(), N, "execution ids are not distinct: {ids:?}");
}
