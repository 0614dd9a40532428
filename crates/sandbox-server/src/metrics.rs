//! Prometheus metrics (the OpenMetrics 1.0 text format, `prometheus_client`'s encoder): executions by profile and status, a duration
//! histogram, rejections by code, refusals left out of the audit log by the rate limit, in-flight and queued gauges.
//!
//! Counts since the service's start are counters (`# TYPE ... counter`, named `..._total`, as
//! the exposition format and OpenMetrics name them), so that `rate()` and `increase()` work and a
//! restart reads as a counter reset; what can go down (depth, readiness, a template's forks,
//! which restart with a new template) is a gauge. The engine keeps its own counts as atomics;
//! a scrape advances each counter to the engine's count ([`Metrics::render`]).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExecLabels {
    profile: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProfileLabels {
    profile: String,
}

/// The [`sandbox_engine::Hooks`] of `sandbox serve` (shared by `/v1`, `/mcp` and `sandbox mcp`):
/// refusals charged to the per-address limit, and counted with executions in the metrics.
pub struct ServerHooks {
    /// Where refusals and executions are counted.
    pub metrics: std::sync::Arc<Metrics>,
    /// The per-address limit of refusals.
    pub refusals: std::sync::Arc<crate::Refusals>,
}

impl sandbox_engine::Hooks for ServerHooks {
    fn charge(&self, peer: std::net::IpAddr, code: sandbox_core::ErrorCode) -> sandbox_engine::service::Charge {
        let charge = self.refusals.charge(crate::Peer(peer), code);
        if matches!(charge, sandbox_engine::service::Charge::Limited { .. }) {
            self.metrics.unrecorded(code.as_str());
        }
        charge
    }

    fn refused(&self, code: sandbox_core::ErrorCode) {
        self.metrics.rejected(code.as_str());
    }

    fn executed(&self, result: &sandbox_core::ExecutionResult) {
        self.metrics.executed(&result.profile, result.status.as_str(), result.duration_ms);
    }
}

/// The service's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    executions: Family<ExecLabels, Counter>,
    rejected: Family<CodeLabels, Counter>,
    unrecorded: Family<CodeLabels, Counter>,
    duration: Histogram,
    in_flight: Gauge,
    queued: Gauge,
    mcp_sessions: Gauge,
    request_body_bytes: Gauge,
    warm_hits: Counter,
    warm_cold_fallbacks: Counter,
    teardown_failures: Counter,
    warm_restarts: Counter,
    template_ready: Family<ProfileLabels, Gauge>,
    template_forks: Family<ProfileLabels, Gauge>,
    template_peak_memory: Family<ProfileLabels, Gauge>,
    pool_ready: Family<ProfileLabels, Gauge>,
    pool_starting: Family<ProfileLabels, Gauge>,
    pool_size: Family<ProfileLabels, Gauge>,
    pool_hits: Family<ProfileLabels, Counter>,
    pool_misses: Family<ProfileLabels, Counter>,
    pool_started: Family<ProfileLabels, Counter>,
    pool_discarded: Family<ProfileLabels, Counter>,
    /// Held while a scrape advances the counters to the engine's counts: two at once would both
    /// add the same difference.
    advancing: std::sync::Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("sandbox");
        let executions = Family::<ExecLabels, Counter>::default();
        let rejected = Family::<CodeLabels, Counter>::default();
        let unrecorded = Family::<CodeLabels, Counter>::default();
        let duration = Histogram::new([0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0]);
        let in_flight = Gauge::default();
        let queued = Gauge::default();
        registry.register("executions", "Executions that ran, by profile and status", executions.clone());
        registry.register("rejected", "Requests refused before running, by error code", rejected.clone());
        registry.register(
            "refusals_unrecorded",
            "Refusals past the per-address limit: answered rate_limited, not audited; by the code they would have had",
            unrecorded.clone(),
        );
        registry.register("execution_duration_seconds", "Wall time of executions that ran", duration.clone());
        registry.register("in_flight", "Executions running now", in_flight.clone());
        registry.register("queued", "Requests waiting for an execution slot", queued.clone());
        let mcp_sessions = Gauge::default();
        registry.register("mcp_sessions", "MCP sessions open on /mcp (capped by [service] mcp_sessions_max)", mcp_sessions.clone());
        let request_body_bytes = Gauge::default();
        registry.register(
            "request_body_bytes",
            "Bytes of request bodies held now, read or to be read, until their answers are sent (capped by [service] request_bodies_max_bytes)",
            request_body_bytes.clone(),
        );
        let (warm_hits, warm_cold_fallbacks, warm_restarts) = (Counter::default(), Counter::default(), Counter::default());
        registry.register("warm_hits", "Executions in a child their warm template forked for them (children forked ahead are pool hits)", warm_hits.clone());
        registry.register(
            "warm_cold_fallbacks",
            "Executions of profiles kept warm (a template or a pool) that started cold (nothing ready, a start that failed, a variable read only at the interpreter's start)",
            warm_cold_fallbacks.clone(),
        );
        let teardown_failures = Counter::default();
        registry.register(
            "teardown_failures",
            "Executions whose sandbox could not be torn down (logged with the execution id; swept at the next start)",
            teardown_failures.clone(),
        );
        registry.register("warm_template_restarts", "Templates started after a profile's first (replaced or died)", warm_restarts.clone());
        let template_ready = Family::<ProfileLabels, Gauge>::default();
        let template_forks = Family::<ProfileLabels, Gauge>::default();
        let template_peak_memory = Family::<ProfileLabels, Gauge>::default();
        registry.register("warm_template_ready", "1 when the profile's template is ready to fork", template_ready.clone());
        registry.register("warm_template_forks", "Forks served by the profile's current template", template_forks.clone());
        registry.register("warm_template_peak_memory_bytes", "Peak memory of the profile's template cgroup", template_peak_memory.clone());
        let (pool_ready, pool_size) = (Family::<ProfileLabels, Gauge>::default(), Family::<ProfileLabels, Gauge>::default());
        let family = Family::<ProfileLabels, Counter>::default;
        let (pool_hits, pool_misses, pool_started, pool_discarded) = (family(), family(), family(), family());
        registry.register("warm_pool_ready", "Pre-started sandboxes waiting in the profile's pool (its depth)", pool_ready.clone());
        let pool_starting = Family::<ProfileLabels, Gauge>::default();
        registry.register("warm_pool_starting", "1 while a sandbox of the profile's pool is being started", pool_starting.clone());
        registry.register("warm_pool_size", "The profile's configured pool size", pool_size.clone());
        registry.register("warm_pool_hits", "Executions that ran in a sandbox of the profile's pool", pool_hits.clone());
        registry.register(
            "warm_pool_misses",
            "Executions of the profile that found its pool empty (or a member that could not take them): they forked from the template at their start (a template's pool of children forked ahead) or started cold (warm_cold_fallbacks)",
            pool_misses.clone(),
        );
        registry.register("warm_pool_started", "Sandboxes of the profile's pool started", pool_started.clone());
        registry.register("warm_pool_discarded", "Sandboxes of the profile's pool destroyed unused (too old, dead, shutdown)", pool_discarded.clone());
        Self {
            registry,
            executions,
            rejected,
            unrecorded,
            duration,
            in_flight,
            queued,
            mcp_sessions,
            request_body_bytes,
            teardown_failures,
            warm_hits,
            warm_cold_fallbacks,
            warm_restarts,
            template_ready,
            template_forks,
            template_peak_memory,
            pool_ready,
            pool_starting,
            pool_size,
            pool_hits,
            pool_misses,
            pool_started,
            pool_discarded,
            advancing: std::sync::Mutex::new(()),
        }
    }
}

