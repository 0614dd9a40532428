//! The packet filter in front of the userspace TCP stack: one decision per packet the sandbox
//! sends, and the refusals it answers with (a TCP RST, an ICMP unreachable), so that a refused
//! client fails at once instead of waiting for a timeout.

use std::net::{IpAddr, SocketAddr};

use etherparse::{icmpv4, icmpv6, Icmpv4Type, Icmpv6Type, NetSlice, PacketBuilder, SlicedPacket, TransportSlice};
use sandbox_core::network::BlockedAttempt;
use sandbox_runtime::tun::GATEWAY_IPV4;

use super::policy::{Policy, Refusal};
use super::report::{now, Reporter};

/// What to do with one packet from the sandbox.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Allowed TCP of the connection from `src` to `dst`: hand it to the userspace stack.
    Pass {
        /// The sandbox's end.
        src: SocketAddr,
        /// Destination.
        dst: SocketAddr,
    },
    /// An allowed TCP SYN: connect to the destination and then hand it to the stack, unless
    /// the sandbox has too many connections open or the connect fails, then answer with
    /// `refusal` (a RST).
    Connect {
        /// The sandbox's end.
        src: SocketAddr,
        /// Destination.
        dst: SocketAddr,
        /// The RST that refuses it.
        refusal: Vec<u8>,
    },
    /// Refused: write this packet back to the sandbox (RST or ICMP unreachable).
    Reply(Vec<u8>),
    /// A DNS question to the sandbox's resolver: the UDP payload and who asked.
    Dns {
        /// The DNS message.
        query: Vec<u8>,
        /// The sandbox's socket that asked.
        client: SocketAddr,
    },
    /// Ignore it (link noise such as IPv6 neighbour discovery, or already reported).
    Drop,
}

/// Decides about one IP packet `pkt` from the sandbox, reporting what it refuses.
pub(crate) fn classify(pkt: &[u8], policy: &Policy, report: &Reporter) -> Verdict {
    let Ok(p) = SlicedPacket::from_ip(pkt) else { return Verdict::Drop };
    let (src, dst, ip_number) = match &p.net {
        Some(NetSlice::Ipv4(v4)) => (IpAddr::V4(v4.header().source_addr()), IpAddr::V4(v4.header().destination_addr()), v4.payload_ip_number()),
        Some(NetSlice::Ipv6(v6)) => (IpAddr::V6(v6.header().source_addr()), IpAddr::V6(v6.header().destination_addr()), v6.payload().ip_number),
        _ => return Verdict::Drop,
    };
    // Multicast and broadcast (IPv6 router solicitations, MLD reports, ...) are the kernel's own
    // link chatter, not the program's attempts.
    let quiet = match dst {
        IpAddr::V4(a) => a.is_multicast() || a.is_broadcast(),
        IpAddr::V6(a) => a.is_multicast() || src.is_unspecified(),
    };
    if quiet {
        return Verdict::Drop;
    }
    let block = |protocol: &str, port: Option<u16>, reason: Refusal| {
        report.blocked(BlockedAttempt {
            // No allowed name let this through, so none is named: an address the DNS gave out
            // for a name may also be reached by address, on a port the name does not allow.
            host: None,
            address: dst.to_string(),
            port,
            protocol: protocol.into(),
            at: now(),
            reason: reason.as_str().into(),
        });
    };
    match &p.transport {
        Some(TransportSlice::Tcp(t)) => {
            if policy.tcp_allowed(dst, t.destination_port()) {
                let (from, to) = (SocketAddr::new(src, t.source_port()), SocketAddr::new(dst, t.destination_port()));
                if t.syn() && !t.ack() {
                    let ack = t.sequence_number().wrapping_add(1);
                    let refusal = tcp_rst(dst, src, t.destination_port(), t.source_port(), 0, ack);
                    return Verdict::Connect { src: from, dst: to, refusal };
                }
                return Verdict::Pass { src: from, dst: to };
            }
            if t.rst() {
                return Verdict::Drop;
            }
            let (seq, ack) = if t.syn() {
                block("tcp", Some(t.destination_port()), Refusal::NotAllowed);
                let len = u32::try_from(t.payload().len()).unwrap_or(0);
                (0, t.sequence_number().wrapping_add(1).wrapping_add(len))
            } else {
                (t.acknowledgment_number(), 0)
            };
            Verdict::Reply(tcp_rst(dst, src, t.destination_port(), t.source_port(), seq, ack))
        }
        Some(TransportSlice::Udp(u)) => {
            if dst == IpAddr::V4(GATEWAY_IPV4) && u.destination_port() == 53 {
                return Verdict::Dns { query: u.payload().to_vec(), client: SocketAddr::new(src, u.source_port()) };
            }
            block("udp", Some(u.destination_port()), Refusal::ProtocolNotAllowed);
            Verdict::Reply(unreachable(pkt, src, dst))
        }
        Some(TransportSlice::Icmpv6(i)) if (130..=143).contains(&i.type_u8()) => Verdict::Drop,
        Some(TransportSlice::Icmpv4(_)) | Some(TransportSlice::Icmpv6(_)) => {
            block("icmp", None, Refusal::ProtocolNotAllowed);
            Verdict::Drop
        }
        None => {
            block(&format!("ip:{}", ip_number.0), None, Refusal::ProtocolNotAllowed);
            Verdict::Drop
        }
    }
}

