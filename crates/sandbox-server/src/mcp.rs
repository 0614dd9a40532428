//! `/mcp`: the MCP streamable HTTP endpoint ([`sandbox_mcp`]) behind the same API keys as the
//! HTTP API (bearer tokens; 401 with `WWW-Authenticate` without one, from [`crate::door`]), the
//! same `Host`/`Origin` policy and the same execution service (slots, queue, refusal limit,
//! metrics).

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
    Router::new().route_service("/mcp", service).route_layer(middleware::from_fn(principal)).route_layer(middleware::from_fn(session_ended))
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
