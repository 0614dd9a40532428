//! Route handlers and the OpenAPI document generated from the same types.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{middleware, Extension, Json, Router};
use futures_util::stream::{self, Stream, StreamExt};
use sandbox_core::wire::{ExecutionResult, Problem, ProfileInfo, ProfileList};
use sandbox_core::{ErrorCode, ExecutionRequest, Status};
use sandbox_engine::{Chunk, Refusal, StreamKind, Ticket};
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::AbortOnDropHandle;
use utoipa::OpenApi;

use crate::auth::Caller;
use crate::door;
use crate::problem::{self, ProblemResponse};
use crate::refusals::Peer;
use crate::AppState;

/// The OpenAPI 3.1 document of the HTTP API.
#[derive(OpenApi)]
#[openapi(
    info(title = "Sandbox Service", description = "Runs untrusted Python and TypeScript in isolated Linux containers."),
    paths(execute, list_executions, get_execution, list_profiles, get_profile, healthz, readyz, metrics),
    components(schemas(ExecutionRequest, ExecutionResult, Problem, ProfileInfo, ProfileList))
)]
pub struct ApiDoc;

pub(crate) fn router(state: AppState) -> Router {
    let body_max = usize::try_from(state.engine.config().service.body_max_bytes).unwrap_or(usize::MAX);
    // The API key is checked before a handler reads the body.
    let keyed = Router::new()
        .route("/v1/executions", post(execute))
        .route("/v1/executions", get(list_executions))
        .route("/v1/executions/{id}", get(get_execution))
        .route("/v1/profiles", get(list_profiles))
        .route("/v1/profiles/{name}", get(get_profile))
        .merge(crate::mcp::router(&state))
        .route_layer(middleware::from_fn(door::body_idle_timeout))
        // Inner to the key: the body budget knows the caller.
        .route_layer(middleware::from_fn_with_state(state.clone(), door::body_budget))
        .route_layer(middleware::from_fn_with_state(state.clone(), door::api_key));
    Router::new()
        .merge(keyed)
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics).route_layer(middleware::from_fn_with_state(state.clone(), door::metrics_key)))
        .route("/openapi.json", get(openapi))
        .fallback(|| async { ProblemResponse(problem::new(ErrorCode::NotFound, "no such route".into(), None, None)) })
        .method_not_allowed_fallback(|| async {
            let mut p = problem::new(ErrorCode::NotFound, "this route does not take that method".into(), None, None);
            p.status = StatusCode::METHOD_NOT_ALLOWED.as_u16();
            p.title = "Method not allowed".into();
            ProblemResponse(p)
        })
        .layer(DefaultBodyLimit::max(body_max))
        // Outermost: a request for a Host or from an Origin not allowed is refused first.
        .layer(middleware::from_fn_with_state(state.clone(), door::host_and_origin))
        .with_state(state)
}

fn fail(state: &AppState, code: ErrorCode, detail: impl Into<String>, field: Option<String>) -> Response {
    state.metrics.rejected(code.as_str());
    ProblemResponse(problem::new(code, detail.into(), field, None)).into_response()
}

