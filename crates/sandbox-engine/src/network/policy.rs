//! The allowlist as the engine applies it: which names the sandbox's DNS answers, and which
//! (address, port) pairs a TCP connection may go to. Addresses become reachable by name only
//! after the sandbox's DNS handed them out for an allowed name (so a rule for `api.example.com`
//! never opens a shared CDN address for other names the sandbox did not ask for).

use std::collections::HashMap;
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::sync::Mutex;

use sandbox_core::network::{canonical, Allowlist, Rule};

/// Why a connection or question was refused; the strings are the report's stable `reason`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No rule covers the address and port.
    NotAllowed,
    /// A DNS question for a name no rule covers.
    NameNotAllowed,
    /// An allowed name resolved only to loopback, link-local, private or other internal addresses.
    InternalAddress,
    /// Only TCP (and UDP to the sandbox's DNS) passes.
    ProtocolNotAllowed,
}

impl Refusal {
    /// The report's `reason`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Refusal::NotAllowed => "not_allowed",
            Refusal::NameNotAllowed => "name_not_allowed",
            Refusal::InternalAddress => "internal_address",
            Refusal::ProtocolNotAllowed => "protocol_not_allowed",
        }
    }
}

/// One sandbox's allowlist plus what its DNS has handed out so far.
pub(crate) struct Policy {
    rules: Vec<Rule>,
    hosts: HashMap<String, IpAddr>,
    handed_out: Mutex<HashMap<IpAddr, HandedOut>>,
}

/// An address the sandbox's DNS gave out: the name it was for, and the ports the name's rules allow.
type HandedOut = (String, Vec<RangeInclusive<u16>>);

impl Policy {
    pub(crate) fn new(a: &Allowlist) -> Self {
        Self {
            rules: a.allow.clone(),
            hosts: a.hosts.iter().map(|(k, v)| (k.to_ascii_lowercase(), *v)).collect(),
            handed_out: Mutex::new(HashMap::new()),
        }
    }

    /// Whether some rule covers `name` (lowercase, no trailing dot).
    pub(crate) fn name_allowed(&self, name: &str) -> bool {
        self.rules.iter().any(|r| r.matches_name(name))
    }

    /// The administrator's static address for `name`, if the profile's `hosts` has one.
    pub(crate) fn static_host(&self, name: &str) -> Option<IpAddr> {
        self.hosts.get(name).copied()
    }

    /// Keeps the addresses the sandbox may be told for `name`: an internal address only if an
    /// IP/CIDR rule covers it (DNS rebinding: a public name must not lead to the host's or the
    /// cloud's internal services). `trusted` addresses (the profile's own `hosts`) are kept.
    pub(crate) fn screen(&self, addrs: Vec<IpAddr>, trusted: bool) -> Vec<IpAddr> {
        addrs.into_iter().map(canonical).filter(|ip| trusted || !is_internal(*ip) || self.rules.iter().any(|r| r.matches_ip(*ip))).collect()
    }

    /// Records that the sandbox was told `ip` for `name`: connections to it on the ports of
    /// `name`'s rules are allowed from now on.
    pub(crate) fn hand_out(&self, name: &str, ip: IpAddr) {
        let ports: Vec<_> = self.rules.iter().filter(|r| r.matches_name(name)).map(|r| r.ports.clone()).collect();
        let mut map = self.handed_out.lock().expect("policy lock");
        let entry = map.entry(canonical(ip)).or_insert_with(|| (name.to_owned(), Vec::new()));
        entry.0 = name.to_owned();
        entry.1.extend(ports);
    }

    /// The name the sandbox resolved to `ip`, if any.
    pub(crate) fn host_of(&self, ip: IpAddr) -> Option<String> {
        self.handed_out.lock().expect("policy lock").get(&canonical(ip)).map(|(n, _)| n.clone())
    }

    /// Whether a TCP connection to `ip`:`port` is allowed: an IP/CIDR rule covers both, or the
    /// sandbox's DNS handed `ip` out for a name whose rules allow `port`.
    pub(crate) fn tcp_allowed(&self, ip: IpAddr, port: u16) -> bool {
        let ip = canonical(ip);
        if self.rules.iter().any(|r| r.matches_ip(ip) && r.allows_port(port)) {
            return true;
        }
        self.handed_out.lock().expect("policy lock").get(&ip).is_some_and(|(_, ports)| ports.iter().any(|p| p.contains(&port)))
    }
}

/// Loopback, link-local (incl. the 169.254.169.254 metadata address), private (RFC 1918, ULA),
/// shared (100.64/10), unspecified, multicast, broadcast and documentation addresses.
pub(crate) fn is_internal(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(a) => {
            let o = a.octets();
            a.is_loopback()
                || a.is_link_local()
                || a.is_private()
                || a.is_unspecified()
                || a.is_multicast()
                || a.is_broadcast()
                || a.is_documentation()
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
                || o[0] == 0
                || o[0] >= 240
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            a.is_loopback() || a.is_unspecified() || a.is_multicast() || (s[0] & 0xfe00) == 0xfc00 || (s[0] & 0xffc0) == 0xfe80
        }
    }
}
