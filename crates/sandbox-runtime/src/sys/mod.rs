//! The few kernel calls no safe wrapper covers. Every `unsafe` block of the workspace lives here,
//! each with its reason.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::sched::CloneFlags;
use nix::unistd::Pid;

mod tun;
pub use tun::{if_ipv6_default, if_set_mtu, if_up_ipv4, recv_fd, route_default_ipv4, send_fd, tun_create};

/// Which side of a fork-like call we are on.
pub enum Forked {
    /// In the new process.
    Child,
    /// In the caller; the new process's pid.
    Parent(Pid),
}

/// `clone(2)` with `flags | SIGCHLD` and no new stack: like fork(2), the child continues on a
/// copy-on-write copy of this stack, but in the new namespaces the flags name.
/// Only called from the single-threaded helper, so the child inherits no lock held by another thread.
/// Errors: the kernel's errno (EPERM without privilege, ENOSPC past `max_user_namespaces`, ...).
pub fn clone_namespaces(flags: CloneFlags) -> io::Result<Forked> {
    let raw = libc::c_ulong::try_from(flags.bits() | libc::SIGCHLD).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: with a null stack pointer clone behaves as fork: both processes return here with
    // valid, separate copies of the address space. The helper is single-threaded (it was just
    // exec'd and starts no threads), so no other thread's lock can be left held in the child.
    let ret = unsafe {
        libc::syscall(libc::SYS_clone, raw, std::ptr::null_mut::<libc::c_void>(), 0usize, 0usize, 0usize)
    };
    match ret {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(Pid::from_raw(i32::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?))),
    }
}

/// fork(2) from the single-threaded init.
/// Errors: the kernel's errno (EAGAIN at `pids.max`).
pub fn fork() -> io::Result<Forked> {
    // SAFETY: init is single-threaded, so the child cannot inherit a lock held by another thread;
    // the child only sets up credentials and limits and then execs.
    match unsafe { nix::unistd::fork() }.map_err(io::Error::from)? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child)),
    }
}

/// Takes ownership of the control socket the engine passed as fd 3, and marks it close-on-exec
/// so that the program never inherits it.
/// Errors: EBADF when fd 3 is not open.
pub fn take_control_socket(fd: i32) -> io::Result<UnixStream> {
    nix::fcntl::fcntl(
        // SAFETY: only borrowed for this call; fd 3 is checked for validity by the kernel.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) },
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )?;
    // SAFETY: fd 3 is open (F_SETFD succeeded) and nothing else in this process owns it: the
    // helper was exec'd with it as the control socket and takes it exactly once, at start.
    Ok(UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Marks every descriptor from `first` up close-on-exec (`close_range(2)` with
/// `CLOSE_RANGE_CLOEXEC`, Linux 5.11), so no descriptor of the service reaches the program.
/// Errors: the kernel's errno.
pub fn cloexec_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range only changes descriptor flags; no memory is passed.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the kernel implements `clone3(2)` (Linux 5.3). A null argument of size 0 fails with
/// EINVAL where it exists and ENOSYS where not (or where a seccomp filter hides it); nothing is created.
pub fn has_clone3() -> bool {
    // SAFETY: with size 0 the kernel rejects the call before reading the (null) argument, so no
    // process is created and no memory is touched.
    let r = unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<libc::c_void>(), 0usize) };
    r != -1 || io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS)
}

/// Whether the kernel implements `pidfd_open(2)` (Linux 5.3), tried on our own pid; the
/// descriptor is closed at once.
pub fn has_pidfd_open() -> bool {
    let Ok(pid) = libc::pid_t::try_from(std::process::id()) else { return false };
    // SAFETY: pidfd_open takes no memory; a descriptor it returns is owned and closed below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    match i32::try_from(fd) {
        Ok(fd) if fd >= 0 => {
            // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
            drop(unsafe { OwnedFd::from_raw_fd(fd) });
            true
        }
        _ => false,
    }
}

/// What `close_range(2)` the kernel implements: `Some(true)` with `CLOSE_RANGE_CLOEXEC`
/// (Linux 5.11), `Some(false)` without it (5.9, 5.10), `None` when absent.
pub fn close_range_support() -> Option<bool> {
    // SAFETY: the range [u32::MAX, u32::MAX] holds no open descriptor, so nothing changes; no
    // memory is passed.
    let r = unsafe { libc::syscall(libc::SYS_close_range, u32::MAX, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
    if r == 0 {
        return Some(true);
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOSYS) => None,
        _ => Some(false),
    }
}

/// Brings the loopback interface of the current network namespace up (SIOCSIFFLAGS with IFF_UP).
/// Errors: the kernel's errno.
pub fn loopback_up() -> io::Result<()> {
    // SAFETY: a plain socket(2) call; the result is checked and owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by socket(2) and is owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    use std::os::fd::AsRawFd;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = libc::c_char::from_ne_bytes([*src]);
    }
    // SAFETY: SIOCGIFFLAGS reads into the ifreq we own, which outlives the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: ifru_flags is the member SIOCGIFFLAGS filled in.
    unsafe {
        req.ifr_ifru.ifru_flags |= libc::c_short::try_from(libc::IFF_UP).expect("IFF_UP fits a short");
    }
    // SAFETY: SIOCSIFFLAGS reads the ifreq we own.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The landlock ABI version the kernel offers (0 when landlock is absent or disabled).
pub fn landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer and size 0 and the VERSION flag, the call only returns a number.
    let v = unsafe {
        libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<libc::c_void>(), 0usize, LANDLOCK_CREATE_RULESET_VERSION)
    };
    u32::try_from(v).unwrap_or(0)
}