/// Runs one execution. Synchronous by default (the result in the body); with
/// `Accept: text/event-stream` it streams `stdout` and `stderr` events (`{"text": ...}`) as the
/// program writes, then one `result` event with the result object.
#[utoipa::path(
    post, path = "/v1/executions", request_body = ExecutionRequest,
    responses(
        (status = 200, description = "The program ran (any exit status, timeout, memory or output limit)", body = ExecutionResult),
        (status = 400, description = "Invalid request (bad file name, timeout, language, ...)", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or unknown API key", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key may not use this profile (`forbidden_profile`), or a browser page of an origin not allowed (`origin_not_allowed`)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such profile", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body, code or input files too large", body = Problem, content_type = "application/problem+json"),
        (status = 421, description = "The Host is not one this service answers to (`host_not_allowed`, DNS rebinding defence)", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Concurrency limit and queue full (`queue_full`), or too many refused requests from this address (`rate_limited`); see Retry-After", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Internal error (with the execution id)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The host cannot run this profile", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn execute(
    State(state): State<AppState>,
    Extension(who): Extension<Caller>,
    Extension(peer): Extension<Peer>,
    headers: HeaderMap,
    body: Result<Json<ExecutionRequest>, JsonRejection>,
) -> Response {
    let caller = who.submitter(Some(peer.0));
    // Decode: a body that is not a request is refused through the service too.
    let request = match body.map(|Json(r)| r) {
        Ok(r) => r,
        Err(e) => {
            let refusal = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                let detail = format!("the body is over {} bytes", state.engine.config().service.body_max_bytes);
                Refusal::new(ErrorCode::BodyTooLarge, detail, None)
            } else {
                Refusal::new(ErrorCode::InvalidRequest, e.body_text(), None)
            };
            return problem::of_refusal(state.service.refuse(&caller, None, refusal));
        }
    };
    // Submit.
    let ticket = match state.service.submit(&caller, request) {
        Ok(t) => t,
        Err(refusal) => return problem::of_refusal(refusal),
    };
    // Run and encode. Dropping this future (the client went away) drops the execution, whose
    // state tears itself down.
    let wants_stream = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("text/event-stream"));
    if wants_stream {
        return stream_execution(ticket).into_response();
    }
    respond(ticket.run(None).await)
}

/// The problem for a result that did not run (rejected, internal error); `None` for one that ran.
/// Both the JSON and the streaming endpoint answer through this.
fn problem_of(result: &ExecutionResult) -> Option<Problem> {
    if !matches!(result.status, Status::Rejected | Status::InternalError) {
        return None;
    }
    let e = result.error.clone().unwrap_or_else(|| sandbox_core::wire::ExecError::new("internal_error", "internal error"));
    let code = ErrorCode::parse(&e.kind).unwrap_or(ErrorCode::InternalError);
    Some(problem::new(code, e.message, e.field, Some(result.execution_id.clone())))
}

fn respond(result: ExecutionResult) -> Response {
    match problem_of(&result) {
        Some(p) => ProblemResponse(p).into_response(),
        None => Json(result).into_response(),
    }
}

fn stream_execution(ticket: Ticket) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Chunk>();
    let (done_tx, done_rx) = oneshot::channel::<ExecutionResult>();
    // The execution runs in a task of its own, aborted (and so torn down) when the stream is dropped.
    let guard = AbortOnDropHandle::new(tokio::spawn(async move {
        let _ = done_tx.send(ticket.run(Some(tx)).await);
    }));
    // Its chunks are merged as they come into what waits for the client (`Pending`), by a task
    // that ends with the stream.
    let pending = Arc::new(Pending::default());
    let merging = {
        let pending = pending.clone();
        AbortOnDropHandle::new(tokio::spawn(async move {
            while let Some(c) = rx.recv().await {
                pending.push(c);
            }
            pending.close();
        }))
    };
    let decoders = (Utf8Stream::default(), Utf8Stream::default());
    let text_event = |name: &str, text: String| Event::default().event(name).json_data(serde_json::json!({ "text": text })).expect("json");
    let chunks = stream::unfold(Some((pending, merging, decoders)), move |state| async move {
        let (pending, merging, mut dec) = state?;
        match pending.next().await {
            Some(c) => {
                let (name, text) = match c.stream {
                    StreamKind::Stdout => ("stdout", dec.0.push(&c.data)),
                    StreamKind::Stderr => ("stderr", dec.1.push(&c.data)),
                };
                Some((vec![text_event(name, text)], Some((pending, merging, dec))))
            }
            // The streams ended: flush what an incomplete UTF-8 sequence held back.
            None => {
                let tail: Vec<Event> = [("stdout", dec.0.finish()), ("stderr", dec.1.finish())]
                    .into_iter()
                    .filter(|(_, t)| !t.is_empty())
                    .map(|(n, t)| text_event(n, t))
                    .collect();
                Some((tail, None))
            }
        }
    })
    .flat_map(|events| stream::iter(events.into_iter().map(Ok)));
    let end = stream::once(async move {
        let _guard = guard;
        let event = match done_rx.await {
            // Same contract as the JSON endpoint: a result that did not run is a problem.
            Ok(result) => match problem_of(&result) {
                Some(p) => Event::default().event("error").json_data(p).expect("problems serialize"),
                None => Event::default().event("result").json_data(&result).expect("results serialize"),
            },
            Err(_) => Event::default()
                .event("error")
                .json_data(problem::new(ErrorCode::InternalError, "the execution task ended without a result".into(), None, None))
                .expect("problems serialize"),
        };
        Ok(event)
    });
    Sse::new(chunks.chain(end)).keep_alive(KeepAlive::default())
}

