//! What a refused request may cost: refusals (401, Host/Origin, invalid or forbidden requests,
//! full queue) are charged to the client's address; past `[service] refusals_per_minute` (after
//! a burst of `refusal_burst`) that address's refusals are answered 429 `rate_limited` with
//! `Retry-After`, without an audit record or a log line. Requests that pass are never charged,
//! so a noisy neighbour behind the same address cannot stop a working client.
//!
//! Refusals made before a caller is known (401 `unauthorized`, 421 `host_not_allowed`, 403
//! `origin_not_allowed`) are also charged to one budget shared by every address,
//! `[service] unauthenticated_refusals_per_minute`: an address is cheap to change (any local
//! user may bind all of 127.0.0.0/8, an IPv6 /48 holds 65,536 /64s), and an attack review
//! recorded ~810 unauthenticated refusals per second (~2 GB of audit log an hour) by rotating
//! them. Loopback addresses count as one. A key's refusals are not charged to it, so a flood
//! of unauthenticated requests does not turn a client's 400 into 429.
//!
//! Refusals answered 429 are counted in `sandbox_refusals_unrecorded_total{code}`, and the
//! next refusal that is recorded says in its audit message how many were left out since the
//! one before, so the audit log still accounts for every refusal in total.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::Extensions;
use axum::response::Response;
use governor::clock::Clock;
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use sandbox_core::wire::Problem;
pub use sandbox_engine::service::Charge;
use sandbox_engine::service::{Audit, Refusal};

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
    /// holds a whole /64, so counting single addresses would be no limit), and one for every
    /// loopback address (127.0.0.0/8 and ::1: any local user may bind any of them).
    fn bucket(self) -> IpAddr {
        let ip = match self.0 {
            IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None if ip.is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
                None => IpAddr::V6(Ipv6Addr::from(u128::from(ip) & !u128::from(u64::MAX))),
            },
            v4 => v4,
        };
        if ip.is_loopback() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            ip
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The limits of refusals: per address, and for refusals before authentication, in all.
pub struct Refusals {
    limiter: Option<DefaultKeyedRateLimiter<IpAddr>>,
    unauthenticated: Option<DefaultDirectRateLimiter>,
    unrecorded: AtomicU64,
}

impl Refusals {
    /// `per_minute` refusals per address sustained, after a burst of `burst` (0 for either: no
    /// limit); no limit in all.
    pub fn new(per_minute: u32, burst: u32) -> Self {
        let limiter =
            NonZeroU32::new(per_minute).zip(NonZeroU32::new(burst)).map(|(rate, burst)| RateLimiter::keyed(Quota::per_minute(rate).allow_burst(burst)));
        Self { limiter, unauthenticated: None, unrecorded: AtomicU64::new(0) }
    }

    /// These limits, and at most `per_minute` refusals before authentication from all
    /// addresses together, in bursts of as many (0: no such limit).
    #[must_use]
    pub fn with_unauthenticated(mut self, per_minute: u32) -> Self {
        self.unauthenticated = NonZeroU32::new(per_minute).map(|rate| RateLimiter::direct(Quota::per_minute(rate)));
        self
    }

    /// Charges one refusal of `code` to `peer`'s address, and, for a refusal before
    /// authentication, to the budget of all addresses. A refusal to record carries the count
    /// of those left out since the previous one (and the count restarts at 0).
    pub fn charge(&self, peer: Peer, code: sandbox_core::ErrorCode) -> Charge {
        use sandbox_core::ErrorCode::{HostNotAllowed, OriginNotAllowed, Unauthorized};
        let limited = |wait: Duration| {
            self.unrecorded.fetch_add(1, Ordering::Relaxed);
            Charge::Limited { retry_after_s: ceil_secs(wait).max(1) }
        };
        if let Some(limiter) = &self.limiter {
            if limiter.len() > TRACKED_ADDRESSES_MAX {
                // Addresses whose bucket has refilled carry no state worth keeping.
                limiter.retain_recent();
            }
            if let Err(not_until) = limiter.check_key(&peer.bucket()) {
                return limited(not_until.wait_time_from(limiter.clock().now()));
            }
        }
        if let (Some(all), true) = (&self.unauthenticated, matches!(code, Unauthorized | HostNotAllowed | OriginNotAllowed)) {
            if let Err(not_until) = all.check() {
                return limited(not_until.wait_time_from(all.clock().now()));
            }
        }
        Charge::Record { unrecorded_before: self.take_unrecorded() }
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

/// Answers a refusal `problem` of a request from `peer` made by the HTTP door itself (before a
/// caller or a request could be handed to the service: Host/Origin, the API key, an unreadable
/// body): charged, recorded as `audit` says and counted by the service
/// ([`sandbox_engine::Service::refuse_as`]), answered with `problem` or 429 `rate_limited`.
pub(crate) fn refuse(state: &AppState, peer: Peer, audit: Option<Audit<'_>>, problem: Problem) -> Response {
    let refusal = Refusal::new(problem.code, problem.detail.clone(), problem.field.clone());
    let refusal = state.service.refuse_as(Some(peer.0), audit, refusal);
    crate::problem::of_refusal(refusal)
}

#[cfg(test)]
mod tests;
