//! The sandbox's resolver at the gateway address, port 53: answers A questions for names a rule
//! allows (from the profile's `hosts`, the configured upstream server, or the host's resolver),
//! NXDOMAIN for every other name, and never passes a question for a disallowed name on. Only
//! the question's name and type leave, re-encoded in a fresh query (no client bytes are
//! forwarded), so nothing can be tunnelled through the upstream server under a disallowed name.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{rdata::A, Name, RData, Record, RecordType};
use sandbox_core::network::BlockedAttempt;
use sandbox_runtime::tun::GATEWAY_IPV4;
use tokio::sync::Semaphore;

use super::policy::{Policy, Refusal};
use super::report::{now, Reporter};

/// TTL of the answers, in seconds.
const TTL_S: u32 = 60;
/// How long an upstream lookup may take.
const UPSTREAM_PATIENCE: Duration = Duration::from_secs(3);
/// Host-resolver look-ups (`getaddrinfo` on a blocking thread, which a timeout cannot stop)
/// running at once for one sandbox, counted until the call returns; a question past that gets an
/// empty answer at once.
pub(crate) const HOST_LOOKUPS_PER_SANDBOX: usize = 4;
/// The same for the whole process, so that sandboxes together cannot fill tokio's blocking pool.
pub(crate) const HOST_LOOKUPS_MAX: usize = 32;
static HOST_LOOKUPS: Semaphore = Semaphore::const_new(HOST_LOOKUPS_MAX);

/// No host-resolver look-up was free (see [`HOST_LOOKUPS_PER_SANDBOX`], [`HOST_LOOKUPS_MAX`]).
#[derive(Debug)]
pub(crate) struct Busy;

/// A blocking look-up of a name's addresses (the host's resolver, or a test's stand-in).
pub(crate) type Lookup = fn(&str) -> io::Result<Vec<IpAddr>>;

/// One sandbox's way to resolve allowed names.
#[derive(Clone)]
pub(crate) struct Resolver {
    upstream: Option<SocketAddr>,
    lookup: Lookup,
    slots: Arc<Semaphore>,
}

impl Resolver {
    /// Asks `upstream` (UDP `IP:PORT`) or, when `None`, the host's resolver.
    pub(crate) fn new(upstream: Option<SocketAddr>) -> Self {
        Self::with_lookup(upstream, |name| Ok((name, 0).to_socket_addrs()?.map(|a| a.ip()).collect()))
    }

    /// Like [`Resolver::new`], with `lookup` standing in for the host's resolver.
    pub(crate) fn with_lookup(upstream: Option<SocketAddr>, lookup: Lookup) -> Self {
        Self { upstream, lookup, slots: Arc::new(Semaphore::new(HOST_LOOKUPS_PER_SANDBOX)) }
    }

    /// Answers one DNS message `query` from the sandbox; `None` for something that is not a
    /// well-formed question (dropped, like a real server would).
    pub(crate) async fn answer(&self, query: &[u8], policy: &Policy, report: &Reporter) -> Option<Vec<u8>> {
        answer(query, policy, report, self).await
    }

    /// IPv4 addresses of `name`: from the upstream server (UDP) if set, else the host's resolver.
    /// Failures and time-outs give no addresses (an empty answer); so does a full look-up pool,
    /// told apart (`Err(Busy)`) for the report.
    async fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, Busy> {
        let found = match self.upstream {
            Some(server) => tokio::time::timeout(UPSTREAM_PATIENCE, ask(name, server)).await.ok().flatten(),
            None => self.host_lookup(name).await?,
        };
        let mut v: Vec<IpAddr> = found.unwrap_or_default().into_iter().filter(IpAddr::is_ipv4).collect();
        v.dedup();
        Ok(v)
    }

    async fn host_lookup(&self, name: &str) -> Result<Option<Vec<IpAddr>>, Busy> {
        // Both permits go to the blocking thread: a look-up that outlives its timeout still
        // counts until getaddrinfo returns (a run's slow names can so hold the service's pool
        // for a few seconds after the run; `[network] upstream_dns` asks a server over UDP
        // instead, with nothing held past the timeout).
        let global = HOST_LOOKUPS.try_acquire().map_err(|_| Busy)?;
        let mine = self.slots.clone().try_acquire_owned().map_err(|_| Busy)?;
        let (lookup, name) = (self.lookup, name.to_owned());
        let task = tokio::task::spawn_blocking(move || {
            let _permits = (global, mine);
            lookup(&name)
        });
        Ok(tokio::time::timeout(UPSTREAM_PATIENCE, task).await.ok().and_then(Result::ok).and_then(Result::ok))
    }
}