/// The most bytes one merged chunk holds (one SSE event's output).
const MERGED_CHUNK_MAX_BYTES: usize = 64 << 10;

/// Output chunks waiting for an SSE client, merged as they come: a chunk of the same stream as
/// the last one waiting is appended to it (up to [`MERGED_CHUNK_MAX_BYTES`]), so what a slow or
/// stalled client leaves unread costs about its own size (at most the profile's stdout and
/// stderr caps), not a queued message per write of the program (20-40 bytes of the service's
/// memory per byte of one-byte writes, held as long as the connection stayed open, found by an
/// attack review).
#[derive(Default)]
struct Pending {
    chunks: std::sync::Mutex<(std::collections::VecDeque<Chunk>, bool)>,
    ready: tokio::sync::Notify,
}

impl Pending {
    fn push(&self, c: Chunk) {
        let mut state = self.chunks.lock().expect("pending chunks lock");
        match state.0.back_mut() {
            Some(last) if last.stream == c.stream && last.data.len() + c.data.len() <= MERGED_CHUNK_MAX_BYTES => last.data.extend_from_slice(&c.data),
            _ => state.0.push_back(c),
        }
        drop(state);
        self.ready.notify_one();
    }

    /// No chunk comes after those waiting.
    fn close(&self) {
        self.chunks.lock().expect("pending chunks lock").1 = true;
        self.ready.notify_one();
    }

    /// The next chunk, waiting for one; `None` once closed and drained.
    async fn next(&self) -> Option<Chunk> {
        loop {
            {
                let mut state = self.chunks.lock().expect("pending chunks lock");
                if let Some(c) = state.0.pop_front() {
                    return Some(c);
                }
                if state.1 {
                    return None;
                }
            }
            self.ready.notified().await;
        }
    }
}

/// Turns byte chunks into text without splitting a UTF-8 sequence across two events; invalid
/// bytes become U+FFFD.
#[derive(Default)]
struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    fn push(&mut self, data: &[u8]) -> String {
        self.pending.extend_from_slice(data);
        let cut = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            // An incomplete sequence at the very end waits for the next chunk.
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.pending.len(),
        };
        let rest = self.pending.split_off(cut);
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = rest;
        text
    }

    /// What is still held back, lossily (the stream ended inside a UTF-8 sequence).
    fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }
}

/// Query of `GET /v1/executions`. An unknown parameter, one given twice, or a value that does not
/// parse is refused (400 `invalid_request` with `field` naming the parameter), never ignored.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(dead_code, reason = "documents the parameters; parse_query reads them")]
pub struct ExecutionQuery {
    /// Only this profile.
    profile: Option<String>,
    /// Only this final status (`ok`, `error`, `timeout`, `memory_limit`, `output_limit`, `rejected`,
    /// `internal_error`, `interrupted`, `running`).
    status: Option<String>,
    /// Only this language (`python`, `typescript`).
    language: Option<String>,
    /// Only this caller (`key:<name>`, `anonymous`, `cli:<user>`, `mcp:...`); a trailing `*` makes it a
    /// prefix (`key:*`, `mcp:key:agent-1/*`). Callers without the audit role always see only their
    /// own records.
    caller: Option<String>,
    /// Received at or after this time, RFC 3339 (`2026-12-02T00:00:00Z`, `2026-12-02T01:00:00+01:00`).
    since: Option<String>,
    /// Received before this time, RFC 3339.
    until: Option<String>,
    /// Deprecated alias of `since`: ms since the Unix epoch.
    #[param(rename = "sinceMs")]
    since_ms: Option<i64>,
    /// Deprecated alias of `until`: ms since the Unix epoch.
    #[param(rename = "untilMs")]
    until_ms: Option<i64>,
    /// The `nextCursor` of the previous page.
    cursor: Option<i64>,
    /// Page size, 1..=1000 (default 50).
    limit: Option<u32>,
}

/// The parameters of `GET /v1/executions`, in the order of [`ExecutionQuery`].
const QUERY_PARAMS: &[&str] = &["profile", "status", "language", "caller", "since", "until", "sinceMs", "untilMs", "cursor", "limit"];

