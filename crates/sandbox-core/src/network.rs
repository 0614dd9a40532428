//! Network policy vocabulary: a profile's [`Network`] (`none` or an [`Allowlist`] of [`Rule`]s),
//! the service-wide [`NetworkConfig`] (`[network]`), and the per-execution [`NetworkReport`].
//! Parsing only; the engine enforces (ARCHITECTURE.md "Network").

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use utoipa::ToSchema;

/// A profile's network policy. TOML: `network = "none"` (the default), or a table
/// `[profiles.NAME.network]` with `allow = ["api.example.com:443", ...]` and optional
/// `hosts = { "api.test" = "10.99.0.2" }`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Network {
    /// An empty network namespace: loopback only.
    #[default]
    None,
    /// Only the listed endpoints, through the engine's userspace network.
    Allowlist(Allowlist),
}

impl Network {
    /// `none` or `allowlist`, as the result's `enforcement.network` and the profile view say.
    pub fn mode(&self) -> crate::wire::NetworkMode {
        match self {
            Network::None => crate::wire::NetworkMode::None,
            Network::Allowlist(_) => crate::wire::NetworkMode::Allowlist,
        }
    }
}

/// The endpoints an allowlist profile may reach.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allowlist {
    /// Rules, each `TARGET:PORTS`: TARGET is a host name (`api.example.com`), a wildcard
    /// (`*.example.com`: any name below example.com, not example.com itself), an IP address
    /// (`10.0.0.5`, `[2001:db8::1]`) or a CIDR range (`10.0.0.0/8`); PORTS is a port (`443`) or
    /// an inclusive range (`8000-8100`).
    pub allow: Vec<Rule>,
    /// Static names (like /etc/hosts or docker's `extra_hosts`): answered by the sandbox's DNS
    /// without asking any resolver. A name must also be allowed by a rule to resolve; its
    /// address is trusted (the administrator wrote it), even if internal.
    #[serde(default)]
    pub hosts: BTreeMap<String, IpAddr>,
}

/// Service-wide network settings (`[network]`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkConfig {
    /// DNS server (`IP:PORT`, UDP) that resolves allowed names for allowlist sandboxes.
    /// Unset: the host's resolver configuration (`/etc/hosts`, then `/etc/resolv.conf`'s name
    /// servers and options; no NSS modules, no search list). Only names a rule allows are ever
    /// asked, fully qualified.
    pub upstream_dns: Option<SocketAddr>,
}

/// What a rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Exactly this name (lowercase, no trailing dot).
    Name(String),
    /// Any name strictly below this domain (lowercase, no trailing dot).
    Wildcard(String),
    /// An address range: network address and prefix length (a single address is /32 or /128).
    Cidr(IpAddr, u8),
}

/// One allowlist rule, parsed and validated: a [`Target`] and an inclusive port range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// What it matches.
    pub target: Target,
    /// Ports allowed, inclusive, never containing 0.
    pub ports: RangeInclusive<u16>,
    text: String,
}

impl Rule {
    /// Parses `TARGET:PORTS` (see [`Allowlist::allow`]).
    /// Errors: the reason, as text (bad name, bad address or prefix, missing or bad port, empty range).
    pub fn parse(s: &str) -> Result<Rule, String> {
        let (target, ports) = s.rsplit_once(':').ok_or_else(|| format!("{s:?} has no port: write TARGET:PORT or TARGET:LOW-HIGH"))?;
        let ports = parse_ports(ports).map_err(|m| format!("{s:?}: {m}"))?;
        let target = parse_target(target).map_err(|m| format!("{s:?}: {m}"))?;
        if let Target::Cidr(ip, len) = target {
            if ip.is_loopback() && (ip.is_ipv6() || len >= 8) {
                return Err(format!("{s:?}: loopback is the sandbox's own (its network namespace), never the host's; give the service a non-loopback address"));
            }
        }
        Ok(Rule { target, ports, text: s.to_owned() })
    }

    /// Whether the rule allows `port`.
    pub fn allows_port(&self, port: u16) -> bool {
        self.ports.contains(&port)
    }

    /// Whether the rule's name or wildcard covers `name` (lowercase, no trailing dot).
    pub fn matches_name(&self, name: &str) -> bool {
        match &self.target {
            Target::Name(n) => n == name,
            Target::Wildcard(d) => name.len() > d.len() + 1 && name.ends_with(d.as_str()) && name.as_bytes()[name.len() - d.len() - 1] == b'.',
            Target::Cidr(..) => false,
        }
    }

    /// Whether the rule's address range covers `ip` (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn matches_ip(&self, ip: IpAddr) -> bool {
        let Target::Cidr(net, len) = self.target else { return false };
        match (net, canonical(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// `ip` with an IPv4-mapped IPv6 address turned into IPv4.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn parse_ports(s: &str) -> Result<RangeInclusive<u16>, String> {
    let port = |p: &str| p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| format!("port {p:?} is not a number in 1..=65535"));
    let (lo, hi) = match s.split_once('-') {
        Some((lo, hi)) => (port(lo)?, port(hi)?),
        None => (port(s)?, port(s)?),
    };
    if lo > hi {
        return Err(format!("port range {lo}-{hi} is empty"));
    }
    Ok(lo..=hi)
}

fn parse_target(t: &str) -> Result<Target, String> {
    if let Some(inner) = t.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        let ip: IpAddr = inner.parse().map_err(|_| format!("{inner:?} is not an IPv6 address"))?;
        return Ok(Target::Cidr(ip, 128));
    }
    if let Some((addr, len)) = t.split_once('/') {
        let ip: IpAddr = addr.parse().map_err(|_| format!("{addr:?} is not an IP address"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let len: u8 = len.parse().ok().filter(|l| *l <= max).ok_or_else(|| format!("prefix length {len:?} is not in 0..={max}"))?;
        if network_of(ip, len) != ip {
            return Err(format!("{t} has host bits set; write {}/{len}", network_of(ip, len)));
        }
        return Ok(Target::Cidr(ip, len));
    }
    if t.contains(':') {
        return Err("IPv6 addresses are written in brackets: [2001:db8::1]:443".into());
    }
    if let Ok(ip) = t.parse::<IpAddr>() {
        return Ok(Target::Cidr(ip, 32));
    }
    if let Some(domain) = t.strip_prefix("*.") {
        validate_name(domain)?;
        return Ok(Target::Wildcard(domain.to_ascii_lowercase()));
    }
    validate_name(t)?;
    Ok(Target::Name(t.to_ascii_lowercase()))
}

fn network_of(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => IpAddr::V4((u32::from(a) & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)).into()),
        IpAddr::V6(a) => IpAddr::V6((u128::from(a) & u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)).into()),
    }
}

