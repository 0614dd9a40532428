//! The sandbox's resolver at the gateway address, port 53: answers A questions for names a rule
//! allows (from the profile's `hosts`, the configured upstream server, or the host's resolver),
//! NXDOMAIN for every other name, and never passes a question for a disallowed name on. Only
//! the question's name and type leave, re-encoded in a fresh query (no client bytes are
//! forwarded), so nothing can be tunnelled through the upstream server under a disallowed name.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{rdata::A, Name, RData, Record, RecordType};
use sandbox_core::network::BlockedAttempt;
use sandbox_runtime::tun::GATEWAY_IPV4;

use super::policy::{Policy, Refusal};
use super::report::{now, Reporter};

/// TTL of the answers, in seconds.
const TTL_S: u32 = 60;
/// How long an upstream lookup may take.
const UPSTREAM_PATIENCE: Duration = Duration::from_secs(3);

/// Answers one DNS message `query` from the sandbox; `None` for something that is not a
/// well-formed question (dropped, like a real server would).
pub(crate) async fn answer(query: &[u8], policy: &Policy, report: &Reporter, upstream: Option<SocketAddr>) -> Option<Vec<u8>> {
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
    if !policy.name_allowed(&name) {
        report.blocked(BlockedAttempt {
            host: Some(name),
            address: GATEWAY_IPV4.to_string(),
            port: Some(53),
            protocol: "dns".into(),
            at: now(),
            reason: Refusal::NameNotAllowed.as_str().into(),
        });
        reply.metadata.response_code = ResponseCode::NXDomain;
        return reply.to_vec().ok();
    }
    // Only A: IPv6 is not routed out, and other types carry nothing a client needs to connect.
    if question.query_type() != RecordType::A {
        return reply.to_vec().ok();
    }
    let (found, trusted) = match policy.static_host(&name) {
        Some(ip) => (vec![ip], true),
        None => (resolve(&name, upstream).await, false),
    };
    let addrs = policy.screen(found.clone(), trusted);
    if addrs.is_empty() && !found.is_empty() {
        report.blocked(BlockedAttempt {
            host: Some(name.clone()),
            address: found.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
            port: None,
            protocol: "dns".into(),
            at: now(),
            reason: Refusal::InternalAddress.as_str().into(),
        });
    }
    for ip in addrs {
        if let IpAddr::V4(v4) = ip {
            policy.hand_out(&name, ip);
            reply.add_answer(Record::from_rdata(question.name().clone(), TTL_S, RData::A(A(v4))));
        }
    }
    reply.to_vec().ok()
}

/// IPv4 addresses of `name`: from `upstream` (UDP) if set, else the host's resolver. Failures
/// give no addresses (the sandbox sees an empty answer).
async fn resolve(name: &str, upstream: Option<SocketAddr>) -> Vec<IpAddr> {
    let found = match upstream {
        Some(server) => tokio::time::timeout(UPSTREAM_PATIENCE, ask(name, server)).await.ok().flatten(),
        None => tokio::time::timeout(UPSTREAM_PATIENCE, tokio::net::lookup_host((name, 0)))
            .await
            .ok()
            .and_then(Result::ok)
            .map(|it| it.map(|a| a.ip()).collect()),
    };
    let mut v: Vec<IpAddr> = found.unwrap_or_default().into_iter().filter(IpAddr::is_ipv4).collect();
    v.dedup();
    v
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
