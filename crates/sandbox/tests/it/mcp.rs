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
