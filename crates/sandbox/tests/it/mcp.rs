//! `/mcp` on a real `sandbox serve`, with raw JSON-RPC over reqwest (the protocol itself is
//! tested through the official Python MCP SDK in crates/sandbox-mcp/tests/python): a legacy
//! session's open event stream does not hold the shutdown past its grace period.

use std::io::Read;

const JSON_AND_SSE: &str = "application/json, text/event-stream";

#[test]
fn shutdown_ends_open_mcp_sessions() {
    let mut server = super::http::Server::start("[service]\nshutdown_grace_ms = 500\n");
    let url = format!("{}/mcp", server.url);
    let http = reqwest::blocking::Client::new();
    // The 2025-11-25 handshake opens a session.
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}}});
    let r = http.post(&url).header("accept", JSON_AND_SSE).json(&init).send().unwrap();
    assert_eq!(r.status(), 200);
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let body = r.text().unwrap();
    assert!(body.contains(r#""protocolVersion":"2025-11-25""#) && body.contains(r#""name":"sandbox""#), "{body}");
    let initialized = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let r = http
        .post(&url)
        .header("accept", JSON_AND_SSE)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .json(&initialized)
        .send()
        .unwrap();
    assert_eq!(r.status(), 202);
    // The session's standalone event stream stays open, as clients keep it.
    let mut stream =
        http.get(&url).header("accept", "text/event-stream").header("mcp-session-id", &session).header("mcp-protocol-version", "2025-11-25").send().unwrap();
    assert_eq!(stream.status(), 200);
    // SIGTERM: the server exits (it would wait on the open stream forever otherwise), and the
    // stream ends with it.
    let status = server.terminate();
    assert!(status.success(), "{status:?}");
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
}

/// One JSON-RPC call on a streamable HTTP MCP session; the answer, whether it came as JSON or
/// as an SSE event.
fn rpc(http: &reqwest::blocking::Client, url: &str, session: Option<&str>, body: &serde_json::Value) -> (Option<String>, serde_json::Value) {
    let mut req = http.post(url).header("accept", JSON_AND_SSE).header("mcp-protocol-version", "2025-11-25").json(body);
    if let Some(s) = session {
        req = req.header("mcp-session-id", s);
    }
    let r = req.send().unwrap();
    let session = r.headers().get("mcp-session-id").map(|v| v.to_str().unwrap().to_owned());
    let text = r.text().unwrap();
    let json = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .find(|d| d.contains("\"id\""))
        .map_or_else(|| serde_json::from_str(&text), serde_json::from_str)
        .unwrap_or_else(|e| panic!("not a JSON-RPC answer ({e}): {text}"));
    (session, json)
}

/// An initialized MCP session on `url`.
fn session(http: &reqwest::blocking::Client, url: &str) -> String {
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}}});
    let (session, _) = rpc(http, url, None, &init);
    let session = session.expect("a session id");
    let r = http
        .post(url)
        .header("accept", JSON_AND_SSE)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .json(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 202);
    session
}

