//! `/mcp`: the MCP streamable HTTP endpoint ([`sandbox_mcp`]) behind the same API keys as the
//! HTTP API (bearer tokens; 401 with `WWW-Authenticate` without one, from [`crate::door`]), the
//! same `Host`/`Origin` policy and the same execution service (slots, queue, refusal limit,
//! metrics).

use std::sync::Arc;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use sandbox_core::ErrorCode;
use sandbox_mcp::McpServer;

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
    let service = sandbox_mcp::http_service(server, &opts);
    let owners = Arc::new(SessionOwners::default());
    Router::new()
        .route_service("/mcp", service)
        .route_layer(middleware::from_fn(principal))
        .route_layer(middleware::from_fn(session_ended))
        .route_layer(middleware::from_fn(move |request, next| owned_session(owners.clone(), request, next)))
}

/// The most sessions whose owner is remembered; past it the oldest is forgotten (its requests
/// are then answered as for an unknown session).
const SESSION_OWNERS_MAX: usize = 10_000;

/// Which caller opened each MCP session (`Mcp-Session-Id`), oldest first.
#[derive(Default)]
struct SessionOwners(std::sync::Mutex<std::collections::VecDeque<(String, String)>>);

/// A session belongs to the caller (the API key, or `anonymous`) whose `initialize` opened it:
/// a request naming another caller's session (to post into it, stream from it or `DELETE` it)
/// is answered 404 as for an unknown session, before rmcp sees it. Session ids are random but
/// not secret (rmcp logs them at INFO): without this, any key holder who saw one could end or
/// disturb another key's session (an attack review; resources and tools were always the
/// requesting key's). The owner is taken from the response that first carries the session's id.
async fn owned_session(owners: Arc<SessionOwners>, request: Request, next: Next) -> Response {
    let who = request.extensions().get::<Caller>().map(Caller::audit_name).unwrap_or_default();
    let named = request.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let delete = request.method() == axum::http::Method::DELETE;
    if let Some(id) = &named {
        let list = owners.0.lock().expect("session owners lock");
        // Unknown here (never opened through this door, or forgotten past the cap): rmcp would
        // not know it either, or must not serve it to whoever names it.
        if !list.iter().any(|(s, owner)| s == id && *owner == who) {
            drop(list);
            return (axum::http::StatusCode::NOT_FOUND, "Session not found").into_response();
        }
    }
    let response = next.run(request).await;
    let given = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut list = owners.0.lock().expect("session owners lock");
    if let Some(id) = given.filter(|id| !list.iter().any(|(s, _)| s == id)) {
        if list.len() >= SESSION_OWNERS_MAX {
            list.pop_front();
        }
        list.push_back((id, who));
    }
    if let (true, Some(id)) = (delete && response.status().is_success(), named) {
        list.retain(|(s, _)| *s != id);
    }
    response
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
