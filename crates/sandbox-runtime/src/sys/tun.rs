//! TUN device creation and interface configuration by ioctl (no netlink library, no `ip`
//! binary), and passing a descriptor over a unix socket (SCM_RIGHTS).

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

/// `struct rtentry` of `<net/route.h>` (glibc does not export it to the libc crate).
#[repr(C)]
struct RtEntry {
    rt_pad1: libc::c_ulong,
    rt_dst: libc::sockaddr,
    rt_gateway: libc::sockaddr,
    rt_genmask: libc::sockaddr,
    rt_flags: libc::c_ushort,
    rt_pad2: libc::c_short,
    rt_pad3: libc::c_ulong,
    rt_pad4: *mut libc::c_void,
    rt_metric: libc::c_short,
    rt_dev: *mut libc::c_char,
    rt_mtu: libc::c_ulong,
    rt_window: libc::c_ulong,
    rt_irtt: libc::c_ushort,
}

/// `struct in6_rtmsg` of `<linux/ipv6_route.h>` (the libc crate's fields are private).
#[repr(C)]
struct In6RtMsg {
    rtmsg_dst: libc::in6_addr,
    rtmsg_src: libc::in6_addr,
    rtmsg_gateway: libc::in6_addr,
    rtmsg_type: u32,
    rtmsg_dst_len: u16,
    rtmsg_src_len: u16,
    rtmsg_metric: u32,
    rtmsg_info: libc::c_ulong,
    rtmsg_flags: u32,
    rtmsg_ifindex: libc::c_int,
}

fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = libc::c_char::from_ne_bytes([src]);
    }
    Ok(req)
}

