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
    let r = http.post(&url).header("accept", JSON_AND_SSE).header("mcp-session-id", &session).header("mcp-protocol-version", "2025-11-25").json(&initialized).send().unwrap();
    assert_eq!(r.status(), 202);
    // The session's standalone event stream stays open, as clients keep it.
    let mut stream = http.get(&url).header("accept", "text/event-stream").header("mcp-session-id", &session).header("mcp-protocol-version", "2025-11-25").send().unwrap();
    assert_eq!(stream.status(), 200);
    // SIGTERM: the server exits (it would wait on the open stream forever otherwise), and the
    // stream ends with it.
    let status = server.terminate();
    assert!(status.success(), "{status:?}");
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
}
