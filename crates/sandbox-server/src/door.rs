//! What every request passes before a handler runs, as tower middleware on the router (so any
//! front door mounted behind it gets the same): the `Host`/`Origin` policy on every route but
//! the health probes, then the API key on `/v1` and `/mcp` (and on `/metrics`, a key with role
//! `metrics`, unless `[service] metrics_unauthenticated`), both before any of the body is read.
//! A refusal here reads at most [`PRE_AUTH_BODY_MAX_BYTES`] of the body (so a small request's
//! connection stays usable) and never waits for more; it is charged to the client's address
//! ([`crate::refusals`]) and, for requests that ask to run code, audited as caller
//! `unauthenticated` with the method, path and address, not the body.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::Response;
use sandbox_core::ErrorCode;
use sandbox_engine::service::Audit;

use crate::auth::{authenticate, Caller};
use crate::problem;
use crate::refusals::{refuse, Peer};
use crate::AppState;

/// Most bytes of an unauthenticated request's body the service reads (and discards).
pub const PRE_AUTH_BODY_MAX_BYTES: usize = 4 << 10;
/// Longest the service waits for those bytes.
const PRE_AUTH_DRAIN: Duration = Duration::from_secs(1);

/// Refuses a request whose `Host` or `Origin` the [`crate::HostPolicy`] does not allow
/// (421 `host_not_allowed`, 403 `origin_not_allowed`); `/healthz` and `/readyz` pass.
pub(crate) async fn host_and_origin(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if crate::origin::EXEMPT_PATHS.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    match state.hosts.check(request.uri(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(r) => refuse_unread(&state, request, r.code, r.detail).await,
    }
}

/// Puts the [`Caller`] and its [`Peer`] address into the request's extensions, or answers 401
/// `unauthorized` (with `WWW-Authenticate`) without reading the body.
pub(crate) async fn api_key(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let peer = Peer::of(request.extensions());
    let caller = if state.require_auth { authenticate(request.headers(), &state.engine.config().service.api_keys) } else { Some(Caller::Anonymous) };
    let Some(caller) = caller else {
        let detail = "send a valid API key as 'Authorization: Bearer <key>'".to_owned();
        return refuse_unread(&state, request, ErrorCode::Unauthorized, detail).await;
    };
    request.extensions_mut().insert(peer);
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// Bytes of request bodies held at once (`[service] request_bodies_max_bytes`): each request
/// with a body is charged its declared length before it is read, until its answer has been
/// sent (the router's `body_budget` layer, after the API key).
pub struct BodyBudget {
    max: u64,
    held: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl BodyBudget {
    /// A budget of `max` bytes, none held.
    pub fn new(max: u64) -> Self {
        Self { max, held: std::sync::Arc::default() }
    }

    /// Bytes held now (the `sandbox_request_body_bytes` gauge).
    pub fn held(&self) -> u64 {
        self.held.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Holds `bytes` until the returned guard drops; `None` if they do not fit.
    fn hold(&self, bytes: u64) -> Option<BodyHeld> {
        use std::sync::atomic::Ordering;
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| held.checked_add(bytes).filter(|&n| n <= self.max))
            .ok()
            .map(|_| BodyHeld { bytes, held: self.held.clone() })
    }
}

/// Bytes of a [`BodyBudget`], given back on drop.
struct BodyHeld {
    bytes: u64,
    held: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Drop for BodyHeld {
    fn drop(&mut self) {
        self.held.fetch_sub(self.bytes, std::sync::atomic::Ordering::AcqRel);
    }
}

/// After the API key: a request with a body is charged its declared `Content-Length`
/// (`body_max_bytes` without one; a larger declared one is refused 413 by the handler's limit
/// and charged only that) to the [`BodyBudget`] before its body is read, and keeps it until its
/// answer's body has been sent (a streamed answer's included), so the request's bytes, read,
/// parsed and waiting in the queue, are counted while they exist. One that does not fit is
/// refused 429 `queue_full` (`Retry-After`), charged and audited as its caller's, without
/// reading its body. A key that may run no profile (`profiles = []`, a scraper's) is refused
/// 403 `forbidden_profile` on `POST /v1/executions` the same way, before its body is read.
pub(crate) async fn body_budget(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let caller = request.extensions().get::<Caller>().cloned();
    let who = caller.as_ref().map_or_else(|| "unauthenticated".to_owned(), Caller::audit_name);
    if request.method() == Method::POST && request.uri().path() == "/v1/executions" {
        if let Some(Caller::Key(k)) = &caller {
            if k.profiles.is_empty() {
                let detail = format!("key {:?} may run no profile (its body was not read); profiles you may use: none", k.name);
                return refuse_unread_as(&state, request, ErrorCode::ForbiddenProfile, detail, &who).await;
            }
        }
    }
    let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let has_body = declared.map_or_else(|| request.headers().contains_key(header::TRANSFER_ENCODING), |n| n > 0);
    if !has_body {
        return next.run(request).await;
    }
    let body_max = state.engine.config().service.body_max_bytes;
    let bytes = declared.unwrap_or(body_max).min(body_max);
    let Some(held) = state.bodies.hold(bytes) else {
        let detail = format!(
            "the service holds {} bytes of request bodies and may hold {} ([service] request_bodies_max_bytes); retry later",
            state.bodies.held(),
            state.bodies.max
        );
        return refuse_unread_as(&state, request, ErrorCode::QueueFull, detail, &who).await;
    };
    let response = next.run(request).await;
    if axum::body::HttpBody::size_hint(response.body()).exact().is_some() {
        // A whole answer: the request is done with.
        return response;
    }
    // A streamed answer (an execution's events): held until it has been sent, or dropped with
    // its connection, since the execution runs meanwhile.
    let (parts, body) = response.into_parts();
    let body = Body::from_stream(futures_util::StreamExt::map(body.into_data_stream(), move |frame| {
        let _held = &held;
        frame
    }));
    Response::from_parts(parts, body)
}

/// Longest a request's body may send nothing (each frame restarts it): one that stalls longer
/// fails, its request ends, and what it held of the [`BodyBudget`] comes back. Without it, a
/// connection that declared a large body and sent none held its share of the budget for as
/// long as it stayed open (an attack review held all of it with four such connections). As
/// nginx's `client_body_timeout` (60 s by default).
pub const BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Wraps every request body in [`BODY_IDLE_TIMEOUT`] (`tower_http`'s `TimeoutBody`).
pub(crate) async fn body_idle_timeout(request: Request, next: Next) -> Response {
    next.run(request.map(|body| Body::new(tower_http::timeout::TimeoutBody::new(BODY_IDLE_TIMEOUT, body)))).await
}

/// `GET /metrics`'s key: with API keys configured, that of one with role `metrics` (401
/// `unauthorized` without a known key, 403 `forbidden` for a key without the role), unless
/// `[service] metrics_unauthenticated`; without keys (loopback only), none. The exposition names
/// every profile and counts every caller's executions and refusals, which a key that may only
/// run code has no need to read.
pub(crate) async fn metrics_key(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let service = &state.engine.config().service;
    if !state.require_auth || service.metrics_unauthenticated {
        return next.run(request).await;
    }
    match authenticate(request.headers(), &service.api_keys) {
        None => {
            let detail = "send the API key of one with role \"metrics\" as 'Authorization: Bearer <key>'".to_owned();
            refuse_unread(&state, request, ErrorCode::Unauthorized, detail).await
        }
        Some(Caller::Key(k)) if !k.roles.iter().any(|r| r == "metrics") => {
            let detail = format!("key {:?} does not have role \"metrics\", which reading the metrics needs", k.name);
            refuse_unread(&state, request, ErrorCode::Forbidden, detail).await
        }
        Some(_) => next.run(request).await,
    }
}

/// A refusal before authentication: charged, audited if the request asks to run code, and
/// answered after reading at most a few KiB of the body.
async fn refuse_unread(state: &AppState, request: Request, code: ErrorCode, detail: String) -> Response {
    refuse_unread_as(state, request, code, detail, "unauthenticated").await
}

/// A refusal before the body is read, of `caller` (its audit name): charged, audited if the
/// request asks to run code, and answered after reading at most a few KiB of the body.
async fn refuse_unread_as(state: &AppState, request: Request, code: ErrorCode, detail: String, caller: &str) -> Response {
    let peer = Peer::of(request.extensions());
    let (parts, body) = request.into_parts();
    let runs_code = parts.method == Method::POST && matches!(parts.uri.path(), "/v1/executions" | "/mcp");
    // The record says where the request went and from where; the body is never looked at.
    let path: String = parts.uri.path().chars().take(128).collect();
    let message = format!("{detail} ({} {path} from {peer})", parts.method);
    let audit = runs_code.then_some(Audit { caller, request: None, message: &message });
    let mut response = refuse(state, peer, audit, problem::new(code, detail, None, None));
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if !drain(declared, body).await {
        // The rest of the body is still on the wire: this connection cannot carry another request.
        response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    }
    response
}

/// Reads and drops a body of at most [`PRE_AUTH_BODY_MAX_BYTES`] within [`PRE_AUTH_DRAIN`], so
/// a client that already sent its small body reads the answer rather than a reset connection.
/// A larger declared body is not read at all. Returns whether the whole body was read.
async fn drain(content_length: Option<u64>, body: Body) -> bool {
    if content_length.is_some_and(|n| n > PRE_AUTH_BODY_MAX_BYTES as u64) {
        return false;
    }
    matches!(tokio::time::timeout(PRE_AUTH_DRAIN, axum::body::to_bytes(body, PRE_AUTH_BODY_MAX_BYTES)).await, Ok(Ok(_)))
}