/// Issue 15: a resource of an execution run through one node is read through another, as a
/// load balancer may send the later call anywhere: results are kept in the shared PostgreSQL.
/// A node on a database of its own (SQLite) does not have it.
#[test]
fn a_result_kept_by_one_node_is_read_through_another() {
    use base64::Engine as _;
    let Ok(admin) = std::env::var("SANDBOX_TEST_POSTGRES_URL") else {
        assert!(std::env::var_os("CI").is_none(), "CI must provide SANDBOX_TEST_POSTGRES_URL (scripts/test.sh starts PostgreSQL)");
        eprintln!("skipped: several nodes need PostgreSQL (set SANDBOX_TEST_POSTGRES_URL to run it)");
        return;
    };
    let db = format!("mcp_nodes_{}", std::process::id());
    let mut c = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
    c.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")).unwrap();
    c.batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
    let shared = format!("[audit]\nurl = \"{admin} dbname={db}\"\n");
    let (a, b) = (super::http::Server::start(&shared), super::http::Server::start(&shared));
    let alone = super::http::Server::start("");
    let http = reqwest::blocking::Client::new();
    let on_a = format!("{}/mcp", a.url);
    let s = session(&http, &on_a);
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "sandbox_execute_code",
        "arguments": {"code": "open('report.txt', 'w').write('made on node a')", "language": "python"}}});
    let (_, answer) = rpc(&http, &on_a, Some(&s), &call);
    let id = answer["result"]["structuredContent"]["executionId"].as_str().unwrap_or_else(|| panic!("{answer}")).to_owned();
    let uri = format!("sandbox://executions/{id}/files/report.txt");
    let read = serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": uri}});
    for (node, url) in [("a", &a.url), ("b", &b.url)] {
        let url = format!("{url}/mcp");
        let (_, answer) = rpc(&http, &url, Some(&session(&http, &url)), &read);
        let blob = answer["result"]["contents"][0]["blob"].as_str().unwrap_or_else(|| panic!("node {node}: {answer}"));
        assert_eq!(base64::engine::general_purpose::STANDARD.decode(blob).unwrap(), b"made on node a", "node {node}");
    }
    let url = format!("{}/mcp", alone.url);
    let (_, answer) = rpc(&http, &url, Some(&session(&http, &url)), &read);
    assert!(answer["error"].is_object(), "a node with its own database cannot have it: {answer}");
    drop((a, b, alone));
    let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
}

/// `sandbox mcp` on stdin/stdout, its answers and notifications read line by line.
struct StdioMcp {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<serde_json::Value>,
    data: std::path::PathBuf,
}

impl StdioMcp {
    /// Starts `sandbox mcp` on the test profiles in a data directory of its own, and makes the
    /// 2025-11-25 handshake.
    fn start() -> Self {
        use std::io::BufRead as _;
        let dir = tempfile::Builder::new().prefix("mcp-").tempdir_in(&super::env().dir).unwrap().keep();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        std::fs::write(dir.join("config.toml"), format!("{}{}", super::runtime_toml(), super::TEST_CONFIG)).unwrap();
        let data = dir.join("data");
        let mut child = std::process::Command::new(super::bin())
            .arg("--config")
            .arg(dir.join("config.toml"))
            .arg("--data-dir")
            .arg(&data)
            .arg("mcp")
            .env("SANDBOX_LOG", std::env::var("SANDBOX_TEST_SERVER_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                let v = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON-RPC ({e}): {line}"));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        let mut mcp = Self { child, stdin: Some(stdin), lines, data };
        mcp.send(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}}}));
        let answer = mcp.answer(1);
        assert!(answer["result"]["serverInfo"]["name"] == "sandbox", "{answer}");
        mcp.send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, message: &serde_json::Value) {
        use std::io::Write as _;
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{message}").and_then(|()| stdin.flush()).unwrap();
    }

    /// The next message that satisfies `want`, within 120 s (others are skipped).
    fn next(&self, want: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let v = self.lines.recv_timeout(left).unwrap_or_else(|e| panic!("no awaited message from sandbox mcp: {e}"));
            if want(&v) {
                return v;
            }
        }
    }

    /// Its exit status, once it exits within `patience` (else the test fails, saying `when`).
    #[track_caller]
    fn exit_within(&mut self, patience: std::time::Duration, when: &str) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + patience;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(std::time::Instant::now() < deadline, "sandbox mcp did not exit {when}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// The answer to request `id`.
    fn answer(&self, id: u64) -> serde_json::Value {
        self.next(|v| v["id"] == id)
    }

    /// Sends `tools/call sandbox_execute_code` with `args` as request `id` (and `meta`).
    fn call(&mut self, id: u64, args: serde_json::Value, meta: serde_json::Value) {
        self.send(&serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "sandbox_execute_code", "arguments": args, "_meta": meta}}));
    }
}

