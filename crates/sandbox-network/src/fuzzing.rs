//! Entry points for the fuzz targets in `fuzz/` (`cargo fuzz`, feature `fuzzing`): the code that
//! parses bytes the sandbox controls, as host root, driven the way [`crate::Network`] drives it
//! but without a TUN, sockets or a resolver. Each takes arbitrary bytes and must neither panic
//! nor allocate without bound, whatever they hold.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::OnceLock;

use sandbox_core::network::{Allowlist, Rule};
use sandbox_runtime::tun::SANDBOX_IPV4;

use crate::dns::Resolver;
use crate::packet::{self, Verdict};
use crate::policy::Policy;
use crate::report::Reporter;

/// A policy with every kind of rule (name, wildcard, CIDR, address, IPv6, static host), so that
/// the filter's allowed and refused branches are both reachable.
fn policy() -> Policy {
    let rules = ["api.test:443", "*.cdn.test:443", "198.51.100.0/24:8000-8100", "10.9.0.7:80", "[2001:db8::1]:443"];
    Policy::new(
        &Allowlist {
            allow: rules.iter().map(|r| Rule::parse(r).expect("a valid rule")).collect(),
            hosts: [("api.test".to_owned(), IpAddr::V4(Ipv4Addr::new(10, 9, 0, 5)))].into(),
        },
        vec![IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))],
    )
}

/// One packet `data` from the sandbox through the filter ([`packet::classify`]), then what the
/// loop would do with the verdict that needs no socket: the RST for a connection nobody holds,
/// and for a DNS question the answer ([`dns`]) wrapped in its reply datagram.
pub fn packet(data: &[u8]) {
    let (policy, report) = (policy(), Reporter::default());
    match packet::classify(data, &policy, &report) {
        Verdict::Pass { .. } | Verdict::Connect { .. } => drop(packet::reset_for(data)),
        Verdict::Dns { query, client } => {
            if let Some(answer) = answer(&query, &policy, &report) {
                drop(packet::dns_reply(client, &answer));
            }
        }
        Verdict::Reply(_) | Verdict::Drop => {}
    }
    drop(report.snapshot());
}

/// One DNS message `data` from the sandbox to its resolver, answered (allowed names resolve to a
/// public and an internal address, which the answer must screen), and the reply datagram built.
pub fn dns(data: &[u8]) {
    let (policy, report) = (policy(), Reporter::default());
    if let Some(answer) = answer(data, &policy, &report) {
        drop(packet::dns_reply(SocketAddr::new(IpAddr::V4(SANDBOX_IPV4), 40000), &answer));
    }
    drop(report.snapshot());
}

fn answer(query: &[u8], policy: &Policy, report: &Reporter) -> Option<Vec<u8>> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let rt = RUNTIME.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a current-thread runtime can be built"));
    let resolver = Resolver::with_lookup(None, |_| Ok(vec![IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7)), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))]));
    rt.block_on(resolver.answer(query, policy, report))
}
