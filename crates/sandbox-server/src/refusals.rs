//! What a refused request may cost: refusals (401, Host/Origin, invalid or forbidden requests,
//! full queue) are charged to the client's address; past `[service] refusals_per_minute` (after
//! a burst of `refusal_burst`) that address's refusals are answered 429 `rate_limited` with
//! `Retry-After`, without an audit record or a log line. Requests that pass are never charged,
//! so a noisy neighbour behind the same address cannot stop a working client.
//!
//! Refusals answered 429 are counted in `sandbox_refusals_unrecorded_total{code}`, and the
//! next refusal that is recorded says in its audit message how many were left out since the
//! one before, so the audit log still accounts for every refusal in total.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::{header, Extensions, HeaderValue};
use axum::response::{IntoResponse, Response};
use sandbox_core::wire::Problem;
use sandbox_core::{ErrorCode, ExecutionRequest};
use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::problem::{self, ProblemResponse};
use crate::AppState;

/// Addresses the limiter may track before it forgets those whose bucket is full again.
const TRACKED_ADDRESSES_MAX: usize = 4096;

/// The client address a request came from (from the connection; absent in in-process tests,
/// where every request counts as `0.0.0.0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub IpAddr);

impl Peer {
    /// The peer of the connection that carried a request with these extensions.
    pub fn of(extensions: &Extensions) -> Self {
        Self(extensions.get::<ConnectInfo<SocketAddr>>().map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip()))
    }

    /// The key the limit is kept under: the address, or its /64 for IPv6 (one host usually
    /// holds a whole /64, so counting single addresses would be no limit).
    fn bucket(self) -> IpAddr {
        match self.0 {
            IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(Ipv6Addr::from(u128::from(ip) & !u128::from(u64::MAX))),
            },
            v4 => v4,
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The per-address limit of refusals.
pub struct Refusals {
    limiter: Option<DefaultKeyedRateLimiter<IpAddr>>,
    unrecorded: AtomicU64,
}

/// What to do with one refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charge {
    /// Answer it as usual and record it.
    Record,
    /// The address is over its limit: answer 429 `rate_limited` with this `Retry-After`, record nothing.
    Limited {
        /// Seconds until the address may be refused (and recorded) again, at least 1.
        retry_after_s: u64,
    },
}

impl Refusals {
    /// `per_minute` refusals per address sustained, after a burst of `burst` (0 for either: no limit).
    pub fn new(per_minute: u32, burst: u32) -> Self {
        let limiter = NonZeroU32::new(per_minute)
            .zip(NonZeroU32::new(burst))
            .map(|(rate, burst)| RateLimiter::keyed(Quota::per_minute(rate).allow_burst(burst)));
        Self { limiter, unrecorded: AtomicU64::new(0) }
    }

    /// Charges one refusal to `peer`'s address.
    pub fn charge(&self, peer: Peer) -> Charge {
        let Some(limiter) = &self.limiter else { return Charge::Record };
        if limiter.len() > TRACKED_ADDRESSES_MAX {
            // Addresses whose bucket has refilled carry no state worth keeping.
            limiter.retain_recent();
        }
        match limiter.check_key(&peer.bucket()) {
            Ok(()) => Charge::Record,
            Err(not_until) => {
                self.unrecorded.fetch_add(1, Ordering::Relaxed);
                let wait = not_until.wait_time_from(limiter.clock().now());
                Charge::Limited { retry_after_s: ceil_secs(wait).max(1) }
            }
        }
    }

    /// Refusals (of any address) answered 429 and not recorded since the last call; the
    /// count restarts at 0.
    pub fn take_unrecorded(&self) -> u64 {
        self.unrecorded.swap(0, Ordering::Relaxed)
    }
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// `detail` with a note of the refusals left out of the audit log before it, if any.
pub(crate) fn audit_message(detail: &str, unrecorded_before: u64) -> String {
    if unrecorded_before == 0 {
        detail.to_owned()
    } else {
        // First, so that truncating a long detail cannot cut the count off.
        format!("[{unrecorded_before} earlier refusals were rate-limited and not recorded] {detail}")
    }
}

/// Answers a refusal `problem` of a request from `peer`: charged to the address; within the
/// limit, recorded in the audit log when `audit` gives the caller, the request (if it was read)
/// and the message to keep, counted in metrics and answered with `problem`; past it, answered
/// 429 `rate_limited` and counted as unrecorded.
pub(crate) fn refuse(state: &AppState, peer: Peer, audit: Option<(&str, Option<&ExecutionRequest>, &str)>, problem: Problem) -> Response {
    let code = problem.code;
    match state.refusals.charge(peer) {
        Charge::Record => {
            if let Some((caller, request, message)) = audit {
                let message = audit_message(message, state.refusals.take_unrecorded());
                if let Err(e) = state.engine.recorder().rejected(caller, request, code.as_str(), &message) {
                    tracing::error!(error = %e, "could not record a refused request");
                }
            }
            state.metrics.rejected(code.as_str());
            ProblemResponse(problem).into_response()
        }
        Charge::Limited { retry_after_s } => {
            state.metrics.unrecorded(code.as_str());
            state.metrics.rejected(ErrorCode::RateLimited.as_str());
            let detail = format!("too many refused requests from {peer}; retry in {retry_after_s} s");
            let mut r = ProblemResponse(problem::new(ErrorCode::RateLimited, detail, None, None)).into_response();
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s));
            r
        }
    }
}

#[cfg(test)]
mod tests;