impl Drop for StdioMcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Issue 11: a SIGTERM of `sandbox mcp` (stdio) ends the running execution (answered as an
/// `internal_error`), stops the warm templates and pools, and exits 0 leaving nothing behind: no
/// process, cgroup, mount or execution directory.
#[test]
fn sigterm_of_stdio_mcp_leaves_nothing_of_its_executions_templates_and_pools() {
    super::environments_installed();
    let mut mcp = StdioMcp::start();
    // A pooled sandbox (python-default) and a template (python-analysis) are ready once an
    // execution of each starts warm.
    let mut id = 10;
    for profile in ["python-default", "python-analysis"] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
        loop {
            id += 1;
            mcp.call(id, serde_json::json!({"code": "print(1)", "language": "python", "profile": profile}), serde_json::json!({}));
            let answer = mcp.answer(id);
            let result = &answer["result"]["structuredContent"];
            assert_eq!(result["status"], "ok", "{answer}");
            if result["timing"]["warm"] == true {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{profile} never started warm: {answer}");
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
    // An execution runs (its output was seen) when the signal comes.
    let running = id + 1;
    mcp.call(
        running,
        serde_json::json!({"code": "import time\nprint('started', flush=True)\ntime.sleep(60)", "language": "python", "profile": "python-default"}),
        serde_json::json!({"progressToken": "sleeper"}),
    );
    mcp.next(|v| v["method"] == "notifications/progress" && v["params"]["message"].as_str().is_some_and(|m| !m.contains("; 0 bytes of output")));
    let pid = i32::try_from(mcp.child.id()).unwrap();
    let below: Vec<i32> = super::processes_below(mcp.child.id(), "").into_iter().filter(|p| *p != pid).collect();
    for needle in ["_sandbox_template.py", "_sandbox_harness.py\0pool", "_sandbox_harness.mjs\0pool"] {
        assert!(!super::processes_below(mcp.child.id(), needle).is_empty(), "no {needle:?} process below sandbox mcp");
    }
    let cgroups: Vec<_> = below.iter().flat_map(|p| super::cgroup_dirs_of(*p, &["/sandbox/"])).collect();
    assert!(cgroups.iter().any(|c| c.to_string_lossy().contains("/pool-")), "pooled sandboxes have cgroups: {cgroups:?}");
    assert!(cgroups.iter().any(|c| c.to_string_lossy().contains("/template-")), "templates have cgroups: {cgroups:?}");
    let executions = mcp.data.join("executions");
    let ids: Vec<String> = std::fs::read_dir(&executions).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(ids.iter().any(|i| i.starts_with("pool-")) && ids.iter().any(|i| i.starts_with("template-")), "{ids:?}");

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM).unwrap();
    let answer = mcp.answer(running);
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(answer["result"]["structuredContent"]["status"], "internal_error", "{answer}");
    let status = mcp.exit_within(std::time::Duration::from_secs(30), "after SIGTERM");
    assert!(status.success(), "{status:?}");
    for p in &below {
        // A sandbox's init, orphaned when its helper was killed, may wait a moment as a zombie
        // for the host's pid 1 to reap it: dead, it holds nothing.
        let status = std::fs::read_to_string(format!("/proc/{p}/status")).unwrap_or_default();
        let cmdline = std::fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap_or_default();
        assert!(status.is_empty() || status.contains("\nState:\tZ"), "process {p} outlived sandbox mcp: {cmdline:?}\n{status}");
    }
    for c in &cgroups {
        assert!(!c.exists(), "cgroup {} is left", c.display());
    }
    for i in &ids {
        super::assert_gone_from(&mcp.data, i);
    }
    let left: Vec<_> = std::fs::read_dir(&executions).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "left in the executions directory: {left:?}");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mountinfo.contains(mcp.data.to_str().unwrap()), "a mount under {} is left", mcp.data.display());
}

