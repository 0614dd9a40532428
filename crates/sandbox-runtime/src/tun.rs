//! The sandbox side of an allowlist network: the helper (host root) enters init's new network
//! namespace, creates a TUN device there, gives it an address and default routes, and hands the
//! device's descriptor to the engine over [`NET_FD`]. (Host root, not init: `/dev/net/tun` is
//! often mode 0600, and a TUN device belongs to the namespace it was opened in.) Every packet the program sends then reaches the engine, which decides
//! (ARCHITECTURE.md "Network"). The program never holds CAP_NET_ADMIN, so it cannot change any
//! of this; the device dies with the namespace or with the engine's descriptor.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::step::{step, StepError};
use crate::sys;

/// File descriptor number, in the helper, of the unix socket the TUN descriptor is sent on
/// (only present when the spec asks for a TUN; close-on-exec, so the program never has it).
pub const NET_FD: i32 = 5;
/// Name of the sandbox's network interface.
pub const DEVICE: &str = "eth0";
/// The sandbox's IPv4 address.
pub const SANDBOX_IPV4: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);
/// The engine's IPv4 address on the link: the sandbox's DNS server (`/etc/resolv.conf`).
pub const GATEWAY_IPV4: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 1);
/// Prefix length of the IPv4 link.
pub const PREFIX_IPV4: u8 = 30;
/// The sandbox's IPv6 address (unique local); IPv6 is routed to the engine only so that
/// attempts are refused at once and reported.
pub const SANDBOX_IPV6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x5b, 0, 0, 0, 0, 0, 2);
/// MTU of the device, in bytes. Nothing on this link is a real wire, and the userspace stack's
/// cost is per packet, so packets are as large as IP allows (a TUN takes up to 65535): with the
/// engine's scaled windows this beat 16 KiB packets (bench/network.sh, README "Performance").
pub const MTU: u16 = 65_535;
/// Prefix length of the IPv6 link.
pub const PREFIX_IPV6: u8 = 64;

/// In the helper, once init exists and before it runs on: joins `init`'s network namespace
/// (for good: the helper does nothing else on the network), creates and configures the device
/// and sends it to the engine.
pub(crate) fn setup(init: nix::unistd::Pid) -> Result<(), StepError> {
    let channel = step("tun_channel", sys::take_control_socket(NET_FD))?;
    let netns = step("tun_netns", std::fs::File::open(format!("/proc/{init}/ns/net")))?;
    step("tun_netns", nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET))?;
    let tun = step("tun_create", sys::tun_create(DEVICE))?;
    step("tun_mtu", sys::if_set_mtu(DEVICE, MTU))?;
    step("tun_ipv4", sys::if_up_ipv4(DEVICE, SANDBOX_IPV4, PREFIX_IPV4))?;
    step("tun_route_ipv4", sys::route_default_ipv4(DEVICE))?;
    // Best effort: on a host with IPv6 disabled, IPv6 connects fail locally (ENETUNREACH),
    // which blocks them just as well, only unreported.
    if let Err(e) = sys::if_ipv6_default(DEVICE, SANDBOX_IPV6, PREFIX_IPV6) {
        tracing::debug!(error = %e, "no IPv6 on the sandbox's TUN");
    }
    step("tun_send", sys::send_fd(&channel, &tun))?;
    Ok(())
}
