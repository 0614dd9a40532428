//! The HTTP API through a real `sandbox serve` process and real sockets: round trips, streaming,
//! every error code, auth, admission, disconnects, shutdown, metrics and the OpenAPI document.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use sandbox_client::{Client, ClientError};
use sandbox_core::wire::FileContent;
use sandbox_core::ExecutionRequest;

use super::*;

pub const KEY_ALL: &str = "test-key-all";
pub const KEY_PY: &str = "test-key-py";
/// A scraper's key: role `metrics`, no profile.
pub const KEY_METRICS: &str = "test-key-metrics";
pub const KEYS: &str = r#"
[[service.api_keys]]
name = "all"
sha256 = "31a65195ae16798d1e0d6d435b997168cc1cc4175b7f8a46c1484ed962f7c041"
[[service.api_keys]]
name = "py-only"
sha256 = "8f8d178249f7491637671709aac7e001c228d082a50338b28484fc7d5408cf81"
profiles = ["python-default"]
[[service.api_keys]]
name = "scraper"
sha256 = "0c9165ea8a25209d04bfa8954b5d232f1915e1db4b6637fd0f21ee6d41b88659"
profiles = []
roles = ["metrics"]
"#;

/// A `sandbox serve` on a free loopback port, stopped (SIGTERM) on drop.
pub struct Server {
    child: Child,
    pub url: String,
    pub data: PathBuf,
}

impl Server {
    /// Starts a server whose config is the test profiles plus `service_toml`.
    pub fn start(service_toml: &str) -> Self {
        Self::start_with(service_toml, &[])
    }

    /// Starts a server whose config is the test profiles plus `service_toml`, with extra
    /// `sandbox serve` arguments.
    pub fn start_with(service_toml: &str, serve_args: &[&str]) -> Self {
        let dir = tempfile::Builder::new().prefix("srv-").tempdir_in(&env().dir).unwrap().keep();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        std::fs::write(dir.join("config.toml"), format!("{}{TEST_CONFIG}\n{service_toml}", runtime_toml())).unwrap();
        Self::spawn(&dir.join("config.toml"), dir.join("data"), serve_args)
    }

