//! The execution service: the one path every front door (HTTP, MCP over stdio and HTTP,
//! `sandbox run`) takes from a decoded request to a result. A door decodes, calls
//! [`Service::submit`], runs the [`Ticket`] it gets and encodes what comes back; it repeats no
//! step of its own.
//!
//! `submit` authorizes the caller for the profile, admits the request once (the [`Admitted`] is
//! carried to the run, never recomputed), asks [`Engine::availability`] whether the host can run
//! the profile, and takes a slot or a queue place; every refusal on the way is charged to the
//! caller's address (when [`Hooks::charge`] limits refusals), audited as a bounded summary and
//! counted ([`Hooks::refused`]). [`Ticket::run`] waits for its slot (`timing.queueMs`), runs the
//! execution inside its own tracing span (`execution_id`, `profile`, `caller`), streams output
//! and reports the result to [`Hooks::executed`].

use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use sandbox_core::record::Quota;
use sandbox_core::wire::ExecError;
use sandbox_core::{admit, Admitted, ErrorCode, ExecutionRequest, ExecutionResult, Status};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tracing::Instrument as _;

use crate::{ms, Chunk, Engine};

/// Who submits: the name the audit log records, the profiles it may use, and the address its
/// refusals are charged to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// As the audit log names it: `key:<name>`, `anonymous`, `cli:<user>`, `mcp:<principal>/<client>`.
    pub audit_name: String,
    /// Profiles it may use; `"*"` for all.
    pub profiles: Vec<String>,
    /// The client address (network doors); `None` for local callers, whose refusals are never limited.
    pub peer: Option<IpAddr>,
    /// Its limit of running executions (an API key's `max_concurrent`); `None`: only the slots.
    pub quota: Option<Quota>,
}

impl Caller {
    /// A caller that may use every profile, from no network address (`sandbox run`, stdio MCP).
    pub fn local(audit_name: impl Into<String>) -> Self {
        Self { audit_name: audit_name.into(), profiles: vec!["*".into()], peer: None, quota: None }
    }

    /// Whether this caller may run `profile`.
    pub fn allows(&self, profile: &str) -> bool {
        self.profiles.iter().any(|p| p == "*" || p == profile)
    }
}

/// Why a request was not run: a stable code, the message the caller sees, the request field at
/// fault, the id of its audit record and, for `rate_limited`, when to retry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Refusal {
    /// Stable code.
    pub code: ErrorCode,
    /// Human-readable reason, the same whichever door answers.
    pub message: String,
    /// The request field at fault (`profile`, `timeout`, `files["../x"]`, ...).
    pub field: Option<String>,
    /// The id the audit log recorded the refusal under (`None`: not recorded).
    pub execution_id: Option<String>,
    /// Seconds until the caller may retry (`rate_limited`; `queue_full` is 1).
    pub retry_after_s: Option<u64>,
}

impl Refusal {
    /// A refusal with `code`, `message` and the `field` at fault, not yet recorded.
    pub fn new(code: ErrorCode, message: impl Into<String>, field: Option<String>) -> Self {
        Self { code, message: message.into(), field, execution_id: None, retry_after_s: None }
    }

    /// The refusal as a `rejected` result of a request for `profile` (CLI `--json`, MCP's
    /// structured content).
    pub fn into_result(self, profile: &str) -> ExecutionResult {
        ExecutionResult {
            execution_id: self.execution_id.unwrap_or_default(),
            status: Status::Rejected,
            profile: profile.to_owned(),
            error: Some(ExecError { field: self.field, ..ExecError::new(self.code.as_str(), self.message) }),
            ..Default::default()
        }
    }
}

/// What a refusal costs its caller's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charge {
    /// Record it; `unrecorded_before` refusals were left out of the log since the last recorded one.
    Record {
        /// Refusals answered `rate_limited` and not recorded since the previous recorded one.
        unrecorded_before: u64,
    },
    /// The address is over its limit: answer `rate_limited`, record nothing.
    Limited {
        /// Seconds until it may be refused (and recorded) again, at least 1.
        retry_after_s: u64,
    },
}

/// What a service around the engine observes and limits: metrics and the per-address refusal
/// limit (`sandbox serve`); [`NoHooks`] for one-shot commands.
pub trait Hooks: Send + Sync {
    /// Charges one refusal with `code` to `peer`'s address.
    fn charge(&self, _peer: IpAddr, _code: ErrorCode) -> Charge {
        Charge::Record { unrecorded_before: 0 }
    }
    /// A request was refused with `code` (after [`Hooks::charge`]; `rate_limited` when limited).
    fn refused(&self, _code: ErrorCode) {}
    /// An execution ran to `result` (any status but `rejected`).
    fn executed(&self, _result: &ExecutionResult) {}
}

