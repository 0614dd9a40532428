use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use sandbox_core::network::{Allowlist, Rule};
use sandbox_runtime::tun::{GATEWAY_IPV4, SANDBOX_IPV4, SANDBOX_IPV6};

use super::packet::{classify, Verdict};
use super::policy::Policy;
use super::report::Reporter;

fn policy() -> Policy {
    Policy::new(&Allowlist {
        allow: ["api.test:443", "*.cdn.test:443", "198.51.100.0/24:8000-8100", "10.9.0.7:80"].iter().map(|r| Rule::parse(r).unwrap()).collect(),
        hosts: [("api.test".to_owned(), "10.9.0.5".parse().unwrap())].into(),
    })
}

fn syn(dst: Ipv4Addr, port: u16) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ipv4(SANDBOX_IPV4.octets(), dst.octets(), 64).tcp(40000, port, 1000, 64240).syn().write(&mut v, &[]).unwrap();
    v
}

fn udp(dst: Ipv4Addr, port: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ipv4(SANDBOX_IPV4.octets(), dst.octets(), 64).udp(40000, port).write(&mut v, payload).unwrap();
    v
}

#[track_caller]
fn check(pkt: &[u8], p: &Policy, want_pass: bool, want_reported: Option<&str>) -> Verdict {
    let r = Reporter::default();
    let v = classify(pkt, p, &r);
    assert_eq!(matches!(v, Verdict::Pass | Verdict::Connect { .. }), want_pass, "{v:?}");
    let report = r.snapshot();
    assert_eq!(report.blocked.first().map(|b| b.reason.as_str()), want_reported, "{report:?}");
    v
}

#[test]
fn tcp_passes_only_to_allowed_addresses_and_ports() {
    let p = policy();
    check(&syn(Ipv4Addr::new(198, 51, 100, 9), 8080), &p, true, None);
    check(&syn(Ipv4Addr::new(10, 9, 0, 7), 80), &p, true, None);
    let refused = check(&syn(Ipv4Addr::new(198, 51, 100, 9), 22), &p, false, Some("not_allowed"));
    // The refusal is a RST|ACK from the destination acknowledging the SYN.
    let Verdict::Reply(rst) = refused else { panic!("no reply") };
    let sliced = SlicedPacket::from_ip(&rst).unwrap();
    let Some(TransportSlice::Tcp(t)) = sliced.transport else { panic!("not TCP") };
    assert!(t.rst() && t.ack() && !t.syn());
    assert_eq!((t.source_port(), t.destination_port(), t.acknowledgment_number()), (22, 40000, 1001));
    // The metadata address and the engine's own address are just addresses nobody allowed.
    check(&syn(Ipv4Addr::new(169, 254, 169, 254), 80), &p, false, Some("not_allowed"));
    check(&syn(GATEWAY_IPV4, 53), &p, false, Some("not_allowed"));
}

#[test]
fn names_open_addresses_only_once_resolved_and_only_on_their_ports() {
    let p = policy();
    let cdn = Ipv4Addr::new(203, 0, 113, 10);
    check(&syn(cdn, 443), &p, false, Some("not_allowed"));
    p.hand_out("img.cdn.test", IpAddr::V4(cdn));
    check(&syn(cdn, 443), &p, true, None);
    check(&syn(cdn, 80), &p, false, Some("not_allowed"));
    assert_eq!(p.host_of(IpAddr::V4(cdn)).as_deref(), Some("img.cdn.test"));
}

#[test]
fn udp_goes_to_dns_or_is_refused_and_link_chatter_is_ignored() {
    let p = policy();
    let v = check(&udp(GATEWAY_IPV4, 53, b"q"), &p, false, None);
    assert!(matches!(v, Verdict::Dns { ref query, .. } if query == b"q"), "{v:?}");
    let v = check(&udp(Ipv4Addr::new(8, 8, 8, 8), 53, b"q"), &p, false, Some("protocol_not_allowed"));
    assert!(matches!(v, Verdict::Reply(ref icmp) if icmp[9] == 1), "an ICMP unreachable: {v:?}");
    let mut rs = Vec::new();
    PacketBuilder::ipv6(SANDBOX_IPV6.octets(), "ff02::2".parse::<Ipv6Addr>().unwrap().octets(), 255)
        .icmpv6(etherparse::Icmpv6Type::Unknown { type_u8: 133, code_u8: 0, bytes5to8: [0; 4] })
        .write(&mut rs, &[])
        .unwrap();
    assert_eq!(check(&rs, &p, false, None), Verdict::Drop);
    assert_eq!(check(b"not a packet", &p, false, None), Verdict::Drop);
}

#[test]
fn internal_addresses_are_screened_unless_a_rule_names_them() {
    let p = policy();
    let ips = |s: &[&str]| s.iter().map(|a| a.parse::<IpAddr>().unwrap()).collect::<Vec<_>>();
    let all = ips(&["127.0.0.1", "169.254.169.254", "10.1.2.3", "192.168.1.1", "100.64.0.1", "10.9.0.7", "93.184.216.34"]);
    assert_eq!(p.screen(all.clone(), false), ips(&["10.9.0.7", "93.184.216.34"]));
    assert_eq!(p.screen(all.clone(), true), all, "the profile's own hosts are trusted");
}

fn question(name: &str, t: RecordType) -> Vec<u8> {
    let mut m = Message::query();
    m.add_query(hickory_proto::op::Query::query(Name::from_ascii(name).unwrap(), t));
    m.to_vec().unwrap()
}

#[tokio::test]
async fn dns_answers_allowed_names_and_nxdomain_for_the_rest() {
    let p = policy();
    let r = Reporter::default();
    let answer = |name: &str, t| {
        let q = question(name, t);
        let (p, r) = (&p, &r);
        async move { Message::from_vec(&super::dns::answer(&q, p, r, None).await.unwrap()).unwrap() }
    };
    let a = answer("API.test.", RecordType::A).await;
    assert_eq!(a.metadata.response_code, ResponseCode::NoError);
    assert!(matches!(a.answers.as_slice(), [rec] if rec.data == RData::A(hickory_proto::rr::rdata::A("10.9.0.5".parse().unwrap()))), "{a:?}");
    assert!(p.tcp_allowed("10.9.0.5".parse().unwrap(), 443), "the answer opened the address");
    let aaaa = answer("api.test", RecordType::AAAA).await;
    assert_eq!((aaaa.metadata.response_code, aaaa.answers.len()), (ResponseCode::NoError, 0));
    for name in ["evil.test", "x.api.test", "cdn.test"] {
        let m = answer(name, RecordType::A).await;
        assert_eq!(m.metadata.response_code, ResponseCode::NXDomain, "{name}");
    }
    let blocked: Vec<_> = r.snapshot().blocked.into_iter().map(|b| (b.host.unwrap_or_default(), b.reason)).collect();
    assert_eq!(blocked.len(), 3, "{blocked:?}");
    assert!(blocked.iter().all(|(_, reason)| reason == "name_not_allowed"));
}