async fn answer(query: &[u8], policy: &Policy, report: &Reporter, resolver: &Resolver) -> Option<Vec<u8>> {
    let q = Message::from_vec(query).ok()?;
    if q.metadata.message_type != MessageType::Query || q.metadata.op_code != OpCode::Query {
        return None;
    }
    let mut reply = Message::response(q.metadata.id, OpCode::Query);
    reply.metadata.recursion_desired = q.metadata.recursion_desired;
    reply.metadata.recursion_available = true;
    let [question] = q.queries.as_slice() else {
        reply.metadata.response_code = ResponseCode::FormErr;
        return reply.to_vec().ok();
    };
    reply.add_query(question.clone());
    let name = question.name().to_ascii().trim_end_matches('.').to_ascii_lowercase();
    // Rules match the name's labels, so a label must be one a host name has (letters, digits,
    // `-`, `_`): one holding a dot renders escaped ("a\.b.test"), and that text ends like a
    // name below `b.test` while the name itself is one level above it (an attack review).
    let plain = question.name().iter().all(|l| !l.is_empty() && l.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_'));
    if !plain || !policy.name_allowed(&name) {
        refused(report, &name, GATEWAY_IPV4.to_string(), Some(53), Refusal::NameNotAllowed);
        reply.metadata.response_code = ResponseCode::NXDomain;
        return reply.to_vec().ok();
    }
    // Only A: IPv6 is not routed out, and other types carry nothing a client needs to connect.
    if question.query_type() != RecordType::A {
        return reply.to_vec().ok();
    }
    let (found, trusted) = match policy.static_host(&name) {
        Some(ip) => (vec![ip], true),
        None => match resolver.resolve(&name).await {
            Ok(found) => (found, false),
            Err(Busy) => {
                refused(report, &name, GATEWAY_IPV4.to_string(), Some(53), Refusal::DnsBusy);
                return reply.to_vec().ok();
            }
        },
    };
    let addrs = policy.screen(found.clone(), trusted);
    if addrs.is_empty() && !found.is_empty() {
        refused(report, &name, found.iter().map(ToString::to_string).collect::<Vec<_>>().join(","), None, Refusal::InternalAddress);
    }
    for ip in addrs {
        if let IpAddr::V4(v4) = ip {
            if !policy.hand_out(&name, ip, trusted) {
                refused(report, &name, ip.to_string(), None, Refusal::TooManyAddresses);
                continue;
            }
            reply.add_answer(Record::from_rdata(question.name().clone(), TTL_S, RData::A(A(v4))));
        }
    }
    reply.to_vec().ok()
}

/// Reports a DNS question about `name` refused for `reason` (`address`: what it was asked of,
/// or what the answer held).
fn refused(report: &Reporter, name: &str, address: String, port: Option<u16>, reason: Refusal) {
    report.blocked(BlockedAttempt { host: Some(name.to_owned()), address, port, protocol: "dns".into(), at: now(), reason: reason.as_str().into() });
}

async fn ask(name: &str, server: SocketAddr) -> Option<Vec<IpAddr>> {
    let bind: SocketAddr = if server.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { (std::net::Ipv6Addr::UNSPECIFIED, 0).into() };
    let sock = tokio::net::UdpSocket::bind(bind).await.ok()?;
    sock.connect(server).await.ok()?;
    let mut m = Message::query();
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).ok()?, RecordType::A));
    sock.send(&m.to_vec().ok()?).await.ok()?;
    let mut buf = vec![0u8; 4096];
    loop {
        let n = sock.recv(&mut buf).await.ok()?;
        let Ok(r) = Message::from_vec(&buf[..n]) else { continue };
        if r.metadata.id != m.metadata.id {
            continue;
        }
        return Some(
            r.answers
                .iter()
                .filter_map(|rec| match &rec.data {
                    RData::A(a) => Some(IpAddr::V4(a.0)),
                    _ => None,
                })
                .collect(),
        );
    }
}