/// Checks a DNS host name: labels of letters, digits and '-' (not at either end), 1-63 bytes
/// each, at most 253 bytes in all; no wildcard, no trailing dot.
/// Errors: the reason, as text.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 253 {
        return Err(format!("host name {name:?} must be 1..=253 bytes"));
    }
    for label in name.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(format!("host name {name:?} has an invalid label {label:?} (letters, digits, '-'; wildcards only as a leading '*.')"));
        }
    }
    Ok(())
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for Rule {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Rule::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl Serialize for Network {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Network::None => s.serialize_str("none"),
            Network::Allowlist(a) => a.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Network;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"none\" or a table with `allow` (and optionally `hosts`)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Network, E> {
                match v {
                    "none" => Ok(Network::None),
                    other => Err(E::custom(format!("unknown network {other:?}: use \"none\" or a table with `allow = [\"host:port\", ...]`"))),
                }
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Network, A::Error> {
                Allowlist::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Network::Allowlist)
            }
        }
        d.deserialize_any(V)
    }
}

impl Allowlist {
    /// Checks what serde cannot: `hosts` names are valid and each is allowed by some rule.
    /// Errors: (field below `network`, reason).
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.allow.is_empty() {
            return Err(("allow".into(), "an allowlist needs at least one rule (or use network = \"none\")".into()));
        }
        if self.allow.len() > 1024 {
            return Err(("allow".into(), format!("{} rules; at most 1024", self.allow.len())));
        }
        for name in self.hosts.keys() {
            validate_name(name).map_err(|m| (format!("hosts.{name}"), m))?;
            let lower = name.to_ascii_lowercase();
            if !self.allow.iter().any(|r| r.matches_name(&lower)) {
                return Err((
                    format!("hosts.{name}"),
                    format!("no rule in `allow` names this host, so it could never be reached: add one such as \"{name}:PORT\" (`hosts` only answers DNS)"),
                ));
            }
        }
        Ok(())
    }
}

/// Most entries kept in each list of a [`NetworkReport`]; the rest are only counted.
pub const REPORT_MAX_ENTRIES: usize = 256;

/// What an allowlist sandbox tried to reach (result field `network`, also in the audit record).
/// Lists are in time order and capped at [`REPORT_MAX_ENTRIES`] entries each.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkReport {
    /// Connections let through.
    pub allowed: Vec<AllowedConnection>,
    /// Attempts refused (connections, datagrams, DNS questions).
    pub blocked: Vec<BlockedAttempt>,
    /// Allowed connections beyond the cap, counted but not listed.
    pub allowed_omitted: u64,
    /// Blocked attempts beyond the cap, counted but not listed.
    pub blocked_omitted: u64,
    /// Most memory the engine's userspace TCP buffers held at once for this execution's
    /// connections, in bytes (capped per execution at 16 MiB); 0 in records made before it.
    #[serde(default)]
    pub buffer_peak_bytes: u64,
}

/// One allowed connection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllowedConnection {
    /// The allowed name the connection went through: the sandbox's DNS gave out this address
    /// for it and its rules allow this port. Absent when the connection was made by address (an
    /// address rule let it through).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Destination IP address.
    pub address: String,
    /// Destination port.
    pub port: u16,
    /// `tcp`.
    pub protocol: String,
    /// Bytes the sandbox sent to the destination.
    pub bytes_sent: u64,
    /// Bytes the destination sent to the sandbox.
    pub bytes_received: u64,
    /// When the sandbox opened it (RFC 3339, UTC).
    pub started_at: String,
    /// How long it lasted, in ms.
    pub duration_ms: u64,
    /// Why it ended abnormally (e.g. the destination refused the connection), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One refused attempt.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockedAttempt {
    /// The name the sandbox asked for: set on DNS entries (the question), and on
    /// `too_many_connections` when an allowed name let the connection through. Absent on
    /// other refused connections: no allowed name let them through, and a name the program
    /// may not have used is never guessed from the address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Destination IP address (for a DNS question, the sandbox's resolver).
    pub address: String,
    /// Destination port (absent for ICMP and other protocols without ports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// `tcp`, `udp`, `icmp`, `dns` or `ip:N` (another IP protocol number).
    pub protocol: String,
    /// When (RFC 3339, UTC).
    pub at: String,
    /// Stable reason: `not_allowed` (no rule covers address and port), `name_not_allowed` (DNS
    /// question for a name no rule covers), `internal_address` (an allowed name resolved to a
    /// loopback, link-local or private address), `protocol_not_allowed` (only TCP and DNS pass),
    /// `too_many_connections` (more than 256 allowed connections open at once), `too_many_addresses`
    /// (the sandbox's DNS already handed out 1024 addresses).
    pub reason: String,
}

#[cfg(test)]
mod tests;
