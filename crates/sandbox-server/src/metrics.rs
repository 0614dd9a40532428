//! Prometheus metrics (text exposition format): executions by profile and status, a duration
//! histogram, rejections by code, refusals left out of the audit log by the rate limit, in-flight and queued gauges.

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
        Self { registry, executions, rejected, unrecorded, duration, in_flight, queued }
    }
}

impl Metrics {
    /// Counts one execution that ran.
    pub fn executed(&self, profile: &str, status: &str, duration_ms: u64) {
        self.executions.get_or_create(&ExecLabels { profile: profile.into(), status: status.into() }).inc();
        #[allow(clippy::cast_precision_loss)]
        self.duration.observe(duration_ms as f64 / 1000.0);
    }

    /// Counts one refused request.
    pub fn rejected(&self, code: &str) {
        self.rejected.get_or_create(&CodeLabels { code: code.into() }).inc();
    }

    /// Counts one refusal that was rate-limited and so not audited; `code` is what it would have been.
    pub fn unrecorded(&self, code: &str) {
        self.unrecorded.get_or_create(&CodeLabels { code: code.into() }).inc();
    }

    /// The text exposition, with the gauges set from `in_flight` and `queued`.
    pub fn render(&self, in_flight: u32, queued: u32) -> String {
        self.in_flight.set(i64::from(in_flight));
        self.queued.set(i64::from(queued));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}
