//! One execution service below every door: the same bad requests sent to `POST /v1/executions`
//! and to the MCP tool `sandbox_execute_code` (over `/mcp` of the same server, same key) are
//! refused with the same code and message, leave the same audit record (but for the caller's
//! name) and count the same in `/metrics`.

use serde_json::json;

use super::http::{Server, KEYS, KEY_ALL, KEY_PY};
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

/// The server's `/metrics`, read with the scraper's key (role `metrics`; ignored without keys).
fn metrics(s: &Server) -> String {
    let r = reqwest::blocking::Client::new().get(format!("{}/metrics", s.url)).bearer_auth(super::http::KEY_METRICS).send().unwrap();
    assert_eq!(r.status(), 200);
    r.text().unwrap()
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
        (
            json!({"profile": "python-default", "language": "python", "code": "  "}),
            json!({"profile": "python-default", "language": "python", "code": "  "}),
            "empty_code",
        ),
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

fn keys(v: &Value) -> Vec<&str> {
    v.as_object().unwrap_or_else(|| panic!("not an object: {v}")).keys().map(String::as_str).collect()
}

/// JSON key order is the program's through HTTP and MCP alike (input into `main`, `returnData`
/// out), and MCP's `structuredContent` lists the result's fields in the HTTP result's order.
#[test]
fn json_key_order_is_kept_through_http_and_mcp() {
    let s = Server::start(KEYS);
    let http = reqwest::blocking::Client::new();
    let mut mcp = Mcp::open(&s, KEY_ALL);
    let input = json!({"zeta": 1, "alpha": 2, "mid": 3});
    let py = "def main(inp):\n    return {'inputKeys': list(inp), 'rows': 1, 'completeRows': 2, 'species': 3}\n";
    let ts = "export default function main(input: object) {\n  return { inputKeys: Object.keys(input), rows: 1, completeRows: 2, species: 3 };\n}\n";
    for (language, code) in [("python", py), ("typescript", ts)] {
        let body = json!({"profile": format!("{language}-default"), "language": language, "code": code, "harness": "function", "input": input});
        // The raw body, parsed by a serde_json that keeps key order (this workspace's feature).
        let text = http.post(format!("{}/v1/executions", s.url)).bearer_auth(KEY_ALL).json(&body).send().unwrap().text().unwrap();
        let result: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(result["status"], "ok", "{result}");
        assert_eq!(result["returnData"]["inputKeys"], json!(["zeta", "alpha", "mid"]), "HTTP {language}: {result}");
        assert_eq!(keys(&result["returnData"]), ["inputKeys", "rows", "completeRows", "species"], "HTTP {language}: {text}");
        let tool = mcp.execute(&json!({"language": language, "code": code, "harness": "function", "input": input}));
        let structured = &tool["structuredContent"];
        assert_eq!(structured["status"], "ok", "{tool}");
        assert_eq!(structured["returnData"]["inputKeys"], json!(["zeta", "alpha", "mid"]), "MCP {language}: {tool}");
        assert_eq!(keys(&structured["returnData"]), ["inputKeys", "rows", "completeRows", "species"], "MCP {language}: {tool}");
        // The fields both carry, in the same order (MCP drops the base64 of outputs, adds uris).
        let common = |of: &Value, other: &Value| keys(of).into_iter().filter(|k| other.get(k).is_some()).map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(common(structured, &result), common(&result, structured), "MCP {language}: {tool}");
        assert_eq!(keys(structured)[..2], ["executionId", "status"], "MCP {language}: {tool}");
    }
}

/// One request shape on every door: `profile` optional with one default rule, `timeout` in ms
/// (MCP also takes its older name `timeout_ms`, the CLI also `20s`), and a timeout below 100 ms
/// (almost surely seconds) refused with `invalid_timeout` and a hint naming the unit, audited.
#[test]
fn one_request_shape_on_every_door() {
    let s = Server::start(KEYS);
    let http = reqwest::blocking::Client::new();
    let post = |key: &str, body: Value| -> (u16, Value) {
        let r = http.post(format!("{}/v1/executions", s.url)).bearer_auth(key).json(&body).send().unwrap();
        (r.status().as_u16(), r.json().unwrap())
    };
    const HINT: &str = "the timeout is in milliseconds (for 20 seconds, send 20000)";
    // HTTP: no profile.
    let (status, r) = post(KEY_ALL, json!({"code": "print(6*7)"}));
    assert_eq!((status, &r["profile"], &r["stdout"]), (200, &json!("python-default"), &json!("42\n")), "{r}");
    let (status, r) = post(KEY_ALL, json!({"language": "typescript", "code": "console.log(6*7)"}));
    assert_eq!((status, &r["profile"], &r["stdout"]), (200, &json!("typescript-default"), &json!("42\n")), "{r}");
    let (status, p) = post(KEY_PY, json!({"language": "typescript", "code": "1"}));
    assert_eq!((status, &p["code"], &p["field"]), (404, &json!("profile_not_found"), &json!("profile")), "{p}");
    // HTTP: a timeout in seconds by mistake; refused, with the hint, and audited.
    let (status, p) = post(KEY_ALL, json!({"code": "print(1)", "timeout": 20}));
    assert_eq!((status, &p["code"], &p["field"]), (400, &json!("invalid_timeout"), &json!("timeout")), "{p}");
    assert!(p["detail"].as_str().unwrap().contains(HINT), "{p}");
    let rec = &records(&s, 1)[0];
    assert_eq!((&rec["executionId"], &rec["status"]), (&p["executionId"], &json!("rejected")), "{rec}");
    let (status, r) = post(KEY_ALL, json!({"code": "print(1)", "timeout": 20000}));
    assert_eq!((status, &r["status"]), (200, &json!("ok")), "{r}");
    // MCP: the same words, and the older `timeout_ms`.
    let mut mcp = Mcp::open(&s, KEY_ALL);
    for (args, field) in [
        (json!({"language": "python", "code": "print(1)", "timeout": 20}), "timeout"),
        (json!({"language": "python", "code": "print(1)", "timeout_ms": 20}), "timeout_ms"),
    ] {
        let tool = mcp.execute(&args);
        let e = &tool["structuredContent"]["error"];
        assert_eq!((&e["type"], &e["field"]), (&json!("invalid_timeout"), &json!(field)), "{tool}");
        assert!(e["message"].as_str().unwrap().contains(HINT), "{tool}");
    }
    for args in [json!({"language": "python", "code": "print(1)", "timeout": 20000}), json!({"language": "python", "code": "print(1)", "timeout_ms": 20000})] {
        let tool = mcp.execute(&args);
        assert_eq!((&tool["structuredContent"]["status"], &tool["structuredContent"]["profile"]), (&json!("ok"), &json!("python-default")), "{tool}");
    }
    let tool = mcp.execute(&json!({"language": "python", "code": "print(1)", "timeout": 1000, "timeout_ms": 2000}));
    assert_eq!(tool["structuredContent"]["error"]["type"], "invalid_request", "{tool}");
    // CLI: a bare number is ms, as on the wire; `20s` still works.
    let r = run("python-default", "print(1)", &["--timeout", "20"]);
    assert_eq!((r.status, r.status(), &r.json["error"]["type"]), (2, "rejected", &json!("invalid_timeout")), "{r:?}");
    assert!(r.json["error"]["message"].as_str().unwrap().contains(HINT), "{r:?}");
    // In text mode the CLI adds that its --timeout takes a unit.
    let o = sandbox(&["run", "--timeout", "20", "-c", "print(1)"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(HINT) && stderr.contains("sandbox: hint: --timeout takes a unit (`20s`, `1m`, `500ms`); a bare number is milliseconds"),
        "{stderr}"
    );
    for t in ["20000", "20s"] {
        let r = run("python-default", "print(1)", &["--timeout", t]);
        assert_eq!((r.status, r.status()), (0, "ok"), "--timeout {t}: {r:?}");
    }
}
