//! `/mcp`: the MCP streamable HTTP endpoint ([`sandbox_mcp`]) behind the same API keys as the
//! HTTP API (bearer tokens; 401 with `WWW-Authenticate` without one, from [`crate::door`]), the
//! same `Host`/`Origin` policy and the same execution service (slots, queue, refusal limit,
//! metrics).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use sandbox_core::ErrorCode;
use sandbox_mcp::{McpServer, SessionManager as _};

use crate::auth::Caller;
use crate::problem::{self, ProblemResponse};
use crate::refusals::Peer;
use crate::AppState;

/// The route `/mcp` (POST, GET and DELETE of the streamable HTTP transport); mount it behind
/// [`crate::door::api_key`].
pub(crate) fn router(state: &AppState) -> Router<AppState> {
    let server = McpServer::new(state.service.clone());
    // rmcp checks Host and Origin too; give it the same lists as the layer in front of it.
    let mut opts = state.mcp.clone();
    opts.allowed_hosts.clone_from(&state.hosts.allowed_hosts);
    opts.allowed_origins.clone_from(&state.hosts.allowed_origins);
    let service = sandbox_mcp::http_service(server, &opts, state.mcp_sessions.manager.clone());
    let sessions = state.mcp_sessions.clone();
    Router::new()
        .route_service("/mcp", service)
        .route_layer(middleware::from_fn(principal))
        .route_layer(middleware::from_fn(session_ended))
        .route_layer(middleware::from_fn(move |request, next| owned_session(sessions.clone(), request, next)))
        .route_layer(middleware::from_fn_with_state(state.clone(), |State(state): State<AppState>, request, next| json_values_capped(state, request, next)))
}

/// The MCP sessions of `/mcp`: rmcp's, and which caller opened each, oldest first. Open
/// sessions are capped, in all (`[service] mcp_sessions_max`) and per caller
/// (`mcp_sessions_per_caller`): a session opened past a cap ends the oldest (the caller's own
/// first), in rmcp too. Each held ~70 kB and a task for 5 idle minutes or until its `DELETE`,
/// and an attack review filled 2.7 GB with `initialize` requests alone in 40 s.
pub struct McpSessions {
    /// rmcp's sessions ([`sandbox_mcp::http_service`] serves from it).
    pub manager: Arc<sandbox_mcp::LocalSessionManager>,
    owners: std::sync::Mutex<std::collections::VecDeque<(String, String)>>,
    max: usize,
    per_caller: usize,
}

impl McpSessions {
    /// No sessions yet; at most `max` open, `per_caller` of them one caller's.
    pub fn new(max: u32, per_caller: u32) -> Self {
        let size = |n: u32| usize::try_from(n).unwrap_or(usize::MAX).max(1);
        Self { manager: Arc::default(), owners: std::sync::Mutex::default(), max: size(max), per_caller: size(per_caller) }
    }

    /// Sessions open in rmcp now (the `sandbox_mcp_sessions` gauge).
    pub async fn open(&self) -> usize {
        self.manager.sessions.read().await.len()
    }

    /// Whether `id` is a session `who` opened.
    fn owns(&self, id: &str, who: &str) -> bool {
        self.owners.lock().expect("session owners lock").iter().any(|(s, owner)| s == id && owner == who)
    }

    /// Notes `id` as opened by `who` (once), and returns the sessions that must end for it:
    /// `who`'s oldest past the per-caller cap, then the oldest of all past the total cap.
    fn opened(&self, id: String, who: String) -> Vec<String> {
        let mut owners = self.owners.lock().expect("session owners lock");
        if owners.iter().any(|(s, _)| *s == id) {
            return Vec::new();
        }
        let mut ended = Vec::new();
        while owners.iter().filter(|(_, owner)| *owner == who).count() >= self.per_caller {
            let Some(i) = owners.iter().position(|(_, owner)| *owner == who) else { break };
            ended.extend(owners.remove(i).map(|(s, _)| s));
        }
        while owners.len() >= self.max {
            ended.extend(owners.pop_front().map(|(s, _)| s));
        }
        owners.push_back((id, who));
        ended
    }

    /// Before a request that may open a session: with rmcp holding `max` sessions or more,
    /// ends those no caller was noted for. rmcp makes a session before its answer carries the
    /// id, so a client that leaves in between leaves one nobody counted or can reach (an attack
    /// review held 34,000 that way, 3.9 GB, until their 5 idle minutes). At the cap, an
    /// `initialize` answering right now may lose its session too; its client opens another.
    async fn make_room(&self) {
        let orphans: Vec<_> = {
            let sessions = self.manager.sessions.read().await;
            if sessions.len() < self.max {
                return;
            }
            let owners = self.owners.lock().expect("session owners lock");
            sessions.keys().filter(|id| !owners.iter().any(|(s, _)| s.as_str() == id.as_ref())).cloned().collect()
        };
        for id in orphans {
            if let Err(e) = self.manager.close_session(&id).await {
                tracing::warn!(error = %e, "could not end an MCP session past the cap");
            }
        }
    }

    /// Forgets `id` (its `DELETE` ended it).
    fn closed(&self, id: &str) {
        self.owners.lock().expect("session owners lock").retain(|(s, _)| s != id);
    }
}