/// Closing stdin is an MCP stdio client's shutdown (the transport's spec: the client closes the
/// server's input stream first): the running execution ends at once, is answered
/// (`internal_error`) and recorded so, and the server exits 0. Before, rmcp waited its 5 s for
/// the call to end by itself, exited without answering it, and the record stayed `running`
/// until a later start marked it `interrupted`.
#[test]
fn closing_stdin_of_stdio_mcp_ends_its_running_execution_answered_and_recorded() {
    let mut mcp = StdioMcp::start();
    mcp.call(
        2,
        serde_json::json!({"code": "import time\nprint('started', flush=True)\ntime.sleep(60)", "language": "python", "profile": "py-small"}),
        serde_json::json!({"progressToken": "sleeper"}),
    );
    mcp.next(|v| v["method"] == "notifications/progress" && v["params"]["message"].as_str().is_some_and(|m| !m.contains("; 0 bytes of output")));
    drop(mcp.stdin.take());
    let answer = mcp.answer(2);
    assert_eq!(answer["result"]["structuredContent"]["status"], "internal_error", "{answer}");
    let id = answer["result"]["structuredContent"]["executionId"].as_str().unwrap().to_owned();
    let status = mcp.exit_within(std::time::Duration::from_secs(30), "after its stdin closed");
    assert!(status.success(), "{status:?}");
    let out = std::process::Command::new(super::bin()).arg("--data-dir").arg(&mcp.data).args(["audit", "show", &id]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let record: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(record["status"], "internal_error", "{record}");
    super::assert_gone_from(&mcp.data, &id);
}

/// An MCP session belongs to the API key whose `initialize` opened it: another key naming it
/// (its id is random but not secret: rmcp logs it) gets 404 as for an unknown session, on
/// POST, GET and DELETE, and the session goes on serving its owner. Before, another key's
/// `DELETE` ended it (an attack review).
#[test]
fn another_keys_request_on_a_session_is_answered_as_for_an_unknown_one() {
    use super::http::{KEYS, KEY_ALL, KEY_PY};
    let server = super::http::Server::start(KEYS);
    let url = format!("{}/mcp", server.url);
    let http = reqwest::blocking::Client::new();
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}}});
    let r = http.post(&url).bearer_auth(KEY_ALL).header("accept", JSON_AND_SSE).json(&init).send().unwrap();
    assert_eq!(r.status(), 200);
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let as_key = |key: &str, method: reqwest::Method, body: Option<serde_json::Value>| {
        let mut req = http
            .request(method, &url)
            .bearer_auth(key)
            .header("accept", JSON_AND_SSE)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(b) = body {
            req = req.json(&b);
        }
        req.send().unwrap().status().as_u16()
    };
    let initialized = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(as_key(KEY_ALL, reqwest::Method::POST, Some(initialized.clone())), 202);
    let list = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    assert_eq!(as_key(KEY_PY, reqwest::Method::POST, Some(list.clone())), 404, "another key posted into the session");
    assert_eq!(as_key(KEY_PY, reqwest::Method::GET, None), 404, "another key opened the session's stream");
    assert_eq!(as_key(KEY_PY, reqwest::Method::DELETE, None), 404, "another key ended the session");
    assert_eq!(as_key(KEY_ALL, reqwest::Method::POST, Some(list)), 200, "the owner's session goes on");
    assert_eq!(as_key(KEY_ALL, reqwest::Method::DELETE, None), 200, "its owner ends it");
    assert_eq!(as_key(KEY_ALL, reqwest::Method::POST, Some(initialized)), 404, "ended");
}

