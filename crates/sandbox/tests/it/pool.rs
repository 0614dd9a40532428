//! Warm pools through a real `sandbox serve`: a TypeScript execution that takes a pre-started
//! sandbox keeps every wall a cold one has, nothing of one execution reaches the next (no
//! sandbox serves twice), a burst past the pool's size runs cold, and SIGTERM leaves nothing of
//! the waiting sandboxes behind. (The attack, limit, timeout, file and real-world-case suites
//! also run pooled for TypeScript: `SANDBOX_TEST_WARM=1`, see `run` in main.rs.)

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sandbox_core::wire::{FileContent, WarmStart};
use sandbox_core::{ExecutionRequest, ExecutionResult};

use super::http::Server;
use super::*;

/// A TypeScript pool profile of two, and one with the analysis environment's modules preloaded.
const POOL_PROFILES: &str = r#"
[profiles.ts-pool]
language = "typescript"
[profiles.ts-pool.limits]
memory_max_bytes = 268435456
pids_max = 64
timeout_ms = 10000
grace_ms = 500
[profiles.ts-pool.warm]
mode = "pool"
pool_size = 2
pool_refill_interval_ms = 0

[profiles.ts-pool-analysis]
language = "typescript"
environment = "typescript-analysis"
[profiles.ts-pool-analysis.warm]
mode = "pool"
pool_size = 1
"#;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn req(profile: &str, code: &str) -> ExecutionRequest {
    ExecutionRequest { profile: profile.into(), language: Some("typescript".into()), code: code.into(), ..Default::default() }
}

fn exec(s: &Server, r: &ExecutionRequest) -> ExecutionResult {
    rt().block_on(s.client(None).execute(r)).unwrap_or_else(|e| panic!("{e:?}"))
}

fn metrics(s: &Server) -> String {
    reqwest::blocking::get(format!("{}/metrics", s.url)).unwrap().text().unwrap()
}

/// The value of metric `name` (a gauge or a counter) for `profile` in the server's metrics (0 when absent).
fn value(s: &Server, name: &str, profile: &str) -> i64 {
    let m = metrics(s);
    let prefix = format!("{name}{{profile=\"{profile}\"}} ");
    m.lines().find_map(|l| l.strip_prefix(&prefix)).map_or(0, |v| v.trim().parse().unwrap())
}

/// The sum of metric `name` over its profiles in the exposition `m` (0 when it has none).
fn summed(m: &str, name: &str) -> i64 {
    m.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' ')))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok())
        .sum()
}