    /// `sandbox serve` on a free port; its first stdout line names the address.
    pub fn spawn(config: &Path, data: PathBuf, serve_args: &[&str]) -> Self {
        let mut child = Command::new(bin())
            .arg("--config")
            .arg(config)
            .arg("--data-dir")
            .arg(&data)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(serve_args)
            .env("SANDBOX_LOG", std::env::var("SANDBOX_TEST_SERVER_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line.split_whitespace().nth(2).unwrap_or_else(|| panic!("no address in {line:?}")).to_owned();
        Self { child, url, data }
    }

    /// Starts a server again on the same configuration and data directory (after a crash).
    pub fn restart(old: &Server) -> Self {
        Self::spawn(&old.data.parent().unwrap().join("config.toml"), old.data.clone(), &[])
    }

    /// SIGKILL: the service dies without any clean-up of its own.
    pub fn kill9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// The server's host pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn client(&self, key: Option<&str>) -> Client {
        Client::new(&self.url, key.map(str::to_owned))
    }

    /// Execution directories still on the host (a warm profile's running template or waiting
    /// pooled sandbox is not one; a pooled sandbox that has taken an execution, its run file in
    /// its code directory (a template's child forked ahead: `warm/code/`), is).
    pub fn executions_left(&self) -> Vec<String> {
        let dir = self.data.join("executions");
        std::fs::read_dir(&dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|name| {
                        let taken = ["code/_sandbox_run.json", "warm/code/_sandbox_run.json"].iter().any(|f| dir.join(name).join(f).exists());
                        !name.starts_with("template-") && (!name.starts_with("pool-") || taken)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// SIGTERM, then waits for the server to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.terminate();
        }
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn req(profile: &str, code: &str) -> ExecutionRequest {
    ExecutionRequest { profile: profile.into(), code: code.into(), ..Default::default() }
}

#[track_caller]
fn expect_problem(r: Result<sandbox_core::ExecutionResult, ClientError>, code: &str, status: u16) -> (sandbox_core::wire::Problem, Option<u64>) {
    match r {
        Err(ClientError::Problem { problem, retry_after }) => {
            assert_eq!((problem.code.as_str(), problem.status), (code, status), "{problem:?}");
            assert_eq!(problem.type_uri, format!("urn:sandbox:error:{code}"));
            assert!(!problem.detail.is_empty());
            (problem, retry_after)
        }
        other => panic!("expected {code}, got {other:?}"),
    }
}

#[test]
fn round_trips_python_and_typescript_with_files() {
    let s = Server::start(KEYS);
    let c = s.client(Some(KEY_ALL));
    rt().block_on(async {
        let r = c.execute(&req("python-default", "print(6*7)")).await.unwrap();
        assert_eq!((r.status.as_str(), r.stdout.as_str(), r.exit_code), ("ok", "42\n", Some(0)));
        let r = c.execute(&req("typescript-default", "const x: number = 6*7; console.log(x)")).await.unwrap();
        assert_eq!(r.stdout, "42\n");
        let mut with_files =
            req("python-default", "d = open('in.bin','rb').read()\nopen('out.bin','wb').write(bytes(reversed(d)))\nprint(open('t.txt').read())");
        with_files.files.insert("in.bin".into(), FileContent::Base64 { base64: "AAEC/w==".into() });
        with_files.files.insert("t.txt".into(), FileContent::Text("héllo".into()));
        let r = c.execute(&with_files).await.unwrap();
        assert_eq!(r.stdout, "héllo\n");
        let out = &r.files["out.bin"];
        assert_eq!((out.base64.as_str(), out.size), ("/wIBAA==", 4));
        let r = c.execute(&req("python-default", "import sys; sys.exit(4)")).await.unwrap();
        assert_eq!((r.status.as_str(), r.exit_code), ("error", Some(4)));
        let mut slow = req("python-default", "while True: pass");
        slow.timeout = Some(1000);
        let r = c.execute(&slow).await.unwrap();
        assert_eq!((r.status.as_str(), r.timed_out), ("timeout", true));
    });
}

#[test]
fn streaming_delivers_the_first_chunk_long_before_the_end() {
    let s = Server::start(KEYS);
    let c = s.client(Some(KEY_ALL));
    rt().block_on(async {
        let start = Instant::now();
        let mut first = None;
        let mut seen = String::new();
        let r = c
            .execute_stream(&req("python-default", "import time\nfor i in range(5):\n    print(i, flush=True)\n    time.sleep(0.2)"), |_, t| {
                first.get_or_insert(start.elapsed());
                seen.push_str(t);
            })
            .await
            .unwrap();
        let end = start.elapsed();
        assert_eq!(seen, "0\n1\n2\n3\n4\n");
        assert_eq!(r.stdout, seen);
        let first = first.unwrap();
        assert!(first + Duration::from_millis(500) < end, "first chunk at {first:?}, result at {end:?}");
    });
}

#[test]
fn every_error_code_through_the_real_server() {
    let s = Server::start(KEYS);
    let c = s.client(Some(KEY_ALL));
    rt().block_on(async {
        let mut bad = req("python-default", "print(1)");
        bad.files.insert("../x".into(), FileContent::Text("x".into()));
        let (p, _) = expect_problem(c.execute(&bad).await, "invalid_file_name", 400);
        assert_eq!(p.field.as_deref(), Some("files[\"../x\"]"));
        expect_problem(c.execute(&req("nope", "print(1)")).await, "profile_not_found", 404);
        let mut long = req("python-default", "print(1)");
        long.timeout = Some(10_000_000);
        expect_problem(c.execute(&long).await, "timeout_too_large", 400);
        expect_problem(c.execute(&req("python-default", " ")).await, "empty_code", 400);
        expect_problem(s.client(None).execute(&req("python-default", "print(1)")).await, "unauthorized", 401);
        expect_problem(s.client(Some("wrong")).execute(&req("python-default", "print(1)")).await, "unauthorized", 401);
        let py_only = s.client(Some(KEY_PY));
        expect_problem(py_only.execute(&req("typescript-default", "1")).await, "forbidden_profile", 403);
        assert_eq!(py_only.execute(&req("python-default", "print(1)")).await.unwrap().stdout, "1\n");
        let names: Vec<String> = py_only.profiles().await.unwrap().into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["python-default"]);
        let p = c.profile("typescript-default").await.unwrap();
        assert_eq!((p.memory_max_bytes, p.network.as_str()), (512 << 20, "none"));
    });
    // Raw HTTP for what a typed client cannot send.
    let http = reqwest::blocking::Client::new();
    let r = http.post(format!("{}/v1/executions", s.url)).bearer_auth(KEY_ALL).header("content-type", "application/json").body("{nope").send().unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let v: Value = r.json().unwrap();
    assert_eq!(v["code"], "invalid_request");
    let r = http.post(format!("{}/v1/executions", s.url)).header("content-type", "application/json").body("{}").send().unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer realm=\"sandbox\"");
    let r = http.get(format!("{}/v2/nothing", s.url)).send().unwrap();
    assert_eq!(r.status(), 404);
}

#[test]
fn body_limit_is_413() {
    let s = Server::start("[service]\nbody_max_bytes = 2048\n");
    let r = rt().block_on(s.client(None).execute(&req("python-default", &format!("# {}\nprint(1)", "x".repeat(4096)))));
    expect_problem(r, "body_too_large", 413);
}

#[test]
fn full_queue_is_429_with_retry_after_and_nothing_else_fails() {
    let s = Server::start("[service]\nmax_concurrency = 1\nqueue_max = 1\n");
    let c = s.client(None);
    let results = rt().block_on(async {
        let mut calls = Vec::new();
        for _ in 0..4 {
            let c = c.clone();
            calls.push(tokio::spawn(async move { c.execute(&req("python-default", "import time; time.sleep(1.5)")).await }));
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        let mut out = Vec::new();
        for call in calls {
            out.push(call.await.unwrap());
        }
        out
    });
    let ok = results.iter().filter(|r| r.as_ref().is_ok_and(|r| r.status.as_str() == "ok")).count();
    assert_eq!(ok, 2, "one running and one queued succeed: {results:?}");
    for r in results.into_iter().filter(Result::is_err) {
        let (_, retry) = expect_problem(r, "queue_full", 429);
        assert_eq!(retry, Some(1));
    }
    let queued = reqwest::blocking::get(format!("{}/metrics", s.url)).unwrap().text().unwrap();
    assert!(queued.contains("sandbox_rejected_total{code=\"queue_full\"} 2"), "{queued}");
    assert!(queued.contains("sandbox_executions_total{profile=\"python-default\",status=\"ok\"} 2"), "{queued}");
}

#[test]
fn client_disconnect_ends_the_execution() {
    let s = Server::start("");
    let http = reqwest::blocking::Client::builder().timeout(Duration::from_millis(1500)).build().unwrap();
    let body = serde_json::json!({"profile": "python-default", "code": "import time\nprint('started', flush=True)\ntime.sleep(60)"});
    let r = http.post(format!("{}/v1/executions", s.url)).json(&body).send();
    assert!(r.is_err(), "the client gave up");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !s.executions_left().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(s.executions_left(), Vec::<String>::new(), "the abandoned execution was torn down");
}

/// A SIGTERM the moment the service says where it listens (its warm templates and pooled
/// sandboxes still starting) is a graceful shutdown: the service exits 0 with nothing of them
/// left. Its handler used to be installed only when the server first polled its shutdown
/// future, so a SIGTERM before that killed it outright and left a template's and a pooled
/// sandbox's cgroups, mounts and directories (CI's host-leftovers check caught one).
#[test]
fn a_sigterm_right_after_the_start_stops_what_the_start_began() {
    for _ in 0..5 {
        let mut s = Server::start("");
        let status = s.terminate();
        assert!(status.success(), "killed rather than shut down: {status:?}");
        let left: Vec<String> = std::fs::read_dir(s.data.join("executions"))
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        assert_eq!(left, Vec::<String>::new(), "left in the data directory");
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(!mountinfo.contains(&s.data.display().to_string()), "a mount of the service is still there");
    }
}

#[test]
fn graceful_shutdown_finishes_in_flight_then_ends_the_rest() {
    let mut s = Server::start("[service]\nshutdown_grace_ms = 2500\n");
    let c = s.client(None);
    let handle = std::thread::spawn(move || {
        rt().block_on(async {
            let (a, b) = (req("python-default", "import time; time.sleep(1); print('done')"), req("python-default", "import time; time.sleep(60)"));
            tokio::join!(c.execute(&a), c.execute(&b))
        })
    });
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    let status = s.terminate();
    assert!(status.success(), "{status:?}");
    assert!(t.elapsed() < Duration::from_secs(6), "shutdown took {:?}", t.elapsed());
    let (short, long) = handle.join().unwrap();
    assert_eq!(short.unwrap().stdout, "done\n", "in-flight work within the grace period completes");
    let (p, _) = expect_problem(long, "internal_error", 500);
    assert!(p.detail.contains("shut down") && p.execution_id.is_some(), "work past the grace period is ended and answered: {p:?}");
    assert_eq!(s.executions_left(), Vec::<String>::new(), "nothing left after shutdown");
    assert!(reqwest::blocking::get(format!("{}/healthz", s.url)).is_err(), "no longer accepting");
}

#[test]
fn refuses_a_public_address_without_keys() {
    let out = sandbox(&["serve", "--listen", "0.0.0.0:0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--insecure-no-auth"), "{out:?}");
}

#[test]
fn health_ready_metrics_and_openapi() {
    let s = Server::start("");
    let get = |p: &str| reqwest::blocking::get(format!("{}{p}", s.url)).unwrap();
    assert_eq!(get("/healthz").status(), 200);
    let ready = get("/readyz").text().unwrap();
    assert!(ready.starts_with("ready\n"), "{ready}");
    // Each line after the first names a profile this host cannot run, and why.
    for line in ready.lines().skip(1) {
        assert!(line.starts_with("unavailable "), "{ready}");
    }
    let served: Value = get("/openapi.json").json().unwrap();
    let committed: Value = serde_json::from_str(&std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.json")).unwrap()).unwrap();
    assert_eq!(served, committed, "docs/openapi.json is stale: regenerate with `sandbox openapi > docs/openapi.json`");
    assert!(served["paths"]["/v1/executions"]["post"].is_object());
    let m = get("/metrics").text().unwrap();
    for name in ["sandbox_in_flight", "sandbox_queued", "sandbox_execution_duration_seconds"] {
        assert!(m.contains(name), "{m}");
    }
    // No sandbox of this service failed its teardown.
    assert!(m.lines().any(|l| l == "sandbox_teardown_failures_total 0"), "{m}");
    // Counts since the start are counters (rate() and increase() need them so), levels gauges.
    for counter in ["sandbox_teardown_failures", "sandbox_executions", "sandbox_rejected", "sandbox_warm_cold_fallbacks"] {
        assert!(m.lines().any(|l| l == format!("# TYPE {counter} counter")), "{counter}: {m}");
    }
    for gauge in ["sandbox_in_flight", "sandbox_queued"] {
        assert!(m.lines().any(|l| l == format!("# TYPE {gauge} gauge")), "{gauge}: {m}");
    }
}

#[test]
fn cli_server_mode_streams_and_maps_errors() {
    let s = Server::start(KEYS);
    let out = sandbox(&["run", "--server", &s.url, "--api-key", KEY_ALL, "-c", "import sys\nprint('hi')\nsys.exit(3)"]).output().unwrap();
    assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stdout).as_ref()), (Some(3), "hi\n"));
    let input = scratch_file("x.txt", b"x");
    let arg = format!("../x={}", input.display());
    let out = sandbox(&["run", "--server", &s.url, "--api-key", KEY_ALL, "--file", &arg, "-c", "print(1)"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("error[invalid_file_name]"), "{out:?}");
    // A timeout exits 124 through the service as locally (coreutils' `timeout`).
    let out = sandbox(&["run", "--server", &s.url, "--api-key", KEY_ALL, "--timeout", "500ms", "-c", "import time\ntime.sleep(30)"]).output().unwrap();
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("sandbox: timed out after"), "{out:?}");
}

#[test]
fn a_stalled_audit_write_stalls_neither_health_probes_nor_streams() {
    // Audit writes, mounts, cgroup writes and teardown run on blocking threads: with every
    // execution's audit write held up by a lock on the log, /healthz and a running stream
    // still answer at once. (Before, six stalled writes took both runtime workers of a
    // two-core host and everything waited.)
    let s = Server::start("[service]\nmax_concurrency = 8\nqueue_max = 8\n");
    let c = s.client(None);
    let (first_tx, first_rx) = std::sync::mpsc::channel::<()>();
    let streamer = {
        let c = c.clone();
        std::thread::spawn(move || {
            let mut arrivals = Vec::new();
            let code = "import time\nfor i in range(200):\n    print(i, flush=True)\n    time.sleep(0.02)";
            let r = rt().block_on(c.execute_stream(&req("python-default", code), |_, _| {
                if arrivals.is_empty() {
                    let _ = first_tx.send(());
                }
                arrivals.push(Instant::now());
            }));
            (r, arrivals)
        })
    };
    first_rx.recv_timeout(Duration::from_secs(30)).expect("the stream started");
    // Hold the audit log's write lock: every audit write of the service now waits for it.
    let db = rusqlite::Connection::open(s.data.join("audit.db")).unwrap();
    db.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let locked_at = Instant::now();
    let stalled: Vec<_> = (0..6)
        .map(|_| {
            let c = c.clone();
            std::thread::spawn(move || rt().block_on(c.execute(&req("python-default", "print(1)"))).map_err(|e| e.to_string()))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let http = reqwest::blocking::Client::builder().timeout(Duration::from_secs(2)).build().unwrap();
    let mut slowest = Duration::ZERO;
    while locked_at.elapsed() < Duration::from_millis(2300) {
        let t = Instant::now();
        let r = http.get(format!("{}/healthz", s.url)).send().unwrap_or_else(|e| panic!("/healthz did not answer while audit writes were stalled: {e}"));
        assert_eq!(r.status(), 200);
        slowest = slowest.max(t.elapsed());
        std::thread::sleep(Duration::from_millis(50));
    }
    let unlocked_at = Instant::now();
    db.execute_batch("COMMIT").unwrap();
    // A stall is the lock's 2.3 s; the bounds leave room for a busy host's scheduling.
    assert!(slowest < Duration::from_millis(750), "/healthz took {slowest:?} while audit writes were stalled");
    let (r, arrivals) = streamer.join().unwrap();
    assert_eq!(r.unwrap().status.as_str(), "ok");
    let window: Vec<&Instant> = arrivals.iter().filter(|t| **t >= locked_at + Duration::from_millis(300) && **t <= unlocked_at).collect();
    assert!(window.len() > 10, "the stream went on while audit writes were stalled: {} chunks", window.len());
    let gap = window.windows(2).map(|w| w[1].duration_since(*w[0])).max().unwrap();
    assert!(gap < Duration::from_millis(750), "the stream stalled for {gap:?} while audit writes were stalled");
    for t in stalled {
        let r = t.join().unwrap().unwrap();
        assert_eq!((r.status.as_str(), r.stdout.as_str()), ("ok", "1\n"), "the stalled executions ran once the log was free");
    }
}

#[test]
fn readyz_and_profiles_name_what_cannot_run() {
    let s = Server::start(
        "[profiles.py-gone-mount]\nlanguage = \"python\"\n[[profiles.py-gone-mount.filesystem.mounts]]\nhost = \"/nonexistent/dataset\"\nsandbox = \"/data\"\n",
    );
    let ready = reqwest::blocking::get(format!("{}/readyz", s.url)).unwrap();
    assert_eq!(ready.status(), 200, "the node still serves its other profiles");
    let text = ready.text().unwrap();
    assert!(text.starts_with("ready\n"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("unavailable py-gone-mount: ") && l.contains("/nonexistent/dataset")), "{text}");
    let profiles = rt().block_on(s.client(None).profiles()).unwrap();
    let gone = profiles.iter().find(|p| p.name == "py-gone-mount").unwrap();
    assert_eq!((gone.available, gone.unavailable_code), (Some(false), Some(sandbox_core::ErrorCode::RuntimeUnavailable)));
    assert!(gone.unavailable_reason.as_deref().unwrap().contains("/nonexistent/dataset"), "{gone:?}");
    let default = profiles.iter().find(|p| p.name == "python-default").unwrap();
    assert_eq!((default.available, default.unavailable_reason.as_deref()), (Some(true), None));
}
