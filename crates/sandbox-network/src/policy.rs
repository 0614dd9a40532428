//! The allowlist as the engine applies it: which names the sandbox's DNS answers, and which
//! (address, port) pairs a TCP connection may go to. Addresses become reachable by name only
//! after the sandbox's DNS handed them out for an allowed name (so a rule for `api.example.com`
//! never opens a shared CDN address for other names the sandbox did not ask for).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;
use std::sync::Mutex;

use sandbox_core::network::{canonical, Allowlist, Rule, Target};

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
    /// The sandbox's DNS already handed out [`HANDED_OUT_MAX`] addresses.
    TooManyAddresses,
    /// The host's resolver had no look-up free (this sandbox's, or the service's, all in
    /// flight): the answer is empty.
    DnsBusy,
}

impl Refusal {
    /// The report's `reason`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Refusal::NotAllowed => "not_allowed",
            Refusal::NameNotAllowed => "name_not_allowed",
            Refusal::InternalAddress => "internal_address",
            Refusal::ProtocolNotAllowed => "protocol_not_allowed",
            Refusal::TooManyAddresses => "too_many_addresses",
            Refusal::DnsBusy => "dns_busy",
        }
    }
}

/// Addresses one sandbox's DNS hands out at most (each opens the ports of its name's rules);
/// past that, answers for new addresses are empty and reported `too_many_addresses`.
pub(crate) const HANDED_OUT_MAX: usize = 1024;

/// One sandbox's allowlist plus what its DNS has handed out so far.
pub(crate) struct Policy {
    rules: Vec<Rule>,
    hosts: HashMap<String, IpAddr>,
    /// The host's own addresses (every interface), internal like the ranges of [`is_internal`].
    host: Vec<IpAddr>,
    handed_out: Mutex<HashMap<IpAddr, HandedOut>>,
}

/// Names one handed-out address is remembered for (several allowed names may share an
/// address); past that, its ports still open but a connection is not attributed to the name.
pub(crate) const NAMES_PER_ADDRESS_MAX: usize = 16;

/// An address the sandbox's DNS gave out: every port range the rules of its names allow, and
/// the names it was given out for, in the order asked, each with its own rules' port ranges.
#[derive(Default)]
struct HandedOut {
    ports: Vec<RangeInclusive<u16>>,
    names: Vec<(String, Vec<RangeInclusive<u16>>)>,
}