/// Waits until `profile`'s pool holds `n` ready sandboxes.
fn wait_pool(s: &Server, profile: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while value(s, "sandbox_warm_pool_ready", profile) < n {
        assert!(Instant::now() < deadline, "the pool of {profile} never held {n}: {}", metrics(s));
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn pool_server() -> Server {
    environments_installed();
    let s = Server::start(POOL_PROFILES);
    wait_pool(&s, "ts-pool", 2);
    s
}

/// Runs `r` and checks it ran in a pooled sandbox.
#[track_caller]
fn pooled(s: &Server, r: &ExecutionRequest) -> ExecutionResult {
    let out = exec(s, r);
    assert!(out.timing.warm && out.timing.warm_start == Some(WarmStart::Pool), "expected a pooled execution: {out:?}");
    out
}

#[test]
fn pooled_sandboxes_serve_once_and_share_nothing() {
    let s = pool_server();
    // Two at once, each in its own pooled sandbox: neither sees the other's files, processes
    // or sockets, and each runs as its own uid.
    let code = r#"
import { existsSync, writeFileSync, readdirSync } from "node:fs";
import net from "node:net";
const who = process.env.WHO, other = who === "a" ? "b" : "a";
writeFileSync(`/workspace/${who}.txt`, who);
writeFileSync(`/tmp/${who}.tmp`, who);
(globalThis as any).leftover = who;
const server = net.createServer().listen(4000, "127.0.0.1");
await new Promise((r) => setTimeout(r, 1500));
const seen = [existsSync(`/workspace/${other}.txt`), existsSync(`/tmp/${other}.tmp`)];
const pids = readdirSync("/proc").filter((p) => /^\d+$/.test(p));
console.log(JSON.stringify({ seen, pids, uid: process.getuid!(), preload: process.env.SANDBOX_PRELOAD ?? null }));
server.close();
"#;
    let with = |who: &str| {
        let mut r = req("ts-pool", code);
        r.env = BTreeMap::from([("WHO".to_owned(), who.to_owned())]);
        r
    };
    let (a, b) = rt().block_on(async {
        let c = s.client(None);
        let (ra, rb) = (with("a"), with("b"));
        tokio::join!(c.execute(&ra), c.execute(&rb))
    });
    let (a, b) = (a.unwrap(), b.unwrap());
    let mut uids = Vec::new();
    for r in [&a, &b] {
        assert!(r.status.as_str() == "ok" && r.timing.warm_start == Some(WarmStart::Pool), "{r:?}");
        let v: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
        assert_eq!(v["seen"], serde_json::json!([false, false]), "{r:?}");
        assert_eq!(v["pids"], serde_json::json!(["2"]), "only itself in /proc: {r:?}");
        assert_eq!(v["preload"], serde_json::Value::Null, "the pool's own variables are not the program's: {r:?}");
        uids.push(v["uid"].clone());
    }
    assert_ne!(uids[0], uids[1], "each execution runs as its own uid");
    // The next execution gets a fresh sandbox: nothing of the two before is there.
    wait_pool(&s, "ts-pool", 1);
    let r = pooled(
        &s,
        &req(
            "ts-pool",
            r#"import { readdirSync } from "node:fs"; console.log(readdirSync("/workspace").length, readdirSync("/tmp").filter((f) => f.endsWith(".tmp")).length, (globalThis as any).leftover ?? "none");"#,
        ),
    );
    assert_eq!(r.stdout, "0 0 none\n", "{r:?}");
}

#[test]
fn a_pooled_execution_is_the_request_as_sent() {
    let s = pool_server();
    // Inputs, the request's environment, stdin (after the harness's header, untouched), the
    // function harness's input and return value, and the caller's line numbers in errors.
    let mut r = req(
        "ts-pool",
        r#"import { readFileSync } from "node:fs";
export default async function (input: { n: number }) {
  const stdin = readFileSync(0, "utf8");
  return { n: input.n * 2, file: readFileSync("/workspace/data/in.txt", "utf8"), env: process.env.GREETING, stdin };
}"#,
    );
    r.harness = Some("function".into());
    r.input = Some(serde_json::json!({"n": 21}));
    r.env = BTreeMap::from([("GREETING".to_owned(), "hello".to_owned())]);
    r.stdin = Some(FileContent::Text("line one\nline two\n".into()));
    r.files = BTreeMap::from([("data/in.txt".to_owned(), FileContent::Text("from a file".into()))]);
    let out = pooled(&s, &r);
    assert_eq!(out.status.as_str(), "ok", "{out:?}");
    assert_eq!(out.return_data, Some(serde_json::json!({"n": 42, "file": "from a file", "env": "hello", "stdin": "line one\nline two\n"})), "{out:?}");
    wait_pool(&s, "ts-pool", 1);
    let out = pooled(&s, &req("ts-pool", "const x: number = 1;\n\nthrow new RangeError(`bad ${x}`);\n"));
    let e = out.error.clone().unwrap();
    assert_eq!((out.status.as_str(), e.kind.as_str(), e.line), ("error", "RangeError", Some(3)), "{out:?}");
}

#[test]
fn a_variable_the_interpreter_reads_at_start_runs_cold() {
    let s = pool_server();
    // NODE_OPTIONS only means something to a Node that starts after it is set.
    let mut r = req("ts-pool", "console.log(process.execArgv.length, process.env.NODE_OPTIONS);");
    r.env = BTreeMap::from([("NODE_OPTIONS".to_owned(), "--no-warnings".to_owned())]);
    let out = exec(&s, &r);
    assert_eq!((out.status.as_str(), out.timing.warm, out.timing.warm_start), ("ok", false, None), "{out:?}");
    assert_eq!(out.stdout, "2 --no-warnings\n", "{out:?}");
    assert!(value(&s, "sandbox_warm_pool_ready", "ts-pool") == 2, "the pool was not touched: {}", metrics(&s));
}

#[test]
fn the_environment_preloaded_in_a_pool_is_importable() {
    let s = pool_server();
    wait_pool(&s, "ts-pool-analysis", 1);
    let r = pooled(&s, &req("ts-pool-analysis", r#"import { z } from "zod"; import _ from "lodash"; console.log(z.number().parse(_.sum([1, 2])));"#));
    assert_eq!((r.status.as_str(), r.stdout.as_str()), ("ok", "3\n"), "{r:?}");
}

#[test]
fn a_burst_past_the_pool_runs_cold_and_the_pool_never_overfills() {
    let s = pool_server();
    let n = 6;
    let r = req("ts-pool", "console.log('ok');");
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n).map(|_| scope.spawn(|| rt().block_on(s.client(None).execute(&r)).map_err(|e| format!("{e:?}")))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (mut warm, mut cold) = (0, 0);
    for r in results {
        let r = r.unwrap();
        assert_eq!((r.status.as_str(), r.stdout.as_str()), ("ok", "ok\n"), "{r:?}");
        if r.timing.warm {
            warm += 1
        } else {
            cold += 1
        }
    }
    assert!(warm >= 1 && cold >= 1 && warm + cold == n, "warm {warm}, cold {cold}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let ready = value(&s, "sandbox_warm_pool_ready", "ts-pool");
        assert!(ready <= 2, "the pool holds {ready}, more than its size");
        std::thread::sleep(Duration::from_millis(50));
    }
    let m = metrics(&s);
    let total = |name: &str| summed(&m, name);
    assert_eq!(total("sandbox_warm_pool_hits_total") + total("sandbox_warm_pool_misses_total"), n, "{m}");
    assert_eq!(total("sandbox_warm_pool_hits_total"), warm, "{m}");
    // Counted per pool: all of it this profile's.
    let hits = m.lines().find_map(|l| l.strip_prefix("sandbox_warm_pool_hits_total{profile=\"ts-pool\"} ")).map(|v| v.trim().parse::<i64>().unwrap());
    let misses = m.lines().find_map(|l| l.strip_prefix("sandbox_warm_pool_misses_total{profile=\"ts-pool\"} ")).map(|v| v.trim().parse::<i64>().unwrap());
    assert_eq!((hits, misses), (Some(warm), Some(cold)), "{m}");
}

#[test]
fn sigterm_leaves_nothing_of_the_pool_behind() {
    let mut s = pool_server();
    let waiting = processes_below(s.pid(), "_sandbox_harness.mjs\0pool");
    assert!(waiting.len() >= 2, "the pooled sandboxes' programs: {waiting:?}");
    let cgroups: Vec<PathBuf> = waiting.iter().flat_map(|pid| cgroup_dirs_of(*pid, &["pool-"])).collect();
    assert!(!cgroups.is_empty(), "each pooled sandbox has its own cgroup");
    let data = s.data.clone();
    assert!(s.terminate().success());
    for pid in &waiting {
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "pooled program {pid} outlived the service");
    }
    for cg in &cgroups {
        assert!(!cg.exists(), "pool cgroup {} is left", cg.display());
    }
    let left: Vec<_> = std::fs::read_dir(data.join("executions")).map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "left in the executions directory: {left:?}");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mountinfo.contains(data.to_str().unwrap()), "a mount under {} is left", data.display());
}

#[test]
fn a_pooled_sandbox_that_dies_before_its_go_runs_the_execution_cold() {
    let s = pool_server();
    // Stopped, the pooled programs are alive at checkout but cannot read their go byte; killed
    // while an execution waits on one, they die between checkout and go (as when a member is
    // killed, or its template ends, at that moment). Stopped, not just signalled: one that runs
    // once more after the signal can read its go byte (it then has started, and is not rerun).
    let waiting = processes_below(s.pid(), "_sandbox_harness.mjs\0pool");
    assert!(waiting.len() >= 2, "the pooled sandboxes' programs: {waiting:?}");
    stop_and_wait(&waiting);
    let r = req("ts-pool", r#"import { writeFileSync } from "node:fs"; writeFileSync("/workspace/once.txt", "x"); console.log("ran", 6 * 7);"#);
    let out = std::thread::scope(|scope| {
        let run = scope.spawn(|| exec(&s, &r));
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!run.is_finished(), "the execution waits on a stopped pooled sandbox");
        // A scrape now must not count the member it took as a hit: the metrics are counters,
        // which cannot take one back when the member turns out not to serve it.
        let m = metrics(&s);
        assert_eq!(summed(&m, "sandbox_warm_pool_hits_total"), 0, "{m}");
        for pid in &waiting {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL);
        }
        run.join().unwrap()
    });
    assert_eq!((out.status.as_str(), out.stdout.as_str()), ("ok", "ran 42\n"), "{out:?}");
    assert!(!out.timing.warm && out.timing.warm_start.is_none(), "it ran cold: {out:?}");
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let m = metrics(&s);
    let total = |name: &str| summed(&m, name);
    assert_eq!((total("sandbox_warm_pool_hits_total"), total("sandbox_warm_pool_misses_total")), (0, 1), "counted as a miss, not a hit: {m}");
    assert!(total("sandbox_warm_pool_discarded_total") >= 1, "{m}");
    // The audit log has the one execution, finished ok, once.
    let db = rusqlite::Connection::open(s.data.join("audit.db")).unwrap();
    let mut q = db.prepare("SELECT kind, status FROM audit_events WHERE execution_id = ?1 ORDER BY seq").unwrap();
    let rows: Vec<(String, String)> = q.query_map([&out.execution_id], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect();
    assert_eq!(rows.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["begin", "finish"], "{rows:?}");
    assert_eq!(rows[1].1, "ok", "{rows:?}");
    // The pool serves again once refilled. The other member killed above may still count as
    // ready until the filler finds it dead (its helper ends a little after its program): an
    // execution that takes it first runs cold (a discard), and the next gets a live one.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        wait_pool(&s, "ts-pool", 1);
        let out = exec(&s, &req("ts-pool", "console.log('ok');"));
        assert_eq!(out.stdout, "ok\n", "{out:?}");
        if out.timing.warm_start == Some(WarmStart::Pool) {
            break;
        }
        assert!(Instant::now() < deadline, "the pool never served again: {out:?}");
    }
}