/// A refused query parameter: its name and why.
#[derive(Debug, PartialEq, Eq)]
struct BadParam {
    name: String,
    detail: String,
}

fn bad(name: &str, detail: String) -> BadParam {
    BadParam { name: name.into(), detail }
}

/// Reads the query string of `GET /v1/executions` into a filter (the caller restriction is
/// applied afterwards). Errors: the first parameter unknown, repeated or malformed.
fn parse_query(query: &str) -> Result<sandbox_audit::ListFilter, BadParam> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).map_err(|e| bad("query", format!("the query string cannot be decoded: {e}")))?;
    let mut seen: Vec<&str> = Vec::new();
    let mut f = sandbox_audit::ListFilter { limit: 50, ..Default::default() };
    let int = |name: &str, v: &str| -> Result<i64, BadParam> { v.parse::<i64>().map_err(|_| bad(name, format!("{name}={v:?} is not an integer"))) };
    let time = |name: &str, v: &str| -> Result<i64, BadParam> { sandbox_audit::time::parse_rfc3339_ms(v).map_err(|e| bad(name, format!("{name}={v:?}: {e}"))) };
    for (name, v) in &pairs {
        let Some(known) = QUERY_PARAMS.iter().find(|k| **k == name.as_str()) else {
            return Err(bad(name, format!("unknown query parameter {name:?}; known: {}", QUERY_PARAMS.join(", "))));
        };
        // `since` and its alias `sinceMs` (and the two `until`s) are one parameter.
        let slot = match *known {
            "sinceMs" => "since",
            "untilMs" => "until",
            k => k,
        };
        if seen.contains(&slot) {
            return Err(bad(name, format!("query parameter {name:?} is given twice (or with its alias)")));
        }
        seen.push(slot);
        match *known {
            "profile" => f.profile = Some(v.clone()),
            "status" if sandbox_audit::STATUSES.contains(&v.as_str()) => f.status = Some(v.clone()),
            "status" => return Err(bad(name, format!("status={v:?} is not a status; one of {}", sandbox_audit::STATUSES.join(", ")))),
            "language" => f.language = Some(v.clone()),
            "caller" => match v.strip_suffix('*') {
                Some(prefix) => f.caller_prefix = Some(prefix.to_owned()),
                None => f.caller = Some(v.clone()),
            },
            "since" => f.since_ms = Some(time(name, v)?),
            "until" => f.until_ms = Some(time(name, v)?),
            "sinceMs" => f.since_ms = Some(int(name, v)?),
            "untilMs" => f.until_ms = Some(int(name, v)?),
            "cursor" => f.before_seq = Some(int(name, v)?),
            "limit" => match v.parse::<u32>() {
                Ok(n @ 1..=1000) => f.limit = n,
                _ => return Err(bad(name, format!("limit={v:?} is not a page size 1..=1000"))),
            },
            other => unreachable!("{other} is in QUERY_PARAMS and handled above"),
        }
    }
    Ok(f)
}

/// Audit records, newest first, with cursor pagination. Without the audit role only the
/// caller's own (anonymous callers: those of `anonymous`).
#[utoipa::path(get, path = "/v1/executions", params(ExecutionQuery),
    responses((status = 200, description = "A page: { records: [...], nextCursor? }"), (status = 400, body = Problem, description = "A query parameter unknown, repeated or malformed; `field` names it"), (status = 401, body = Problem), (status = 403, body = Problem), (status = 421, body = Problem), (status = 429, body = Problem)))]
async fn list_executions(
    State(state): State<AppState>,
    Extension(who): Extension<Caller>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    let Some(audit) = &state.audit else { return fail(&state, ErrorCode::NotFound, "this service keeps no audit log", None) };
    let mut filter = match parse_query(query.as_deref().unwrap_or("")) {
        Ok(f) => f,
        Err(b) => return fail(&state, ErrorCode::InvalidRequest, b.detail, Some(b.name)),
    };
    if !who.can_audit_all() {
        filter.caller = Some(who.audit_name());
        filter.caller_prefix = None;
    }
    // A database query blocks: on a blocking thread, never a worker.
    let audit = audit.clone();
    let page = tokio::task::spawn_blocking(move || audit.store().list(&filter)).await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    match page {
        Ok(p) => Json(p).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "audit query failed");
            fail(&state, ErrorCode::InternalError, "the audit log could not be read", None)
        }
    }
}