impl Metrics {
    /// Counts one execution that ran.
    pub fn executed(&self, profile: &str, status: &str, duration_ms: u64) {
        self.executions.get_or_create(&ExecLabels { profile: profile.into(), status: status.into() }).inc();
        #[allow(clippy::cast_precision_loss)]
        self.duration.observe(duration_ms as f64 / 1000.0);
    }

    /// Sets the gauges of open MCP sessions and of request body bytes held (read at each scrape).
    pub fn set_door(&self, mcp_sessions: usize, request_body_bytes: u64) {
        self.mcp_sessions.set(i64::try_from(mcp_sessions).unwrap_or(i64::MAX));
        self.request_body_bytes.set(i64::try_from(request_body_bytes).unwrap_or(i64::MAX));
    }

    /// Counts one refused request.
    pub fn rejected(&self, code: &str) {
        self.rejected.get_or_create(&CodeLabels { code: code.into() }).inc();
    }

    /// Counts one refusal that was rate-limited and so not audited; `code` is what it would have been.
    pub fn unrecorded(&self, code: &str) {
        self.unrecorded.get_or_create(&CodeLabels { code: code.into() }).inc();
    }

    /// The OpenMetrics text, with the gauges set from `in_flight`, `queued` and warm templates'
    /// and pools' state, and the counters advanced to `engine`'s counts (teardown failures, warm
    /// hits, cold fallbacks, template restarts, each pool's hits, misses, starts and discards).
    pub fn render(&self, in_flight: u32, queued: u32, engine: &sandbox_engine::Engine) -> String {
        use std::sync::atomic::Ordering::Relaxed;
        let (templates, pools) = (engine.templates(), engine.pools());
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let _advancing = self.advancing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.in_flight.set(i64::from(in_flight));
        self.queued.set(i64::from(queued));
        advance(&self.teardown_failures, engine.teardown_failures());
        advance(&self.warm_cold_fallbacks, engine.warm_cold_fallbacks());
        if let Some(t) = templates {
            advance(&self.warm_hits, t.counters.hits.load(Relaxed));
            advance(&self.warm_restarts, t.counters.restarts.load(Relaxed));
            for st in t.status() {
                let l = ProfileLabels { profile: st.profile.clone() };
                self.template_ready.get_or_create(&l).set(i64::from(st.state == "ready"));
                self.template_forks.get_or_create(&l).set(n(st.forks));
                self.template_peak_memory.get_or_create(&l).set(n(st.peak_memory_bytes));
            }
        }
        if let Some(p) = pools {
            for st in p.status() {
                let l = ProfileLabels { profile: st.profile.clone() };
                advance(&self.pool_hits.get_or_create(&l), st.hits);
                advance(&self.pool_misses.get_or_create(&l), st.misses);
                advance(&self.pool_started.get_or_create(&l), st.started);
                advance(&self.pool_discarded.get_or_create(&l), st.discarded);
                self.pool_ready.get_or_create(&l).set(i64::from(st.ready));
                self.pool_starting.get_or_create(&l).set(i64::from(st.starting));
                self.pool_size.get_or_create(&l).set(i64::from(st.size));
            }
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

/// Advances `counter` to `count`, a count the engine keeps since the service's start (so never
/// lower than what the counter shows: a lower one leaves it as it is).
fn advance(counter: &Counter, count: u64) {
    counter.inc_by(count.saturating_sub(counter.get()));
}
