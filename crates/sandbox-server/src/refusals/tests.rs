use std::net::IpAddr;

use super::{Charge, Peer, Refusals};

const RECORD: Charge = Charge::Record { unrecorded_before: 0 };

fn peer(s: &str) -> Peer {
    Peer(s.parse::<IpAddr>().unwrap())
}

#[test]
fn a_burst_then_limited_per_address() {
    let r = Refusals::new(1, 3);
    for _ in 0..3 {
        assert_eq!(r.charge(peer("192.0.2.1")), RECORD);
    }
    let Charge::Limited { retry_after_s } = r.charge(peer("192.0.2.1")) else { panic!("the fourth refusal is limited") };
    assert!((1..=60).contains(&retry_after_s), "{retry_after_s}");
    // Another address has its own budget; its recorded refusal says one was left out.
    assert_eq!(r.charge(peer("192.0.2.2")), Charge::Record { unrecorded_before: 1 });
    assert_eq!(r.take_unrecorded(), 0);
}

#[test]
fn ipv6_counts_per_64() {
    let r = Refusals::new(1, 1);
    assert_eq!(r.charge(peer("2001:db8::1")), RECORD);
    assert!(matches!(r.charge(peer("2001:db8::ffff:2")), Charge::Limited { .. }), "same /64");
    assert_eq!(r.charge(peer("2001:db8:0:1::1")), Charge::Record { unrecorded_before: 1 }, "another /64");
}

#[test]
fn zero_disables_the_limit() {
    let r = Refusals::new(0, 0);
    for _ in 0..1000 {
        assert_eq!(r.charge(peer("192.0.2.1")), RECORD);
    }
}