/// [`Hooks`] that observe nothing and limit nothing.
pub struct NoHooks;

impl Hooks for NoHooks {}

/// The execution service; one per process, shared by every door.
pub struct Service {
    engine: Arc<Engine>,
    slots: Slots,
    hooks: Arc<dyn Hooks>,
}

/// What a door records when it refuses a request itself, before it could call [`Service::submit`]
/// (an unreadable body, a failed key check).
#[derive(Debug, Clone, Copy)]
pub struct Audit<'a> {
    /// The caller's audit name (`unauthenticated` before a key was checked).
    pub caller: &'a str,
    /// The request, when it was read.
    pub request: Option<&'a ExecutionRequest>,
    /// The message to record (may say more than the caller is told).
    pub message: &'a str,
}

impl Service {
    /// A service on `engine` with `slots` concurrent executions (at least 1) and at most
    /// `queue_max` requests waiting for one.
    pub fn new(engine: Arc<Engine>, slots: u32, queue_max: u32, hooks: Arc<dyn Hooks>) -> Self {
        Self { engine, slots: Slots::new(slots, queue_max), hooks }
    }

    /// A service with the limits of the engine's `[service]` configuration: `max_concurrency`
    /// slots (0: [`default_concurrency`]) and `queue_max` waiting.
    pub fn for_config(engine: Arc<Engine>, hooks: Arc<dyn Hooks>) -> Self {
        let (slots, queue_max) = (configured_slots(engine.config()), engine.config().service.queue_max);
        Self::new(engine, slots, queue_max, hooks)
    }

    /// The engine below.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Executions running now.
    pub fn in_flight(&self) -> u32 {
        self.slots.in_flight()
    }

    /// Requests waiting for a slot now.
    pub fn queued(&self) -> u32 {
        self.slots.waiting.load(Ordering::SeqCst)
    }

    /// Total execution slots.
    pub fn slots(&self) -> u32 {
        self.slots.total
    }

    /// Checks `request` for `caller` and takes a slot or a queue place for it.
    /// Errors: the [`Refusal`] (already charged, audited and counted): `forbidden_profile`,
    /// `profile_not_found` (naming the profiles the caller may use), every admission code,
    /// `runtime_unavailable` / `environment_not_installed`, `queue_full`; `rate_limited` instead
    /// of any of them when the caller's address is over its refusal limit.
    pub fn submit(self: &Arc<Self>, caller: &Caller, mut request: ExecutionRequest) -> Result<Ticket, Refusal> {
        let received = Instant::now();
        if request.profile.is_empty() {
            match default_profile(self.engine.config(), caller, request.language.as_deref()) {
                Ok(profile) => request.profile = profile,
                Err(r) => return Err(self.refuse(caller, Some(&request), r)),
            }
        }
        match self.check(caller, &request) {
            Err(r) => Err(self.refuse(caller, Some(&request), r)),
            Ok(admitted) => match self.slots.place() {
                Some(place) => Ok(Ticket {
                    service: self.clone(),
                    caller: caller.audit_name.clone(),
                    quota: caller.quota.clone(),
                    request: Arc::new(request),
                    admitted,
                    place,
                    received,
                }),
                None => {
                    let r = Refusal::new(ErrorCode::QueueFull, "every execution slot and queue place is taken; retry later", None);
                    Err(self.refuse(caller, Some(&request), Refusal { retry_after_s: Some(1), ..r }))
                }
            },
        }
    }

    /// Authorization, admission and availability: the pure checks of [`Service::submit`].
    fn check(&self, caller: &Caller, request: &ExecutionRequest) -> Result<Admitted, Refusal> {
        let config = self.engine.config();
        let allowed = || allowed_profiles(config, caller);
        if config.profiles.contains_key(&request.profile) && !caller.allows(&request.profile) {
            let message = format!("you may not use profile {:?}; profiles you may use: {}", request.profile, allowed());
            return Err(Refusal::new(ErrorCode::ForbiddenProfile, message, Some("profile".into())));
        }
        let admitted = admit(request, config).map_err(|r| {
            // Name only the profiles this caller may use.
            let message = if r.code == ErrorCode::ProfileNotFound {
                format!("no profile named {:?}; profiles you may use: {}", request.profile, allowed())
            } else {
                r.message
            };
            Refusal::new(r.code, message, r.field)
        })?;
        self.engine.availability(&admitted.profile_name).map_err(|u| Refusal::new(u.code, u.reason, None))?;
        Ok(admitted)
    }