/// The RST that answers TCP packet `pkt` of a connection nobody holds (RFC 9293 3.10.7.1), or
/// nothing for a RST or a packet that is not TCP.
pub(crate) fn reset_for(pkt: &[u8]) -> Vec<u8> {
    let Ok(p) = SlicedPacket::from_ip(pkt) else { return Vec::new() };
    let (src, dst) = match &p.net {
        Some(NetSlice::Ipv4(v4)) => (IpAddr::V4(v4.header().source_addr()), IpAddr::V4(v4.header().destination_addr())),
        Some(NetSlice::Ipv6(v6)) => (IpAddr::V6(v6.header().source_addr()), IpAddr::V6(v6.header().destination_addr())),
        _ => return Vec::new(),
    };
    let Some(TransportSlice::Tcp(t)) = &p.transport else { return Vec::new() };
    if t.rst() {
        return Vec::new();
    }
    let (seq, ack) = if t.ack() {
        (t.acknowledgment_number(), 0)
    } else {
        let len = u32::try_from(t.payload().len()).unwrap_or(0) + u32::from(t.syn()) + u32::from(t.fin());
        (0, t.sequence_number().wrapping_add(len))
    };
    tcp_rst(dst, src, t.destination_port(), t.source_port(), seq, ack)
}

/// A TCP RST from `from`:`from_port` to `to`:`to_port` (with ACK when `ack` is not 0).
pub(crate) fn tcp_rst(from: IpAddr, to: IpAddr, from_port: u16, to_port: u16, seq: u32, ack: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(60);
    let written = match (from, to) {
        (IpAddr::V4(f), IpAddr::V4(t)) => {
            let b = PacketBuilder::ipv4(f.octets(), t.octets(), 64).tcp(from_port, to_port, seq, 0).rst();
            if ack != 0 {
                b.ack(ack).write(&mut out, &[])
            } else {
                b.write(&mut out, &[])
            }
        }
        (IpAddr::V6(f), IpAddr::V6(t)) => {
            let b = PacketBuilder::ipv6(f.octets(), t.octets(), 64).tcp(from_port, to_port, seq, 0).rst();
            if ack != 0 {
                b.ack(ack).write(&mut out, &[])
            } else {
                b.write(&mut out, &[])
            }
        }
        _ => return out,
    };
    if written.is_err() {
        out.clear();
    }
    out
}

/// An ICMP "port unreachable" about packet `orig` (which went from `src` to `dst`), sent back
/// to `src` as if from `dst`; a connected UDP socket then fails with ECONNREFUSED.
fn unreachable(orig: &[u8], src: IpAddr, dst: IpAddr) -> Vec<u8> {
    let mut out = Vec::with_capacity(600);
    let quoted = &orig[..orig.len().min(548)];
    let written = match (dst, src) {
        (IpAddr::V4(f), IpAddr::V4(t)) => PacketBuilder::ipv4(f.octets(), t.octets(), 64)
            .icmpv4(Icmpv4Type::DestinationUnreachable(icmpv4::DestUnreachableHeader::Port))
            .write(&mut out, quoted),
        (IpAddr::V6(f), IpAddr::V6(t)) => PacketBuilder::ipv6(f.octets(), t.octets(), 64)
            .icmpv6(Icmpv6Type::DestinationUnreachable(icmpv6::DestUnreachableCode::Port))
            .write(&mut out, quoted),
        _ => return out,
    };
    if written.is_err() {
        out.clear();
    }
    out
}

/// A UDP datagram from the sandbox's resolver (gateway port 53) to `client` carrying `payload`.
pub(crate) fn dns_reply(client: SocketAddr, payload: &[u8]) -> Option<Vec<u8>> {
    let IpAddr::V4(to) = client.ip() else { return None };
    let mut out = Vec::with_capacity(28 + payload.len());
    PacketBuilder::ipv4(GATEWAY_IPV4.octets(), to.octets(), 64).udp(53, client.port()).write(&mut out, payload).ok()?;
    Some(out)
}
