//! The HTTP API (`sandbox serve`): authenticate, decode, submit to the execution service
//! ([`sandbox_engine::Service`]), encode. It reaches the kernel only through the engine.
//!
//! Routes: `POST /v1/executions` (JSON, or `text/event-stream` when the request accepts it),
//! `GET /v1/profiles`, `GET /v1/profiles/{name}`, `GET /healthz`, `GET /readyz`, `GET /metrics`,
//! `GET /openapi.json`, and the MCP endpoint `/mcp` (streamable HTTP, [`sandbox_mcp`]). Errors
//! are `application/problem+json` ([`Problem`]) with a stable code.

mod auth;
mod door;
mod mcp;
mod metrics;
mod origin;
mod problem;
mod refusals;
mod routes;

use std::sync::Arc;

use axum::Router;
use sandbox_core::wire::Problem;
use sandbox_engine::{Engine, Service};

pub use auth::Caller;
pub use door::{BodyBudget, PRE_AUTH_BODY_MAX_BYTES};
pub use mcp::McpSessions;
pub use metrics::{Metrics, ServerHooks};
pub use origin::HostPolicy;
pub use problem::status_of;
pub use refusals::{Peer, Refusals};
pub use routes::ApiDoc;

/// Everything a request handler needs; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// The execution engine.
    pub engine: Arc<Engine>,
    /// The execution service every door submits to (slots and queue, refusals, metrics hooks);
    /// `/mcp` and `sandbox mcp` share it.
    pub service: Arc<Service>,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Whether requests must carry an API key (false only with no keys configured).
    pub require_auth: bool,
    /// The audit log, for `GET /v1/executions` (absent: those routes answer 404).
    pub audit: Option<Arc<sandbox_audit::AuditLog>>,
    /// `Host` and `Origin` values every route but the health probes accepts (`/mcp` included:
    /// its own allowlists are set from these).
    pub hosts: HostPolicy,
    /// The per-address limit of refused requests (`[service] refusals_per_minute`, `refusal_burst`).
    pub refusals: Arc<Refusals>,
    /// Settings of `/mcp`: body limit, shutdown token.
    pub mcp: sandbox_mcp::HttpOptions,
    /// Bytes of request bodies held at once (`[service] request_bodies_max_bytes`).
    pub bodies: Arc<door::BodyBudget>,
    /// The sessions of `/mcp`, capped by `[service] mcp_sessions_max` and
    /// `mcp_sessions_per_caller`.
    pub mcp_sessions: Arc<McpSessions>,
    /// Set when the service is shutting down: `/readyz` answers 503 `shutting_down` from then
    /// on, so a load balancer stops sending new requests (which are still served meanwhile).
    pub draining: Arc<std::sync::atomic::AtomicBool>,
}

impl AppState {
    /// State for `engine` with the limits of its `[service]` configuration
    /// ([`Service::for_config`]).
    pub fn new(engine: Arc<Engine>, audit: Option<Arc<sandbox_audit::AuditLog>>) -> Self {
        let svc = &engine.config().service;
        let require_auth = !svc.api_keys.is_empty();
        let mcp = sandbox_mcp::HttpOptions::new(usize::try_from(svc.body_max_bytes).unwrap_or(usize::MAX));
        let refusals = Arc::new(Refusals::new(svc.refusals_per_minute, svc.refusal_burst).with_unauthenticated(svc.unauthenticated_refusals_per_minute));
        let metrics = Arc::new(Metrics::default());
        let hooks = Arc::new(ServerHooks { metrics: metrics.clone(), refusals: refusals.clone() });
        let service = Arc::new(Service::for_config(engine.clone(), hooks));
        let mcp_sessions = Arc::new(McpSessions::new(svc.mcp_sessions_max, svc.mcp_sessions_per_caller));
        let bodies = Arc::new(door::BodyBudget::new(svc.request_bodies_max_bytes));
        Self { engine, service, metrics, require_auth, audit, hosts: HostPolicy::default(), refusals, mcp, bodies, mcp_sessions, draining: Arc::default() }
    }
}

pub use sandbox_engine::service::default_concurrency;

/// The router with every route, the `Host`/`Origin` policy and API key checks, and the body
/// limit of the configuration. Serve it with `into_make_service_with_connect_info::<SocketAddr>()`
/// so refusals are counted per client address.
pub fn app(state: AppState) -> Router {
    routes::router(state)
}

/// A problem body for `code` with `detail` (see [`status_of`] for the HTTP status).
pub fn problem(code: sandbox_core::ErrorCode, detail: impl Into<String>) -> Problem {
    problem::new(code, detail.into(), None, None)
}

#[cfg(test)]
mod tests;