    /// Refuses a request of `caller`: charged to its address, recorded with `request` (a
    /// bounded summary) and counted. Returns the refusal to answer: `refusal` with its audit id,
    /// or `rate_limited` when the address is over its limit (then nothing is recorded).
    pub fn refuse(&self, caller: &Caller, request: Option<&ExecutionRequest>, refusal: Refusal) -> Refusal {
        let message = refusal.message.clone();
        self.refuse_as(caller.peer, Some(Audit { caller: &caller.audit_name, request, message: &message }), refusal)
    }

    /// Like [`Service::refuse`] for a refusal made before the caller was known: charged to
    /// `peer`, recorded as `audit` says (not at all with `None`), counted.
    pub fn refuse_as(&self, peer: Option<IpAddr>, audit: Option<Audit<'_>>, mut refusal: Refusal) -> Refusal {
        let charge = peer.map_or(Charge::Record { unrecorded_before: 0 }, |p| self.hooks.charge(p, refusal.code));
        match charge {
            Charge::Record { unrecorded_before } => {
                if let Some(a) = audit {
                    let id = uuid::Uuid::now_v7().to_string();
                    let message = audit_message(a.message, unrecorded_before);
                    // An audit write blocks (an fsync, a database round trip): let the runtime move
                    // this worker's other tasks elsewhere meanwhile (the request is not copied).
                    let written = crate::block_in_place(|| self.engine.recorder().rejected(&id, a.caller, a.request, refusal.code.as_str(), &message));
                    match written {
                        Ok(()) => refusal.execution_id = Some(id),
                        Err(e) => tracing::error!(error = %e.chain(), "could not record a refused request"),
                    }
                }
                tracing::info!(code = refusal.code.as_str(), "request refused");
                self.hooks.refused(refusal.code);
                refusal
            }
            Charge::Limited { retry_after_s } => {
                self.hooks.refused(ErrorCode::RateLimited);
                let from = peer.map(|p| format!(" from {p}")).unwrap_or_default();
                let message = format!("too many refused requests{from}; retry in {retry_after_s} s");
                Refusal { retry_after_s: Some(retry_after_s), ..Refusal::new(ErrorCode::RateLimited, message, None) }
            }
        }
    }
}

/// The profile a request without one runs under, the same rule on every door: for `language`
/// (`None`: `python`), `<language>-default` when it exists, runs that language and `caller` may
/// use it, else the first profile (by name) of that language `caller` may use.
/// Errors: `unsupported_language` (field `language`) for an unknown language; `profile_not_found`
/// (field `profile`) when `caller` may use no profile of the language.
pub fn default_profile(config: &sandbox_core::Config, caller: &Caller, language: Option<&str>) -> Result<String, Refusal> {
    let language = match language {
        None => sandbox_core::Language::Python,
        Some(l) => sandbox_core::Language::parse(l).map_err(|(code, m)| Refusal::new(code, m, Some("language".into())))?,
    };
    let preferred = format!("{}-default", language.as_str());
    if config.profiles.get(&preferred).is_some_and(|p| p.language == language) && caller.allows(&preferred) {
        return Ok(preferred);
    }
    config.profiles.iter().find(|(n, p)| p.language == language && caller.allows(n)).map(|(n, _)| n.clone()).ok_or_else(|| {
        let message = format!("no profile given, and no {} profile you may use; profiles you may use: {}", language.as_str(), allowed_profiles(config, caller));
        Refusal::new(ErrorCode::ProfileNotFound, message, Some("profile".into()))
    })
}

/// The profiles of `config` that `caller` may use, comma-separated, for refusals' messages;
/// `none` for a key that may use none (a metrics scraper's).
fn allowed_profiles(config: &sandbox_core::Config, caller: &Caller) -> String {
    let names: Vec<&str> = config.profiles.keys().map(String::as_str).filter(|p| caller.allows(p)).collect();
    match names.is_empty() {
        true => "none".to_owned(),
        false => names.join(", "),
    }
}

/// The executions a service of `config` runs at once: `[service] max_concurrency`, or when it
/// is 0 [`default_concurrency`].
pub fn configured_slots(config: &sandbox_core::Config) -> u32 {
    match config.service.max_concurrency {
        0 => default_concurrency(config),
        n => n,
    }
}

/// One execution slot per core, fewer when memory could not hold that many runs of the
/// largest profile besides the warm pools' pre-started sandboxes (each counts as one run of its
/// own profile: its memory limit, bytes); never below 1.
pub fn default_concurrency(config: &sandbox_core::Config) -> u32 {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mem_total = nix::sys::sysinfo::sysinfo().map_or(u64::MAX, |s| s.ram_total());
    concurrency_for(config, cores, mem_total)
}

