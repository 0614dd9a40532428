//! The HTTP API (`sandbox serve`): decode, authenticate, admit, call the engine, encode.
//! It reaches the kernel only through the engine.
//!
//! Routes: `POST /v1/executions` (JSON, or `text/event-stream` when the request accepts it),
//! `GET /v1/profiles`, `GET /v1/profiles/{name}`, `GET /healthz`, `GET /readyz`, `GET /metrics`,
//! `GET /openapi.json`, and the MCP endpoint `/mcp` (streamable HTTP, [`sandbox_mcp`]). Errors
//! are `application/problem+json` ([`Problem`]) with a stable code.

mod admission;
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
use sandbox_core::Config;
use sandbox_engine::Engine;

pub use admission::Admission;
pub use auth::Caller;
pub use door::PRE_AUTH_BODY_MAX_BYTES;
pub use mcp::gate as mcp_gate;
pub use metrics::Metrics;
pub use origin::HostPolicy;
pub use problem::status_of;
pub use refusals::{Peer, Refusals};
pub use routes::ApiDoc;

/// Everything a request handler needs; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// The execution engine.
    pub engine: Arc<Engine>,
    /// Concurrency limit and queue.
    pub admission: Arc<Admission>,
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
}

impl AppState {
    /// State for `engine` with the limits of its `[service]` configuration; `max_concurrency` 0
    /// is resolved by [`default_concurrency`].
    pub fn new(engine: Arc<Engine>, audit: Option<Arc<sandbox_audit::AuditLog>>) -> Self {
        let svc = &engine.config().service;
        let slots = if svc.max_concurrency == 0 { default_concurrency(engine.config()) } else { svc.max_concurrency };
        let require_auth = !svc.api_keys.is_empty();
        let admission = Arc::new(Admission::new(slots, svc.queue_max));
        let mcp = sandbox_mcp::HttpOptions::new(usize::try_from(svc.body_max_bytes).unwrap_or(usize::MAX));
        let refusals = Arc::new(Refusals::new(svc.refusals_per_minute, svc.refusal_burst));
        Self { engine, admission, metrics: Arc::new(Metrics::default()), require_auth, audit, hosts: HostPolicy::default(), refusals, mcp }
    }
}

/// One execution slot per core, fewer when memory could not hold that many runs of the
/// largest profile (never below 1).
pub fn default_concurrency(config: &Config) -> u32 {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mem_total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().find_map(|l| l.strip_prefix("MemTotal:").map(|v| v.trim().trim_end_matches(" kB").parse::<u64>().ok())))
        .flatten()
        .map_or(u64::MAX, |kib| kib * 1024);
    let largest = config.profiles.values().map(|p| p.limits.memory_max_bytes).max().unwrap_or(1).max(1);
    let by_memory = usize::try_from(mem_total / largest).unwrap_or(usize::MAX);
    u32::try_from(cores.min(by_memory).max(1)).unwrap_or(1)
}

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
