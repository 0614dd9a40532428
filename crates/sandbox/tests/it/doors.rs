//! One execution service below every door: the same bad requests sent to `POST /v1/executions`
//! and to the MCP tool `sandbox_execute_code` (over `/mcp` of the same server, same key) are
//! refused with the same code and message, leave the same audit record (but for the caller's
//! name) and count the same in `/metrics`.

use serde_json::json;

use super::http::{Server, KEYS, KEY_PY};
use super::*;

const JSON_AND_SSE: &str = "application/json, text/event-stream";

/// An MCP session on `/mcp` (the 2025-11-25 handshake) for `key`.
struct Mcp {
    http: reqwest::blocking::Client,
    url: String,
    key: String,
    session: String,
    next_id: u64,
}

impl Mcp {
    fn open(server: &Server, key: &str) -> Self {
        let http = reqwest::blocking::Client::new();
        let url = format!("{}/mcp", server.url);
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}}});
        let r = http.post(&url).bearer_auth(key).header("accept", JSON_AND_SSE).json(&init).send().unwrap();
        assert_eq!(r.status(), 200);
        let session = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
        let mut mcp = Self { http, url, key: key.into(), session, next_id: 2 };
        mcp.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn post(&mut self, body: &Value) -> String {
        let r = self
            .http
            .post(&self.url)
            .bearer_auth(&self.key)
            .header("accept", JSON_AND_SSE)
            .header("mcp-session-id", &self.session)
            .header("mcp-protocol-version", "2025-11-25")
            .json(body)
            .send()
            .unwrap();
        assert!(r.status().is_success(), "{r:?}");
        r.text().unwrap()
    }

    /// `tools/call sandbox_execute_code` with `args`: the tool result.
    fn execute(&mut self, args: &Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let text = self.post(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "sandbox_execute_code", "arguments": args}}));
        // A JSON body, or SSE events whose last data line is the answer.
        let body = text.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).rfind(|l| !l.is_empty()).unwrap_or(&text);
        let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"));
        v["result"].clone()
    }
}

fn metrics(s: &Server) -> String {
    reqwest::blocking::get(format!("{}/metrics", s.url)).unwrap().text().unwrap()
}

fn rejected_count(metrics: &str, code: &str) -> u64 {
    let prefix = format!("sandbox_rejected_total{{code=\"{code}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&prefix)).map_or(0, |n| n.trim().parse().unwrap())
}

/// The newest audit records, newest first.
fn records(s: &Server, n: usize) -> Vec<Value> {
    let out = Command::new(bin())
        .arg("--config")
        .arg(s.data.parent().unwrap().join("config.toml"))
        .arg("--data-dir")
        .arg(&s.data)
        .args(["audit", "list", "--json", "--limit", &n.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let page: Value = serde_json::from_slice(&out.stdout).unwrap();
    page["records"].as_array().unwrap().clone()
}

#[test]
fn http_and_mcp_refuse_alike() {
    let s = Server::start(KEYS);
    let http = reqwest::blocking::Client::new();
    let mut mcp = Mcp::open(&s, KEY_PY);
    // (HTTP body, MCP arguments, code): the same request in each door's words.
    let table: Vec<(Value, Value, &str)> = vec![
        (
            json!({"profile": "nope", "language": "python", "code": "print(1)"}),
            json!({"profile": "nope", "language": "python", "code": "print(1)"}),
            "profile_not_found",
        ),
        (
            json!({"profile": "typescript-default", "language": "typescript", "code": "1"}),
            json!({"profile": "typescript-default", "language": "typescript", "code": "1"}),
            "forbidden_profile",
        ),
        (
            json!({"profile": "python-default", "language": "python", "code": "print(1)", "timeout": 10_000_000}),
            json!({"profile": "python-default", "language": "python", "code": "print(1)", "timeout_ms": 10_000_000}),
            "timeout_too_large",
        ),
        (json!({"profile": "python-default", "language": "python", "code": "  "}), json!({"profile": "python-default", "language": "python", "code": "  "}), "empty_code"),
        (
            json!({"profile": "python-default", "language": "python", "code": "print(1)", "files": {"../x": "x"}}),
            json!({"profile": "python-default", "language": "python", "code": "print(1)", "files": {"../x": "x"}}),
            "invalid_file_name",
        ),
        (
            json!({"profile": "python-default", "language": "typescript", "code": "1"}),
            json!({"profile": "python-default", "language": "typescript", "code": "1"}),
            "unsupported_language",
        ),
    ];
    for (body, args, code) in table {
        let before = metrics(&s);
        let r = http.post(format!("{}/v1/executions", s.url)).bearer_auth(KEY_PY).json(&body).send().unwrap();
        let problem: Value = r.json().unwrap();
        let tool = mcp.execute(&args);
        assert_eq!(problem["code"], code, "{problem}");
        assert_eq!(tool["isError"], true, "{tool}");
        let error = &tool["structuredContent"]["error"];
        assert_eq!((&error["type"], &error["message"]), (&problem["code"], &problem["detail"]), "same code and message: {tool} vs {problem}");
        assert_eq!(tool["structuredContent"]["status"], "rejected");
        // The same record, but for the caller's name and the id.
        let rec = records(&s, 2);
        let (from_mcp, from_http) = (&rec[0], &rec[1]);
        assert_eq!(from_http["caller"], "key:py-only");
        assert_eq!(from_mcp["caller"], "mcp:key:py-only/it@1");
        assert_eq!(from_http["executionId"], problem["executionId"], "the problem names the record");
        assert_eq!(from_mcp["executionId"], tool["structuredContent"]["executionId"], "the tool result names the record");
        for field in ["state", "status", "profile", "language", "request", "result"] {
            assert_eq!(from_http[field], from_mcp[field], "{field} of the {code} records");
        }
        assert_eq!(from_http["request"]["error"]["type"], code);
        // Counted once per door.
        let after = metrics(&s);
        assert_eq!(rejected_count(&after, code), rejected_count(&before, code) + 2, "{code}: {after}");
    }
}