/// Open MCP sessions are capped, per caller and in all: opening one past a cap ends the oldest
/// (the caller's own first), in rmcp too, so that `initialize` requests alone cannot fill the
/// service's memory (an attack review: ~66 kB per session, 2.7 GB in 40 s, none freed), and
/// one key's flood does not end another key's sessions. The ended session is then unknown
/// (404: a client opens a new one, as the MCP specification has it).
#[test]
fn mcp_sessions_are_capped_per_caller_and_in_all() {
    use super::http::{KEYS, KEY_ALL, KEY_METRICS, KEY_PY};
    let server = super::http::Server::start(&format!("[service]\nmcp_sessions_max = 6\nmcp_sessions_per_caller = 4\n{KEYS}"));
    let url = format!("{}/mcp", server.url);
    let http = reqwest::blocking::Client::new();
    let open = |key: &str| -> String {
        let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}}});
        let r = http.post(&url).bearer_auth(key).header("accept", JSON_AND_SSE).json(&init).send().unwrap();
        assert_eq!(r.status(), 200);
        r.headers()["mcp-session-id"].to_str().unwrap().to_owned()
    };
    let list = |key: &str, session: &str| -> u16 {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        let r = http
            .post(&url)
            .bearer_auth(key)
            .header("accept", JSON_AND_SSE)
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25")
            .json(&body)
            .send()
            .unwrap();
        r.status().as_u16()
    };
    let gauge = || -> u64 {
        let text = http.get(format!("{}/metrics", server.url)).bearer_auth(KEY_METRICS).send().unwrap().text().unwrap();
        let line = text.lines().find(|l| l.starts_with("sandbox_mcp_sessions ")).unwrap_or_else(|| panic!("no gauge: {text}"));
        line.split(' ').nth(1).unwrap().parse().unwrap()
    };
    let py: Vec<String> = (0..2).map(|_| open(KEY_PY)).collect();
    // A flood of one key: its open sessions stay at its cap, the other key's live on.
    let flood: Vec<String> = (0..40).map(|_| open(KEY_ALL)).collect();
    assert_eq!(gauge(), 6, "open sessions: the py key's 2 and the flooding key's 4");
    for s in &py {
        assert_eq!(list(KEY_PY, s), 200, "another key's flood ended a session");
    }
    for s in &flood[..36] {
        assert_eq!(list(KEY_ALL, s), 404, "a session past the cap still answers");
    }
    for s in &flood[36..] {
        assert_eq!(list(KEY_ALL, s), 200);
    }
    // Past the total: the oldest of all (a py session) ends, as the per-caller cap allows it.
    let more = open(KEY_PY);
    assert_eq!(gauge(), 6);
    assert_eq!(list(KEY_PY, &py[0]), 404, "the oldest session of all ended");
    assert_eq!(list(KEY_PY, &more), 200);
}

/// A `/mcp` body of many small JSON values is refused before rmcp parses it (413
/// `body_too_large`): rmcp builds a value tree at ~100-250 bytes per value, and an 8 MiB array
/// of zeros took 1 GB (an attack review, with a key that may run nothing). And a client that
/// leaves before its `initialize` is answered leaves no session past the cap: rmcp made it
/// before the answer carried its id, so nobody counted it (34,000 were held that way).
#[test]
fn mcp_bodies_of_many_values_and_abandoned_initializes_are_bounded() {
    use super::http::{KEYS, KEY_METRICS};
    use std::io::Write as _;
    let server = super::http::Server::start(&format!("[service]\nmcp_sessions_max = 4\nmcp_sessions_per_caller = 4\n{KEYS}"));
    let url = format!("{}/mcp", server.url);
    let http = reqwest::blocking::Client::new();
    let zeros = format!(r#"{{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {{"x": [{}0]}}}}"#, "0,".repeat(200_000));
    let r = http.post(&url).bearer_auth(KEY_METRICS).header("accept", JSON_AND_SSE).header("content-type", "application/json").body(zeros).send().unwrap();
    assert_eq!(r.status(), 413);
    assert!(r.text().unwrap().contains("body_too_large"));
    let gauge = || -> u64 {
        let text = http.get(format!("{}/metrics", server.url)).bearer_auth(KEY_METRICS).send().unwrap().text().unwrap();
        text.lines().find_map(|l| l.strip_prefix("sandbox_mcp_sessions ")).unwrap().parse().unwrap()
    };
    let init = r#"{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}}}"#;
    let authority = server.url.trim_start_matches("http://").to_owned();
    for i in 0..300 {
        let mut c = std::net::TcpStream::connect(&authority).unwrap();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {KEY_METRICS}\r\nAccept: {JSON_AND_SSE}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            init.len()
        );
        c.write_all(head.as_bytes()).unwrap();
        c.write_all(init.as_bytes()).unwrap();
        // Gone before the answer: at once, or a little later.
        if i % 2 == 1 {
            std::thread::sleep(std::time::Duration::from_micros(500));
        }
        let _ = c.shutdown(std::net::Shutdown::Both);
    }
    // One that stays opens a session; those nobody could reach are gone by then.
    let r = http.post(&url).bearer_auth(KEY_METRICS).header("accept", JSON_AND_SSE).header("content-type", "application/json").body(init).send().unwrap();
    assert_eq!(r.status(), 200);
    assert!(gauge() <= 4, "open sessions past the cap: {}", gauge());
}
