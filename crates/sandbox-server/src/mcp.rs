//! `/mcp`: the MCP streamable HTTP endpoint ([`sandbox_mcp`]) behind the same API keys as the
//! HTTP API (bearer tokens; 401 with `WWW-Authenticate` without one, from [`crate::door`]), the
//! same `Host`/`Origin` policy and the same execution slots and queue.

use std::sync::Arc;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::future::BoxFuture;
use sandbox_core::wire::ExecutionResult;
use sandbox_core::{ErrorCode, Status};
use sandbox_mcp::{Gate, McpServer, Principal};

use crate::auth::Caller;
use crate::problem::{self, ProblemResponse};
use crate::AppState;

/// The route `/mcp` (POST, GET and DELETE of the streamable HTTP transport); mount it behind
/// [`crate::door::api_key`].
pub(crate) fn router(state: &AppState) -> Router<AppState> {
    let server = McpServer::new(state.engine.clone(), Some(gate(state)));
    // rmcp checks Host and Origin too; give it the same lists as the layer in front of it.
    let mut opts = state.mcp.clone();
    opts.allowed_hosts.clone_from(&state.hosts.allowed_hosts);
    opts.allowed_origins.clone_from(&state.hosts.allowed_origins);
    let service = sandbox_mcp::http_service(server, &opts);
    Router::new().route_service("/mcp", service).route_layer(middleware::from_fn(principal))
}

/// The service's admission slots and metrics as an MCP [`Gate`], for `sandbox serve` and `sandbox mcp`.
pub fn gate(state: &AppState) -> Arc<dyn Gate> {
    Arc::new(ServerGate(state.clone()))
}

struct ServerGate(AppState);

impl Gate for ServerGate {
    fn acquire(&self) -> BoxFuture<'_, Option<Box<dyn Send>>> {
        Box::pin(async move { self.0.admission.acquire().await.ok().map(|p| Box::new(p) as Box<dyn Send>) })
    }

    fn finished(&self, result: &ExecutionResult) {
        if result.status == Status::Rejected {
            self.0.metrics.rejected(result.error.as_ref().map_or("rejected", |e| e.kind.as_str()));
        } else {
            self.0.metrics.executed(&result.profile, result.status.as_str(), result.duration_ms);
        }
    }

    fn refused(&self, code: ErrorCode) {
        self.0.metrics.rejected(code.as_str());
    }
}

/// Hands the authenticated caller's [`Principal`] to the MCP handler (rmcp passes the
/// request's extensions through).
async fn principal(mut request: Request, next: Next) -> Response {
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        // Only reachable if the router lost its authentication layer: fail closed.
        let detail = "the request was not authenticated".to_owned();
        return ProblemResponse(problem::new(ErrorCode::Unauthorized, detail, None, None)).into_response();
    };
    let profiles = match &caller {
        Caller::Anonymous => vec!["*".to_owned()],
        Caller::Key(k) => k.profiles.clone(),
    };
    request.extensions_mut().insert(Principal { audit_name: caller.audit_name(), profiles });
    next.run(request).await
}