impl Policy {
    /// The policy of allowlist `a` on a host whose own addresses are `host` (see [`host_addresses`]).
    pub(crate) fn new(a: &Allowlist, host: Vec<IpAddr>) -> Self {
        Self {
            rules: a.allow.clone(),
            hosts: a.hosts.iter().map(|(k, v)| (k.to_ascii_lowercase(), *v)).collect(),
            host: host.into_iter().map(canonical).collect(),
            handed_out: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `ip` is internal: in a range of [`is_internal`] or one of the host's own addresses.
    pub(crate) fn internal(&self, ip: IpAddr) -> bool {
        is_internal(ip) || self.host.contains(&canonical(ip))
    }

    /// Whether IP/CIDR rule `r` reaches `ip`. A rule reaches an internal address only if it
    /// names it deliberately: a host's own address only by a single-address rule, any other
    /// internal address only by a rule lying wholly inside that internal range. So `0.0.0.0/0`
    /// or `0.0.0.0/1` opens public addresses, never 169.254.169.254, 10.0.0.0/8 or the host,
    /// while `10.1.2.0/24` opens that private network and `198.18.0.2/32` that one address.
    fn reaches(&self, r: &Rule, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        if !r.matches_ip(ip) {
            return false;
        }
        let Target::Cidr(net, len) = r.target else { return false };
        if self.host.contains(&ip) {
            return len == if net.is_ipv4() { 32 } else { 128 };
        }
        !is_internal(ip) || internal_range_of(net).is_some_and(|(_, range_len)| len >= range_len && internal_range_of(ip) == internal_range_of(net))
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
        addrs.into_iter().map(canonical).filter(|ip| trusted || !self.internal(*ip) || self.rules.iter().any(|r| self.reaches(r, *ip))).collect()
    }

    /// Records that the sandbox is told `ip` for `name`: connections to it on the ports of
    /// `name`'s rules are allowed from now on. An internal address that is not `trusted` (it
    /// came from a DNS answer, not the profile's `hosts`, and [`Policy::screen`] kept it because
    /// an IP/CIDR rule reaches it) opens only the ports that both a rule of `name` and a rule
    /// reaching it allow: a DNS answer for an allowed name (under a wildcard, say) must not open
    /// the host or a private network on ports its address rule never allowed (DNS rebinding,
    /// found by an attack review). Refused (`false`) for a new address once [`HANDED_OUT_MAX`]
    /// are out; each address keeps each port range once.
    pub(crate) fn hand_out(&self, name: &str, ip: IpAddr, trusted: bool) -> bool {
        let mut map = self.handed_out.lock().expect("policy lock");
        let ip = canonical(ip);
        if !map.contains_key(&ip) && map.len() >= HANDED_OUT_MAX {
            return false;
        }
        let mut ranges: Vec<RangeInclusive<u16>> = self.rules.iter().filter(|r| r.matches_name(name)).map(|r| r.ports.clone()).collect();
        if !trusted && self.internal(ip) {
            let reaching: Vec<&RangeInclusive<u16>> = self.rules.iter().filter(|r| self.reaches(r, ip)).map(|r| &r.ports).collect();
            ranges =
                ranges.iter().flat_map(|n| reaching.iter().map(move |r| *n.start().max(r.start())..=*n.end().min(r.end()))).filter(|r| !r.is_empty()).collect();
        }
        let entry = map.entry(ip).or_default();
        for r in &ranges {
            if !entry.ports.contains(r) {
                entry.ports.push(r.clone());
            }
        }
        if entry.names.len() < NAMES_PER_ADDRESS_MAX && !entry.names.iter().any(|(n, _)| n == name) {
            entry.names.push((name.to_owned(), ranges));
        }
        true
    }

    /// The allowed name a TCP connection to `ip`:`port` went through: the first name the
    /// sandbox's DNS gave out `ip` for whose rules allow `port`. `None` when no such name
    /// exists: the connection was made by address (an address rule let it through, or none
    /// did), and the report names only what the sandbox actually asked for.
    pub(crate) fn host_of(&self, ip: IpAddr, port: u16) -> Option<String> {
        let map = self.handed_out.lock().expect("policy lock");
        let entry = map.get(&canonical(ip))?;
        entry.names.iter().find(|(_, ports)| ports.iter().any(|p| p.contains(&port))).map(|(n, _)| n.clone())
    }

    /// Whether a TCP connection to `ip`:`port` is allowed: an IP/CIDR rule covers both, or the
    /// sandbox's DNS handed `ip` out for a name whose rules allow `port`.
    pub(crate) fn tcp_allowed(&self, ip: IpAddr, port: u16) -> bool {
        let ip = canonical(ip);
        if self.rules.iter().any(|r| r.allows_port(port) && self.reaches(r, ip)) {
            return true;
        }
        self.handed_out.lock().expect("policy lock").get(&ip).is_some_and(|h| h.ports.iter().any(|p| p.contains(&port)))
    }
}

/// The internal ranges (network, prefix length): never reached through a public name (DNS
/// rebinding) or a wide rule. IPv4: this network 0/8, RFC 1918, shared 100.64/10, loopback,
/// link-local 169.254/16 (the cloud metadata address), IETF protocol assignments 192.0.0/24,
/// documentation (TEST-NET-1..3), benchmarking 198.18/15, multicast and reserved 224/3 (with
/// broadcast), the 6to4 relay anycast 192.88.99/24 and Azure's WireServer 168.63.129.16 (the
/// platform's host agent endpoint, reachable from every Azure VM). IPv6: unspecified, loopback,
/// the forms that embed an IPv4 address (IPv4-compatible ::/96, IPv4-translated ::ffff:0:0/96,
/// NAT64 64:ff9b::/96 and local-use 64:ff9b:1::/48, 6to4 2002::/16: each could name an internal
/// IPv4 address), documentation, ULA fc00::/7, link-local, multicast. (IPv4-mapped ::ffff:0:0/96
/// addresses are compared as the IPv4 address they are.)
const INTERNAL: &[(IpAddr, u8)] = &[
    (IpAddr::V4(Ipv4Addr::new(0, 0, 0, 0)), 8),
    (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)), 8),
    (IpAddr::V4(Ipv4Addr::new(100, 64, 0, 0)), 10),
    (IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), 8),
    (IpAddr::V4(Ipv4Addr::new(169, 254, 0, 0)), 16),
    (IpAddr::V4(Ipv4Addr::new(172, 16, 0, 0)), 12),
    (IpAddr::V4(Ipv4Addr::new(192, 0, 0, 0)), 24),
    (IpAddr::V4(Ipv4Addr::new(192, 0, 2, 0)), 24),
    (IpAddr::V4(Ipv4Addr::new(192, 168, 0, 0)), 16),
    (IpAddr::V4(Ipv4Addr::new(198, 18, 0, 0)), 15),
    (IpAddr::V4(Ipv4Addr::new(198, 51, 100, 0)), 24),
    (IpAddr::V4(Ipv4Addr::new(203, 0, 113, 0)), 24),
    (IpAddr::V4(Ipv4Addr::new(224, 0, 0, 0)), 3),
    (IpAddr::V4(Ipv4Addr::new(192, 88, 99, 0)), 24),
    (IpAddr::V4(Ipv4Addr::new(168, 63, 129, 16)), 32),
    (IpAddr::V6(Ipv6Addr::UNSPECIFIED), 128),
    (IpAddr::V6(Ipv6Addr::LOCALHOST), 128),
    (IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0)), 96),
    (IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, 0, 0)), 96),
    (IpAddr::V6(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0)), 96),
    (IpAddr::V6(Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0)), 48),
    (IpAddr::V6(Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0)), 16),
    (IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0)), 32),
    (IpAddr::V6(Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0)), 7),
    (IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0)), 10),
    (IpAddr::V6(Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0)), 8),
];

/// The internal range of [`INTERNAL`] holding `ip`, if any.
fn internal_range_of(ip: IpAddr) -> Option<(IpAddr, u8)> {
    let ip = canonical(ip);
    INTERNAL.iter().copied().find(|(net, len)| match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(*len)).unwrap_or(0);
            u32::from(*n) & mask == u32::from(a) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(*len)).unwrap_or(0);
            u128::from(*n) & mask == u128::from(a) & mask
        }
        _ => false,
    })
}

/// Whether `ip` is in one of the [`INTERNAL`] ranges (the host's own addresses are added by
/// [`Policy::internal`]).
pub(crate) fn is_internal(ip: IpAddr) -> bool {
    internal_range_of(ip).is_some()
}

/// The host's own addresses, every interface (`getifaddrs`); empty if they cannot be listed
/// (then the internal ranges still apply), logged.
pub(crate) fn host_addresses() -> Vec<IpAddr> {
    match nix::ifaddrs::getifaddrs() {
        Ok(it) => it
            .filter_map(|i| {
                let a = i.address?;
                a.as_sockaddr_in().map(|s| IpAddr::V4(s.ip())).or_else(|| a.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())))
            })
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the host's addresses; only the internal ranges are screened");
            Vec::new()
        }
    }
}