fn socket(family: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: a plain socket(2) call; the result is checked and owned below.
    let fd = unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn sockaddr_v4(ip: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::sa_family_t::try_from(libc::AF_INET).expect("AF_INET fits sa_family_t"),
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: u32::from(ip).to_be() },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr have the same size (16 bytes) and sockaddr is plain old
    // data; this is how the ioctl interface expects an IPv4 address.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

/// Opens `/dev/net/tun` and creates the TUN device `name` (layer 3, no packet-information
/// header) in the current network namespace; the device lives as long as the returned descriptor
/// (or the namespace). Needs CAP_NET_ADMIN over the namespace.
/// Errors: the kernel's errno (ENOENT without the tun driver, EPERM without the capability).
pub fn tun_create(name: &str) -> io::Result<OwnedFd> {
    let fd = nix::fcntl::open("/dev/net/tun", nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())?;
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_flags = libc::c_short::try_from(libc::IFF_TUN | libc::IFF_NO_PI).expect("TUN flags fit a short");
    // SAFETY: TUNSETIFF reads (and writes back the name into) the ifreq we own.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) })?;
    // Persistent: closing the descriptor then does not unregister the device synchronously
    // (an RCU grace period, ~15 ms, in the closer's exit path); the device goes when the
    // namespace dies, in the kernel's namespace clean-up (a TUN is never moved to the host).
    // SAFETY: TUNSETPERSIST takes an integer argument, no memory.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETPERSIST, 1 as libc::c_ulong) })?;
    Ok(fd)
}

/// Gives interface `name` the IPv4 address `addr` with prefix length `prefix`, and sets it up.
/// Errors: the kernel's errno.
pub fn if_up_ipv4(name: &str, addr: Ipv4Addr, prefix: u8) -> io::Result<()> {
    let sock = socket(libc::AF_INET)?;
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_addr = sockaddr_v4(addr);
    // SAFETY: SIOCSIFADDR reads the ifreq we own.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), crate::sys::sioc(libc::SIOCSIFADDR), &req) })?;
    let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
    req.ifr_ifru.ifru_netmask = sockaddr_v4(Ipv4Addr::from(mask));
    // SAFETY: SIOCSIFNETMASK reads the ifreq we own.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), crate::sys::sioc(libc::SIOCSIFNETMASK), &req) })?;
    link_up(&sock, name)
}

/// Sets the MTU of interface `name`, in bytes.
/// Errors: the kernel's errno (EINVAL outside the device's range).
pub fn if_set_mtu(name: &str, mtu: u16) -> io::Result<()> {
    let sock = socket(libc::AF_INET)?;
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_mtu = libc::c_int::from(mtu);
    // SAFETY: SIOCSIFMTU reads the ifreq we own.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), crate::sys::sioc(libc::SIOCSIFMTU), &req) })
}

fn link_up(sock: &OwnedFd, name: &str) -> io::Result<()> {
    let mut req = ifreq(name)?;
    // SAFETY: SIOCGIFFLAGS writes into the ifreq we own.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), crate::sys::sioc(libc::SIOCGIFFLAGS), &mut req) })?;
    // SAFETY: ifru_flags is the member SIOCGIFFLAGS filled in.
    unsafe {
        req.ifr_ifru.ifru_flags |= libc::c_short::try_from(libc::IFF_UP).expect("IFF_UP fits a short");
    }
    // SAFETY: SIOCSIFFLAGS reads the ifreq we own.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), crate::sys::sioc(libc::SIOCSIFFLAGS), &req) })
}

/// Adds the IPv4 default route `0.0.0.0/0 dev name` (no gateway: a TUN device has no link layer).
/// Errors: the kernel's errno.
pub fn route_default_ipv4(name: &str) -> io::Result<()> {
    let sock = socket(libc::AF_INET)?;
    let mut dev = std::ffi::CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?.into_bytes_with_nul();
    let rt = RtEntry {
        rt_pad1: 0,
        rt_dst: sockaddr_v4(Ipv4Addr::UNSPECIFIED),
        rt_gateway: sockaddr_v4(Ipv4Addr::UNSPECIFIED),
        rt_genmask: sockaddr_v4(Ipv4Addr::UNSPECIFIED),
        rt_flags: libc::RTF_UP,
        rt_pad2: 0,
        rt_pad3: 0,
        rt_pad4: std::ptr::null_mut(),
        rt_metric: 0,
        rt_dev: dev.as_mut_ptr().cast(),
        rt_mtu: 0,
        rt_window: 0,
        rt_irtt: 0,
    };
    // SAFETY: SIOCADDRT reads the rtentry we own; rt_dev points into `dev`, alive until after the call.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), crate::sys::sioc(libc::SIOCADDRT), &rt) })
}

/// Gives interface `name` the IPv6 address `addr`/`prefix` and adds the IPv6 default route
/// `::/0 dev name`. The interface must be up.
/// Errors: the kernel's errno (EACCES or EAFNOSUPPORT when IPv6 is disabled).
pub fn if_ipv6_default(name: &str, addr: Ipv6Addr, prefix: u8) -> io::Result<()> {
    let sock = socket(libc::AF_INET6)?;
    let index = nix::net::if_::if_nametoindex(name)?;
    let index = libc::c_int::try_from(index).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    let req = libc::in6_ifreq { ifr6_addr: libc::in6_addr { s6_addr: addr.octets() }, ifr6_prefixlen: prefix.into(), ifr6_ifindex: index };
    // SAFETY: SIOCSIFADDR on an AF_INET6 socket reads the in6_ifreq we own.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), crate::sys::sioc(libc::SIOCSIFADDR), &req) })?;
    let any = libc::in6_addr { s6_addr: [0; 16] };
    let rt = In6RtMsg {
        rtmsg_dst: any,
        rtmsg_src: any,
        rtmsg_gateway: any,
        rtmsg_type: 0,
        rtmsg_dst_len: 0,
        rtmsg_src_len: 0,
        rtmsg_metric: 1,
        rtmsg_info: 0,
        rtmsg_flags: u32::from(libc::RTF_UP),
        rtmsg_ifindex: index,
    };
    // SAFETY: SIOCADDRT on an AF_INET6 socket reads the in6_rtmsg we own.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), crate::sys::sioc(libc::SIOCADDRT), &rt) })
}

/// Sends `fd` over `sock` with one byte of data (SCM_RIGHTS).
/// Errors: the kernel's errno (EPIPE when the other end is gone).
pub fn send_fd(sock: &UnixStream, fd: &OwnedFd) -> io::Result<()> {
    let fds = [fd.as_raw_fd()];
    sendmsg::<()>(sock.as_raw_fd(), &[IoSlice::new(b"t")], &[ControlMessage::ScmRights(&fds)], MsgFlags::empty(), None)?;
    Ok(())
}

/// Receives one descriptor sent by `send_fd`, blocking. `Ok(None)` at EOF (the sender closed
/// its end without sending). The descriptor is close-on-exec.
/// Errors: the kernel's errno.
pub fn recv_fd(sock: &UnixStream) -> io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
    let mut received = None;
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            for raw in fds {
                // SAFETY: the kernel just installed `raw` in our table for this message; nobody else owns it.
                let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                received.get_or_insert(owned);
            }
        }
    }
    Ok(received)
}
