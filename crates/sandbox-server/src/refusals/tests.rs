use std::net::IpAddr;

use sandbox_core::ErrorCode;

use super::{Charge, Peer, Refusals};

const RECORD: Charge = Charge::Record { unrecorded_before: 0 };

fn peer(s: &str) -> Peer {
    Peer(s.parse::<IpAddr>().unwrap())
}

#[test]
fn a_burst_then_limited_per_address() {
    let r = Refusals::new(1, 3);
    for _ in 0..3 {
        assert_eq!(r.charge(peer("192.0.2.1"), ErrorCode::Unauthorized), RECORD);
    }
    let Charge::Limited { retry_after_s } = r.charge(peer("192.0.2.1"), ErrorCode::Unauthorized) else { panic!("the fourth refusal is limited") };
    assert!((1..=60).contains(&retry_after_s), "{retry_after_s}");
    // Another address has its own budget; its recorded refusal says one was left out.
    assert_eq!(r.charge(peer("192.0.2.2"), ErrorCode::Unauthorized), Charge::Record { unrecorded_before: 1 });
    assert_eq!(r.take_unrecorded(), 0);
}

#[test]
fn ipv6_counts_per_64() {
    let r = Refusals::new(1, 1);
    assert_eq!(r.charge(peer("2001:db8::1"), ErrorCode::Unauthorized), RECORD);
    assert!(matches!(r.charge(peer("2001:db8::ffff:2"), ErrorCode::Unauthorized), Charge::Limited { .. }), "same /64");
    assert_eq!(r.charge(peer("2001:db8:0:1::1"), ErrorCode::Unauthorized), Charge::Record { unrecorded_before: 1 }, "another /64");
}

#[test]
fn zero_disables_the_limit() {
    let r = Refusals::new(0, 0);
    for _ in 0..1000 {
        assert_eq!(r.charge(peer("192.0.2.1"), ErrorCode::Unauthorized), RECORD);
    }
}

/// Any local user may bind any loopback address: all of them are one client.
#[test]
fn loopback_addresses_count_as_one() {
    let r = Refusals::new(1, 2);
    assert_eq!(r.charge(peer("127.0.0.1"), ErrorCode::Unauthorized), RECORD);
    assert_eq!(r.charge(peer("127.20.3.4"), ErrorCode::InvalidRequest), RECORD);
    assert!(matches!(r.charge(peer("::1"), ErrorCode::Unauthorized), Charge::Limited { .. }), "::1 is the same client");
    assert!(matches!(r.charge(peer("::ffff:127.9.9.9"), ErrorCode::Unauthorized), Charge::Limited { .. }), "a mapped loopback too");
}

/// Refusals before authentication share one budget over every address (rotating addresses
/// filled the audit log past the per-address limit); a key's refusals do not use it.
#[test]
fn unauthenticated_refusals_share_one_budget() {
    let r = Refusals::new(60, 60).with_unauthenticated(3);
    for i in 1..=3 {
        assert_eq!(r.charge(peer(&format!("192.0.2.{i}")), ErrorCode::Unauthorized), RECORD);
    }
    assert!(matches!(r.charge(peer("192.0.2.4"), ErrorCode::HostNotAllowed), Charge::Limited { .. }), "a fresh address past the shared budget");
    assert!(matches!(r.charge(peer("2001:db8:1::1"), ErrorCode::OriginNotAllowed), Charge::Limited { .. }));
    assert_eq!(r.charge(peer("192.0.2.5"), ErrorCode::InvalidRequest), Charge::Record { unrecorded_before: 2 }, "an authenticated refusal");
}