/// One audit record (the caller's own, or any with the audit role).
#[utoipa::path(get, path = "/v1/executions/{id}", params(("id" = String, Path, description = "Execution id")),
    responses((status = 200, description = "The record"), (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem), (status = 421, body = Problem), (status = 429, body = Problem)))]
async fn get_execution(State(state): State<AppState>, Extension(who): Extension<Caller>, Path(id): Path<String>) -> Response {
    let Some(audit) = &state.audit else { return fail(&state, ErrorCode::NotFound, "this service keeps no audit log", None) };
    let record = {
        let (audit, id) = (audit.clone(), id.clone());
        tokio::task::spawn_blocking(move || audit.store().get(&id)).await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    };
    match record {
        Ok(Some(r)) if who.can_audit_all() || r.caller == who.audit_name() => Json(r).into_response(),
        // Someone else's record is as absent as a missing one.
        Ok(_) => fail(&state, ErrorCode::NotFound, format!("no execution {id:?}"), Some("id".into())),
        Err(e) => {
            tracing::error!(error = %e, "audit query failed");
            fail(&state, ErrorCode::InternalError, "the audit log could not be read", None)
        }
    }
}

/// The profiles the caller may use.
#[utoipa::path(get, path = "/v1/profiles", responses((status = 200, body = ProfileList), (status = 401, body = Problem), (status = 403, body = Problem), (status = 421, body = Problem), (status = 429, body = Problem)))]
async fn list_profiles(State(state): State<AppState>, Extension(who): Extension<Caller>) -> Response {
    let config = state.engine.config();
    let who = who.submitter(None);
    let profiles = config.profiles.keys().filter(|n| who.allows(n)).filter_map(|n| profile_info(&state, n)).collect();
    Json(ProfileList { profiles }).into_response()
}

/// The caller's view of profile `name`, with whether this host can run it and why not.
fn profile_info(state: &AppState, name: &str) -> Option<ProfileInfo> {
    let mut info = ProfileInfo::in_config(name, state.engine.config())?;
    let why = state.engine.availability(name).err();
    info.available = Some(why.is_none());
    info.unavailable_code = why.as_ref().map(|u| u.code);
    info.unavailable_reason = why.map(|u| u.reason);
    Some(info)
}

/// One profile, if the caller may use it.
#[utoipa::path(get, path = "/v1/profiles/{name}", params(("name" = String, Path, description = "Profile name")),
    responses((status = 200, body = ProfileInfo), (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem), (status = 421, body = Problem), (status = 429, body = Problem)))]
async fn get_profile(State(state): State<AppState>, Extension(who): Extension<Caller>, Path(name): Path<String>) -> Response {
    match state.engine.config().profiles.get(&name) {
        None => fail(&state, ErrorCode::ProfileNotFound, format!("no profile named {name:?}"), Some("name".into())),
        Some(_) if !who.submitter(None).allows(&name) => {
            fail(&state, ErrorCode::ForbiddenProfile, format!("key {:?} may not use profile {name:?}", who.name()), Some("name".into()))
        }
        Some(_) => Json(profile_info(&state, &name)).into_response(),
    }
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "ok")))]
async fn healthz() -> &'static str {
    "ok\n"
}

/// The runtime is usable: every host check of `sandbox doctor` passes, and so does the
/// self-test (namespaces, /proc, a cgroup with limits, landlock, seccomp, /dev/net/tun for
/// allowlist profiles; re-run at most every 30 s). Else 503, naming the failing step.
///
/// The body starts `ready`; each profile this host cannot run follows on a line of its own,
/// `unavailable NAME: REASON` (the node still serves the others). From SIGTERM on: 503
/// `shutting_down` (the node still serves what reaches it until it stops accepting).
#[utoipa::path(get, path = "/readyz", responses((status = 200, description = "ready"), (status = 503, body = Problem)))]
async fn readyz(State(state): State<AppState>) -> Response {
    if state.draining.load(std::sync::atomic::Ordering::SeqCst) {
        return ProblemResponse(problem::new(ErrorCode::ShuttingDown, "this node is shutting down".into(), None, None)).into_response();
    }
    let engine = state.engine.clone();
    let verdict = tokio::task::spawn_blocking(move || engine.readiness()).await.unwrap_or_else(|e| Err(format!("self-test panicked: {e}")));
    if let Err(why) = verdict {
        return ProblemResponse(problem::new(ErrorCode::RuntimeUnavailable, why, None, None)).into_response();
    }
    let mut body = String::from("ready\n");
    for name in state.engine.config().profiles.keys() {
        if let Err(u) = state.engine.availability(name) {
            body.push_str(&format!("unavailable {name}: {}\n", u.reason));
        }
    }
    body.into_response()
}