/// [`default_concurrency`] for `cores` and `mem_total` bytes.
fn concurrency_for(config: &sandbox_core::Config, cores: usize, mem_total: u64) -> u32 {
    let largest = config.profiles.values().map(|p| p.limits.memory_max_bytes).max().unwrap_or(1).max(1);
    let pooled: u64 = config
        .profiles
        .values()
        .filter(|p| p.warm.mode != sandbox_core::profile::WarmMode::Off)
        .map(|p| u64::from(p.warm.pool_size).saturating_mul(p.limits.memory_max_bytes))
        .fold(0, u64::saturating_add);
    let by_memory = usize::try_from(mem_total.saturating_sub(pooled) / largest).unwrap_or(usize::MAX);
    u32::try_from(cores.min(by_memory).max(1)).unwrap_or(1)
}

/// `detail` with a note of the refusals left out of the audit log before it, if any.
pub fn audit_message(detail: &str, unrecorded_before: u64) -> String {
    if unrecorded_before == 0 {
        detail.to_owned()
    } else {
        // First, so that truncating a long detail cannot cut the count off.
        format!("[{unrecorded_before} earlier refusals were rate-limited and not recorded] {detail}")
    }
}

/// An admitted request holding a slot or a place in the queue. Dropping it gives the place up.
pub struct Ticket {
    service: Arc<Service>,
    caller: String,
    quota: Option<Quota>,
    request: Arc<ExecutionRequest>,
    admitted: Admitted,
    place: Place,
    received: Instant,
}

impl Ticket {
    /// The profile it runs under.
    pub fn profile(&self) -> &str {
        &self.admitted.profile_name
    }

    /// Its wall-clock timeout in ms.
    pub fn timeout_ms(&self) -> u64 {
        self.admitted.timeout_ms
    }

    /// Waits for a slot, runs the execution to its end and returns the result; `output`, when
    /// given, receives stdout/stderr chunks as they arrive. The result's `timing.queueMs` is the
    /// wait and `durationMs` counts from [`Service::submit`]. Dropping the future tears the
    /// sandbox down.
    pub async fn run(self, output: Option<mpsc::UnboundedSender<Chunk>>) -> ExecutionResult {
        let Self { service, caller, quota, request, admitted, place, received } = self;
        let id = uuid::Uuid::now_v7().to_string();
        let span = tracing::info_span!("execution", execution_id = %id, profile = %admitted.profile_name, caller = %caller);
        async move {
            let _slot = place.into_slot(&service.slots).await;
            let queue_ms = ms(received.elapsed());
            tracing::info!(queue_ms, "execution started");
            let mut result = service.engine.execute_admitted(&id, &caller, quota, request, admitted, queue_ms, output).await;
            result.duration_ms = ms(received.elapsed());
            tracing::info!(status = result.status.as_str(), duration_ms = result.duration_ms, "execution finished");
            service.hooks.executed(&result);
            result
        }
        .instrument(span)
        .await
    }
}

/// Concurrency limit plus a bounded queue.
struct Slots {
    slots: Arc<Semaphore>,
    total: u32,
    waiting: Arc<AtomicU32>,
    queue_max: u32,
}

/// A ticket's claim: a slot already, or a place in the queue.
enum Place {
    Slot(OwnedSemaphorePermit),
    Queued(QueuePlace),
}

/// A place in the queue, given up when dropped.
struct QueuePlace(Arc<AtomicU32>);

impl Drop for QueuePlace {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Place {
    async fn into_slot(self, slots: &Slots) -> Option<OwnedSemaphorePermit> {
        match self {
            Self::Slot(p) => Some(p),
            // The semaphore is never closed.
            Self::Queued(_place) => slots.slots.clone().acquire_owned().await.ok(),
        }
    }
}

impl Slots {
    fn new(slots: u32, queue_max: u32) -> Self {
        let total = slots.max(1);
        Self { slots: Arc::new(Semaphore::new(total as usize)), total, waiting: Arc::new(AtomicU32::new(0)), queue_max }
    }

    /// A free slot, else a queue place; `None` when the queue is full.
    fn place(&self) -> Option<Place> {
        if let Ok(p) = self.slots.clone().try_acquire_owned() {
            return Some(Place::Slot(p));
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.queue_max {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Place::Queued(QueuePlace(self.waiting.clone())))
    }

    fn in_flight(&self) -> u32 {
        self.total - u32::try_from(self.slots.available_permits()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests;