/// A member taken while another stays ready is replaced once its execution has ended, not
/// while it runs (the replacement's start took the CPU the execution needed); one whose
/// checkout empties the pool is replaced at once. `sandbox_warm_pool_starting` is 1 from the
/// moment the filler starts a member until it is ready.
#[test]
fn a_refill_waits_for_the_execution_when_the_pool_has_another_ready() {
    let s = pool_server();
    let total = |name: &str| {
        let m = metrics(&s);
        summed(&m, name)
    };
    let state = || (value(&s, "sandbox_warm_pool_ready", "ts-pool"), value(&s, "sandbox_warm_pool_starting", "ts-pool"));
    assert_eq!(state(), (2, 0));
    // Runs 0.9 s. Its checkout comes after `asked`, so until `asked` + 0.8 s (less a look's
    // length) it still runs and its deferral (REFILL_DEFER_MAX, 1 s from the checkout) holds,
    // however late this thread sees the checkout.
    // The checkout shows as the pool's depth going down (a hit is counted once the execution
    // ran in the member).
    let r = req("ts-pool", "await new Promise((r) => setTimeout(r, 900)); console.log('done');");
    let hits = total("sandbox_warm_pool_hits_total");
    std::thread::scope(|scope| {
        let asked = Instant::now();
        let run = scope.spawn(|| pooled(&s, &r));
        let deadline = Instant::now() + Duration::from_secs(30);
        while value(&s, "sandbox_warm_pool_ready", "ts-pool") == 2 {
            assert!(Instant::now() < deadline, "no checkout: {}", metrics(&s));
            std::thread::sleep(Duration::from_millis(10));
        }
        // While it runs: the other member waits, and no replacement is being started.
        while asked.elapsed() < Duration::from_millis(700) {
            let seen = state();
            if asked.elapsed() < Duration::from_millis(800) {
                assert_eq!(seen, (1, 0), "a refill began while the execution that took the member ran");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(run.join().unwrap().stdout, "done\n");
    });
    assert_eq!(total("sandbox_warm_pool_hits_total"), hits + 1, "{}", metrics(&s));
    wait_pool(&s, "ts-pool", 2);
    // Two at once empty the pool: the one that takes the last member has its replacement
    // started at once, while both still run.
    let r = req("ts-pool", "await new Promise((r) => setTimeout(r, 1500)); console.log('done');");
    let hits = total("sandbox_warm_pool_hits_total");
    std::thread::scope(|scope| {
        let runs: Vec<_> = (0..2).map(|_| scope.spawn(|| pooled(&s, &r))).collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        while value(&s, "sandbox_warm_pool_ready", "ts-pool") > 0 {
            assert!(Instant::now() < deadline, "no two checkouts: {}", metrics(&s));
            std::thread::sleep(Duration::from_millis(10));
        }
        // Both run for 1.5 s: a replacement started or ready well before either ends.
        let deadline = Instant::now() + Duration::from_millis(1000);
        while state() == (0, 0) {
            assert!(Instant::now() < deadline, "the pool was emptied and not refilled at once");
            std::thread::sleep(Duration::from_millis(10));
        }
        for run in runs {
            assert_eq!(run.join().unwrap().stdout, "done\n");
        }
    });
    assert_eq!(total("sandbox_warm_pool_hits_total"), hits + 2, "{}", metrics(&s));
    wait_pool(&s, "ts-pool", 2);
}

/// Issue 11: the refill is rate-capped, so a burst degrades to cold starts instead of starving
/// the CPU: against a pool of 2 refilled at most once per 1.5 s, a burst of 6 runs (each one
/// `ok`, those past the pool cold) while `sandbox_warm_pool_started_total` rises at most once per
/// interval (every other pool is full, so each start is this pool's).
#[test]
fn a_burst_refills_the_pool_at_most_once_per_refill_interval() {
    const INTERVAL: Duration = Duration::from_millis(1500);
    environments_installed();
    let s = Server::start(&format!(
        "[profiles.py-pool-capped]\nlanguage = \"python\"\n[profiles.py-pool-capped.warm]\nmode = \"pool\"\npool_size = 2\npool_refill_interval_ms = {}\n",
        INTERVAL.as_millis()
    ));
    // Every pool full: a start from now on refills the capped one.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let m = metrics(&s);
        let values = |name: &str| -> BTreeMap<String, i64> {
            m.lines()
                .filter_map(|l| l.strip_prefix(&format!("{name}{{profile=\"")))
                .filter_map(|l| l.split_once("\"} "))
                .map(|(profile, v)| (profile.to_owned(), v.trim().parse().unwrap()))
                .collect()
        };
        let (sizes, ready) = (values("sandbox_warm_pool_size"), values("sandbox_warm_pool_ready"));
        if sizes.contains_key("py-pool-capped") && sizes == ready {
            break;
        }
        assert!(Instant::now() < deadline, "the pools never filled: {m}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let started = || value(&s, "sandbox_warm_pool_started_total", "py-pool-capped");
    let before = started();
    let burst_at = Instant::now();
    let r = ExecutionRequest { profile: "py-pool-capped".into(), language: Some("python".into()), code: "print('ok')".into(), ..Default::default() };
    let (results, starts) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..6).map(|_| scope.spawn(|| rt().block_on(s.client(None).execute(&r)).map_err(|e| format!("{e:?}")))).collect();
        // When the count of starts rises, for 2.5 intervals from the burst.
        let mut starts = Vec::new();
        let mut seen = before;
        while burst_at.elapsed() < INTERVAL * 5 / 2 {
            let now = started();
            for _ in seen..now {
                starts.push(burst_at.elapsed());
            }
            seen = now;
            std::thread::sleep(Duration::from_millis(20));
        }
        (handles.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>(), starts)
    });
    let mut cold = 0;
    for r in results {
        let r = r.unwrap();
        assert_eq!((r.status.as_str(), r.stdout.as_str()), ("ok", "ok\n"), "{r:?}");
        cold += usize::from(!r.timing.warm);
    }
    assert!(cold >= 2, "a burst of 6 past a pool of 2 runs cold: {cold} cold");
    assert!(!starts.is_empty(), "the pool was refilled during the burst");
    for pair in starts.windows(2) {
        // A sample comes at most ~20 ms (plus a /metrics round trip) after the start it sees.
        assert!(pair[1] - pair[0] >= INTERVAL - Duration::from_millis(200), "two refills closer than the interval: {starts:?}");
    }
}
