//! The per-execution network report, bounded: at most [`REPORT_MAX_ENTRIES`] entries per list,
//! the rest counted. Allowed connections count bytes live, so a connection still open when the
//! execution ends is reported with what it moved so far.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use sandbox_core::network::{AllowedConnection, BlockedAttempt, NetworkReport, REPORT_MAX_ENTRIES};

/// Byte counters of one allowed connection, updated as data moves.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Bytes from the sandbox to the destination.
    pub(crate) sent: AtomicU64,
    /// Bytes from the destination to the sandbox.
    pub(crate) received: AtomicU64,
}

struct Open {
    entry: AllowedConnection,
    counters: Arc<Counters>,
    started: Instant,
    ended: Mutex<Option<(Instant, Option<String>)>>,
}

#[derive(Default)]
struct Inner {
    allowed: Vec<Arc<Open>>,
    blocked: Vec<BlockedAttempt>,
    allowed_omitted: u64,
    blocked_omitted: u64,
    buffer_peak_bytes: u64,
}

/// Collects one execution's report; shared by the packet filter, the DNS and the splices.
#[derive(Default, Clone)]
pub(crate) struct Reporter(Arc<Mutex<Inner>>);

/// Handle of one allowed connection in the report.
pub(crate) struct ConnectionHandle(Option<Arc<Open>>, Arc<Counters>);

impl ConnectionHandle {
    /// Its byte counters.
    pub(crate) fn counters(&self) -> &Arc<Counters> {
        &self.1
    }

    /// Marks it ended, with the error that ended it, if any.
    pub(crate) fn end(&self, error: Option<String>) {
        if let Some(open) = &self.0 {
            *open.ended.lock().expect("report lock") = Some((Instant::now(), error));
        }
    }
}

/// Now, RFC 3339 in UTC with milliseconds.
pub(crate) fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

impl Reporter {
    /// Records a refused attempt.
    pub(crate) fn blocked(&self, b: BlockedAttempt) {
        tracing::debug!(address = %b.address, port = ?b.port, protocol = %b.protocol, reason = %b.reason, "network attempt blocked");
        let mut inner = self.0.lock().expect("report lock");
        if inner.blocked.len() < REPORT_MAX_ENTRIES {
            inner.blocked.push(b);
        } else {
            inner.blocked_omitted += 1;
        }
    }

    /// Records an allowed connection opening now; the handle counts its bytes and ends it.
    pub(crate) fn allowed(&self, entry: AllowedConnection) -> ConnectionHandle {
        tracing::debug!(address = %entry.address, port = entry.port, "network connection allowed");
        let counters = Arc::new(Counters::default());
        let mut inner = self.0.lock().expect("report lock");
        if inner.allowed.len() < REPORT_MAX_ENTRIES {
            let open = Arc::new(Open { entry, counters: counters.clone(), started: Instant::now(), ended: Mutex::new(None) });
            inner.allowed.push(open.clone());
            ConnectionHandle(Some(open), counters)
        } else {
            inner.allowed_omitted += 1;
            ConnectionHandle(None, counters)
        }
    }

    /// Records that the sandbox's connections held `bytes` of userspace buffers at once (the
    /// report keeps the largest).
    pub(crate) fn buffer_peak(&self, bytes: usize) {
        let mut inner = self.0.lock().expect("report lock");
        inner.buffer_peak_bytes = inner.buffer_peak_bytes.max(bytes as u64);
    }

    /// The report as it stands.
    pub(crate) fn snapshot(&self) -> NetworkReport {
        let inner = self.0.lock().expect("report lock");
        let allowed = inner
            .allowed
            .iter()
            .map(|o| {
                let ended = o.ended.lock().expect("report lock").clone();
                let (end, error) = match ended {
                    Some((at, error)) => (at, error),
                    None => (Instant::now(), None),
                };
                AllowedConnection {
                    bytes_sent: o.counters.sent.load(Ordering::Relaxed),
                    bytes_received: o.counters.received.load(Ordering::Relaxed),
                    duration_ms: u64::try_from(end.saturating_duration_since(o.started).as_millis()).unwrap_or(u64::MAX),
                    error,
                    ..o.entry.clone()
                }
            })
            .collect();
        NetworkReport {
            allowed,
            blocked: inner.blocked.clone(),
            allowed_omitted: inner.allowed_omitted,
            blocked_omitted: inner.blocked_omitted,
            buffer_peak_bytes: inner.buffer_peak_bytes,
        }
    }
}