/// A session belongs to the caller (the API key, or `anonymous`) whose `initialize` opened it:
/// a request naming another caller's session (to post into it, stream from it or `DELETE` it)
/// is answered 404 as for an unknown session, before rmcp sees it. Session ids are random but
/// not secret (rmcp logs them at INFO): without this, any key holder who saw one could end or
/// disturb another key's session (an attack review; resources and tools were always the
/// requesting key's). The owner is taken from the response that first carries the session's
/// id; the sessions that opening it ends past the caps ([`McpSessions`]) are ended in rmcp.
async fn owned_session(sessions: Arc<McpSessions>, request: Request, next: Next) -> Response {
    let who = request.extensions().get::<Caller>().map(Caller::audit_name).unwrap_or_default();
    let named = request.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let delete = request.method() == axum::http::Method::DELETE;
    // Unknown here (never opened through this door, or ended past a cap): rmcp would not know
    // it either, or must not serve it to whoever names it.
    if named.as_deref().is_some_and(|id| !sessions.owns(id, &who)) {
        return (axum::http::StatusCode::NOT_FOUND, "Session not found").into_response();
    }
    if named.is_none() && request.method() == axum::http::Method::POST {
        sessions.make_room().await;
    }
    let response = next.run(request).await;
    if let Some(id) = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
        for ended in sessions.opened(id.to_owned(), who) {
            if let Err(e) = sessions.manager.close_session(&ended.into()).await {
                tracing::warn!(error = %e, "could not end an MCP session past the cap");
            }
        }
    }
    if let (true, Some(id)) = (delete && response.status().is_success(), named) {
        sessions.closed(&id);
    }
    response
}

/// Most JSON values (objects, arrays and the members and elements in them) one `/mcp` request
/// body may hold. rmcp parses a body into a `serde_json::Value` tree before it looks at the
/// session or the method, at ~100-250 bytes of memory per value: an 8 MiB array of zeros took
/// 1 GB, with a key that may run nothing (an attack review). A tool call's code and files are
/// strings, one value each; this leaves room for thousands of files.
pub const MCP_JSON_VALUES_MAX: usize = 100_000;

/// Refuses a `POST /mcp` whose body holds more than [`MCP_JSON_VALUES_MAX`] JSON values (413
/// `body_too_large`, charged and audited as its caller's) before rmcp parses it; the body is
/// read here (within `body_max_bytes`, and the door's body budget) and handed on as it is.
async fn json_values_capped(state: AppState, request: Request, next: Next) -> Response {
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let max = usize::try_from(state.engine.config().service.body_max_bytes).unwrap_or(usize::MAX);
    let Ok(bytes) = axum::body::to_bytes(body, max).await else {
        // Over the limit, or the body could not be read: rmcp answers an empty one as it does.
        return next.run(Request::from_parts(parts, axum::body::Body::empty())).await;
    };
    let values = json_values(&bytes);
    if values > MCP_JSON_VALUES_MAX {
        let who = parts.extensions.get::<Caller>().map(Caller::audit_name).unwrap_or_default();
        let peer = Peer::of(&parts.extensions);
        let detail = format!("the message holds more than {MCP_JSON_VALUES_MAX} JSON values");
        let message = format!("{detail} (POST /mcp from {peer})");
        let audit = Some(sandbox_engine::service::Audit { caller: &who, request: None, message: &message });
        return crate::refusals::refuse(&state, peer, audit, problem::new(ErrorCode::BodyTooLarge, detail, None, None));
    }
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await
}

/// The JSON values in `text` counted cheaply, without parsing: each `{`, `[` and `,` outside
/// strings (an element or member after the first adds a `,`; every container opens once), so
/// at least the values a parser would make, less one per non-empty container.
fn json_values(text: &[u8]) -> usize {
    let (mut count, mut in_string, mut escaped) = (0usize, false, false);
    for &b in text {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'{' | b'[' | b',' => count += 1,
                _ => {}
            }
        }
    }
    count
}

/// A session `DELETE` that ended the session answers 200, as the MCP SDKs expect: rmcp
/// answers 202 Accepted, which the official Python SDK logs as "Session termination failed:
/// 202" on every close (it accepts 200 and 204; the TypeScript SDK's server answers 200).
/// The specification (Streamable HTTP, "Session Management") leaves the success status open;
/// 202 also reads as "not done yet", and the session is gone by then.
async fn session_ended(request: Request, next: Next) -> Response {
    let delete = request.method() == axum::http::Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == axum::http::StatusCode::ACCEPTED {
        *response.status_mut() = axum::http::StatusCode::OK;
    }
    response
}

/// Hands the authenticated caller, with its address, to the MCP handler as its
/// [`sandbox_mcp::Principal`] (rmcp passes the request's extensions through).
async fn principal(mut request: Request, next: Next) -> Response {
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        // Only reachable if the router lost its authentication layer: fail closed.
        let detail = "the request was not authenticated".to_owned();
        return ProblemResponse(problem::new(ErrorCode::Unauthorized, detail, None, None)).into_response();
    };
    let peer = Peer::of(request.extensions());
    request.extensions_mut().insert(caller.submitter(Some(peer.0)));
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::json_values;

    #[test]
    fn json_values_count_containers_and_separators_outside_strings() {
        assert_eq!(json_values(br#"{"a": [0, 0, 0], "b": "x,[{"}"#), 5);
        assert_eq!(json_values(br#""a \" , [ still a string""#), 0);
        assert_eq!(json_values(br#"["\\", 1]"#), 2);
        assert_eq!(json_values(&[b"[".as_slice(), &b"0,".repeat(1000), b"0]"].concat()), 1001);
    }
}