/// Prometheus metrics in the OpenMetrics 1.0 text format. With API keys configured, only for a key with
/// role `metrics` (`door::metrics_key`) unless `[service] metrics_unauthenticated`.
#[utoipa::path(get, path = "/metrics", responses(
    (status = 200, description = "OpenMetrics text (Prometheus reads it): counters (`_total` samples) and gauges", content_type = "application/openmetrics-text"),
    (status = 401, description = "API keys are configured and no known key was sent (`unauthorized`; not with `[service] metrics_unauthenticated`)", body = Problem, content_type = "application/problem+json"),
    (status = 403, description = "The key lacks role `metrics` (`forbidden`), or a browser page of an origin not allowed (`origin_not_allowed`)", body = Problem, content_type = "application/problem+json"),
    (status = 421, description = "The Host is not one this service answers to (`host_not_allowed`)", body = Problem, content_type = "application/problem+json"),
))]
async fn metrics(State(state): State<AppState>) -> Response {
    state.metrics.set_door(state.mcp_sessions.open().await, state.bodies.held());
    let body = state.metrics.render(state.service.in_flight(), state.service.queued(), &state.engine);
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body).into_response()
}

async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stalled client's unread output is held merged: 100,000 one-byte writes wait as two
    /// chunks (64 KiB each at most), not 100,000, in order, and a chunk of the other stream
    /// starts a new one.
    #[tokio::test]
    async fn unread_output_waits_merged_in_order() {
        let pending = Pending::default();
        for _ in 0..100_000 {
            pending.push(Chunk { stream: StreamKind::Stdout, data: vec![b'x'] });
        }
        pending.push(Chunk { stream: StreamKind::Stderr, data: b"e".to_vec() });
        pending.push(Chunk { stream: StreamKind::Stdout, data: b"y".to_vec() });
        pending.close();
        assert_eq!(pending.chunks.lock().unwrap().0.len(), 4);
        let mut got = Vec::new();
        while let Some(c) = pending.next().await {
            got.push((c.stream, c.data.len()));
        }
        assert_eq!(
            got,
            [
                (StreamKind::Stdout, MERGED_CHUNK_MAX_BYTES),
                (StreamKind::Stdout, 100_000 - MERGED_CHUNK_MAX_BYTES),
                (StreamKind::Stderr, 1),
                (StreamKind::Stdout, 1)
            ]
        );
    }

    fn refused(q: &str) -> String {
        parse_query(q).expect_err(q).name
    }

    #[test]
    fn query_parameters_parse_or_are_refused_by_name() {
        let f = parse_query("status=timeout&since=1970-01-01T00:00:01Z&until=1970-01-01T01:00:02%2B01:00&limit=7&cursor=9&caller=key:*").unwrap();
        assert_eq!((f.status.as_deref(), f.since_ms, f.until_ms, f.limit, f.before_seq), (Some("timeout"), Some(1000), Some(2000), 7, Some(9)));
        assert_eq!((f.caller, f.caller_prefix.as_deref()), (None, Some("key:")));
        assert_eq!(parse_query("sinceMs=5&untilMs=6").map(|f| (f.since_ms, f.until_ms)), Ok((Some(5), Some(6))));
        assert_eq!(parse_query("").map(|f| f.limit), Ok(50));
        assert_eq!(refused("statsu=timeout"), "statsu");
        assert_eq!(refused("limit=abc"), "limit");
        assert_eq!(refused("limit=0"), "limit");
        assert_eq!(refused("limit=1001"), "limit");
        assert_eq!(refused("status=timout"), "status");
        assert_eq!(refused("since=2026-12-02"), "since");
        assert_eq!(refused("sinceMs=2026-12-02T00:00:00Z"), "sinceMs");
        assert_eq!(refused("since=1970-01-01T00:00:01Z&sinceMs=5"), "sinceMs");
        assert_eq!(refused("cursor=x"), "cursor");
    }
}
