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
    let ret = unsafe { libc::syscall(libc::SYS_clone, raw, std::ptr::null_mut::<libc::c_void>(), 0usize, 0usize, 0usize) };
    match ret {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(Pid::from_raw(i32::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?))),
    }
}

/// `CLONE_INTO_CGROUP` (Linux 5.7, cgroup v2 only): the child is born in the cgroup whose
/// directory descriptor `clone_args.cgroup` names.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// The kernel's `struct clone_args` (linux/sched.h), version 2 (with `cgroup`): 88 bytes.
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `clone3(2)` with `flags`, `CLONE_INTO_CGROUP` into the cgroup v2 directory `cgroup` (an
/// `O_PATH` or read-only descriptor), exit signal SIGCHLD and no new stack: like
/// [`clone_namespaces`], but the child is born in that cgroup, so the caller never moves into it
/// (a `cgroup.procs` write takes the threadgroup rwsem for writing: an RCU grace period, 9-20
/// ms on this kind of host). Only called from the single-threaded helper.
/// Errors: the kernel's errno; `ENOSYS` (no clone3, before 5.3), `E2BIG` or `EINVAL` (no
/// `CLONE_INTO_CGROUP`, before 5.7, or a v1 descriptor) mean the caller should fall back to
/// joining the cgroup and [`clone_namespaces`].
pub fn clone_into_cgroup(flags: CloneFlags, cgroup: std::os::fd::BorrowedFd<'_>) -> io::Result<Forked> {
    use std::os::fd::AsRawFd;
    let ns = u64::try_from(flags.bits()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fd = u64::try_from(cgroup.as_raw_fd()).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    let args = CloneArgs { flags: ns | CLONE_INTO_CGROUP, exit_signal: u64::try_from(libc::SIGCHLD).unwrap_or(17), cgroup: fd, ..CloneArgs::default() };
    // SAFETY: `args` is a valid, fully initialised clone_args of the size passed, alive for the
    // call. With a zero stack clone3 behaves as fork: both processes return here with separate
    // copies of the address space; the helper is single-threaded, so no other thread's lock
    // can be left held in the child.
    let ret = unsafe { libc::syscall(libc::SYS_clone3, std::ptr::from_ref(&args), std::mem::size_of::<CloneArgs>()) };
    match ret {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(Pid::from_raw(i32::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?))),
    }
}

/// How a reaped child ended ([`reap_one`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it: its number, real-time signals included.
    Signaled(i32),
}

/// Reaps one child that has ended, without waiting: `waitpid(-1, &status, WNOHANG)`, again on
/// EINTR. Returns its pid and how it ended; `None` when no child has ended yet or there is
/// none (ECHILD). The status is decoded here: nix's `waitpid` fails (EINVAL) on a signal it has
/// no name for, a real-time one, after the kernel has already reaped the child, so the caller
/// lost that child's end (init then waited for its program until the timeout).
pub fn reap_one() -> Option<(i32, Ended)> {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid, writable int for the duration of the call.
        let pid = unsafe { libc::waitpid(-1, &raw mut status, libc::WNOHANG) };
        if pid < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if pid <= 0 {
            return None;
        }
        // Without WUNTRACED or WCONTINUED, a reaped child either exited or was signaled.
        let ended = if libc::WIFSIGNALED(status) { Ended::Signaled(libc::WTERMSIG(status)) } else { Ended::Exited(libc::WEXITSTATUS(status)) };
        return Some((pid, ended));
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

/// Bytes of the stack a [`spawn_exec`] child runs on (below it one guard page).
const SPAWN_STACK_BYTES: usize = 256 << 10;

/// Starts a process that runs `child` and execs, as glibc's `posix_spawn` does: `clone(2)` with
/// `CLONE_VM | CLONE_VFORK | SIGCHLD` on a stack of its own (mapped here, a guard page below
/// it). The child shares this address space until its `execve`, and the caller is suspended
/// until then (or until the child exits), so no page table is copied, no page is left
/// copy-on-write for either side to fault on, and no copy is torn down at the exec (a fork of
/// init cost ~0.3 ms of CPU on every cold start's critical path). Everything else is the
/// child's own, as after fork(2): file descriptors, signal handlers, limits, working directory,
/// credentials, landlock domain and seccomp filters (no `CLONE_FILES`, `CLONE_SIGHAND`,
/// `CLONE_FS` or `CLONE_THREAD`).
///
/// `child` must not return and must leave by `execve` or by [`exit_now`] (never
/// `std::process::exit`, whose exit handlers would run on the caller's memory). What it
/// allocates stays in the caller's heap. It runs with the caller's thread-local storage; the
/// caller must be single-threaded (init is), so no other thread can hold a lock it takes.
/// A change of credentials in the child resets the shared memory's dumpable flag to
/// `fs.suid_dumpable` (commit_creds): the caller sets its own again after this returns.
/// Returns the child's pid once it has exec'd or exited. Errors: the kernel's errno (EAGAIN at
/// `pids.max`), or the stack's mapping.
pub fn spawn_exec(child: &mut dyn FnMut() -> std::convert::Infallible) -> io::Result<Pid> {
    // The call returns no value (Infallible): the match after it is never reached.
    #[allow(unreachable_code)]
    extern "C" fn trampoline(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `&mut &mut dyn FnMut` below, alive until clone returns in the
        // caller, which CLONE_VFORK holds back until this child has exec'd or exited.
        let child = unsafe { &mut *arg.cast::<&mut dyn FnMut() -> std::convert::Infallible>() };
        match child() {}
    }
    let page = 4096;
    let len = SPAWN_STACK_BYTES + page;
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
    let base =
        unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK, -1, 0) };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let unmap = |base: *mut libc::c_void| {
        // SAFETY: the mapping made above, no longer used (the child has exec'd or exited).
        unsafe { libc::munmap(base, len) };
    };
    // SAFETY: the lowest page of the mapping made above.
    if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
        let e = io::Error::last_os_error();
        unmap(base);
        return Err(e);
    }
    let mut child = child;
    // SAFETY: the stack top is the end of the mapping (16-byte aligned: page-aligned base, len
    // a multiple of the page); the child runs `trampoline` on it with the closure, which
    // outlives the child's use of it (CLONE_VFORK). The caller is single-threaded.
    let pid = unsafe {
        let top = base.cast::<u8>().add(len).cast::<libc::c_void>();
        libc::clone(trampoline, top, libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD, (&raw mut child).cast::<libc::c_void>())
    };
    let e = io::Error::last_os_error();
    unmap(base);
    if pid < 0 {
        return Err(e);
    }
    Ok(Pid::from_raw(pid))
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
    if unsafe { libc::ioctl(sock.as_raw_fd(), sioc(libc::SIOCGIFFLAGS), &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: ifru_flags is the member SIOCGIFFLAGS filled in.
    unsafe {
        req.ifr_ifru.ifru_flags |= libc::c_short::try_from(libc::IFF_UP).expect("IFF_UP fits a short");
    }
    // SAFETY: SIOCSIFFLAGS reads the ifreq we own.
    if unsafe { libc::ioctl(sock.as_raw_fd(), sioc(libc::SIOCSIFFLAGS), &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A socket ioctl's request number (`SIOC*`, an `unsigned long` in the libc crate) as ioctl(2)'s
/// request parameter, which is `unsigned long` in glibc and `int` in musl (`libc::Ioctl`); every
/// `SIOC*` number fits either.
#[allow(clippy::cast_possible_truncation, clippy::unnecessary_cast)]
pub(crate) const fn sioc(request: libc::c_ulong) -> libc::Ioctl {
    request as libc::Ioctl
}

/// The landlock ABI version the kernel offers (0 when landlock is absent or disabled).
pub fn landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer and size 0 and the VERSION flag, the call only returns a number.
    let v = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<libc::c_void>(), 0usize, LANDLOCK_CREATE_RULESET_VERSION) };
    u32::try_from(v).unwrap_or(0)
}

/// A pidfd for process `pid` (`pidfd_open(2)`, Linux 5.3): signals sent through it reach that
/// process or nothing, never a later process that reused the pid.
/// Errors: the kernel's errno (ESRCH when no such process exists).
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain integer arguments; the result is checked and owned below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: pidfd_open just returned this new descriptor; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `signal` to the process behind `pidfd` (`pidfd_send_signal(2)`, Linux 5.1).
/// Errors: the kernel's errno (ESRCH once the process has exited).
pub fn pidfd_send_signal(pidfd: std::os::fd::BorrowedFd<'_>, signal: i32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a descriptor we borrow for the call, a signal number, no siginfo, no flags.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), signal, std::ptr::null::<libc::c_void>(), 0u32) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Bytes written into the pipe behind `fd` (either end) and not read yet (`ioctl(FIONREAD)`,
/// pipe(7)). The buffer lives as long as any descriptor of the pipe does (see [`pipe_reader`]),
/// so this tells whether a process that is gone ever read what was written for it.
/// Errors: the kernel's errno (EBADF for a closed descriptor).
pub fn pipe_unread(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: a descriptor we borrow for the call and a pointer to a live int FIONREAD fills.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) } != 0 {
        return Err(io::Error::last_os_error());
    }
    usize::try_from(n).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// A new read end (non-blocking) of the pipe whose descriptor (either end) is `fd`, opened
/// through `/proc/self/fd` as a FIFO is (fifo(7)): it keeps the pipe's buffer for
/// [`pipe_unread`] without holding a write end open, so the pipe's reader still sees EOF when
/// the writers close theirs. (While it is open a writer gets no EPIPE: its reader never leaves.)
/// Errors: opening `/proc/self/fd/N` (ENOENT without /proc).
pub fn pipe_reader(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    Ok(file.into())
}

/// A close-on-exec duplicate of `fd` numbered `min` or above (`fcntl(F_DUPFD_CLOEXEC)`): moves a
/// descriptor out of the way of the numbers a child is to get.
/// Errors: the kernel's errno (EMFILE, EINVAL for a `min` past the descriptor limit).
pub fn dup_above(fd: std::os::fd::BorrowedFd<'_>, min: std::os::fd::RawFd) -> io::Result<OwnedFd> {
    let new = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(min))?;
    // SAFETY: `fcntl` just returned this new descriptor, which nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Puts thread `tid` back under the normal time-sharing policy (`SCHED_OTHER`, priority 0;
/// `sched_setscheduler(2)`) if it runs under `SCHED_IDLE`, and leaves any other policy alone
/// (so a pid reused by another process since it was listed is not demoted): a child forked
/// ahead waits under `SCHED_IDLE`, which it cannot leave by itself, and the engine (privileged)
/// lifts it right before the go byte of the execution that took the child.
/// Errors: the kernel's errno (ESRCH when no such thread exists).
pub fn sched_normal(tid: i32) -> io::Result<()> {
    let policy = sched_policy(tid)?;
    if policy & !libc::SCHED_RESET_ON_FORK != libc::SCHED_IDLE {
        return Ok(());
    }
    sched_set(tid, libc::SCHED_OTHER)
}

/// Thread `tid`'s scheduling policy, `sched_getscheduler(2)` as the system call itself: musl's
/// `sched_getscheduler` and `sched_setscheduler` only fail with ENOSYS (POSIX gives them a
/// process's policy, which Linux does not have), and in a static musl build the child forked
/// ahead was never lifted, so no execution ever took one.
/// Errors: the kernel's errno.
pub(crate) fn sched_policy(tid: i32) -> io::Result<i32> {
    // SAFETY: the system call takes a plain integer argument.
    let policy = unsafe { libc::syscall(libc::SYS_sched_getscheduler, libc::c_long::from(tid)) };
    if policy < 0 {
        return Err(io::Error::last_os_error());
    }
    i32::try_from(policy).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Sets thread `tid`'s policy to `policy` at priority 0, `sched_setscheduler(2)` as the system
/// call itself (see [`sched_policy`]).
/// Errors: the kernel's errno.
pub(crate) fn sched_set(tid: i32, policy: i32) -> io::Result<()> {
    // SAFETY: sched_param is plain old data; all-zero is priority 0 (musl's has more fields).
    let param: libc::sched_param = unsafe { std::mem::zeroed() };
    // SAFETY: a thread id, a policy constant and a pointer to a live sched_param.
    if unsafe { libc::syscall(libc::SYS_sched_setscheduler, libc::c_long::from(tid), libc::c_long::from(policy), &raw const param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Takes ownership of descriptor `fd`, inherited at a fixed number (a warm child's mount trees).
/// Errors: EBADF when it is not open.
pub fn take_fd(fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: only borrowed for the F_GETFD check.
    nix::fcntl::fcntl(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }, nix::fcntl::FcntlArg::F_GETFD)?;
    // SAFETY: the descriptor is open (checked above) and its number was reserved for this use by
    // the process that placed it; it is taken exactly once.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Puts every signal's disposition back to SIG_DFL (all but SIGKILL and SIGSTOP, which cannot
/// be changed, up to `SIGRTMAX`), as a freshly booted process has them: an ignored disposition
/// survives exec, so without this a program would inherit whatever the service inherited (a
/// shell ignores SIGINT and SIGQUIT for a job it starts in the background, `nohup` SIGHUP), the
/// Rust runtime's ignored SIGPIPE, and glibc's reserved signals 32-33, which its `posix_spawn`
/// leaves ignored in the helper it starts. As systemd resets a service's signals before exec.
/// The raw `rt_sigaction`: glibc's wrapper refuses its reserved signals.
/// Errors: the kernel's errno.
pub fn signals_default() -> io::Result<()> {
    // The kernel's `struct sigaction` (handler, flags, restorer, mask: at most four words),
    // all zero: SIG_DFL, no flags, an empty mask.
    let dfl = [0u64; 4];
    for sig in (1..=libc::SIGRTMAX()).filter(|s| ![libc::SIGKILL, libc::SIGSTOP].contains(s)) {
        // SAFETY: `dfl` is a valid, large enough kernel sigaction that installs no handler (no
        // code of ours runs on these signals); the old disposition is not read (null).
        let r = unsafe { libc::syscall(libc::SYS_rt_sigaction, sig, dfl.as_ptr(), std::ptr::null_mut::<u64>(), 8usize) };
        if r == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether `sig`'s disposition in this process is SIG_IGN now (false if `sig` is not a signal).
/// Read before a handler is installed, it is the disposition the process was started with.
pub fn signal_ignored(sig: i32) -> bool {
    let mut old = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: a null new action only reads the current one into `old`, a valid, zeroed
    // sigaction the kernel fills in when it succeeds.
    let r = unsafe { libc::sigaction(sig, std::ptr::null(), old.as_mut_ptr()) };
    // SAFETY: all-zero is a valid sigaction, and a successful call wrote a whole one.
    r == 0 && unsafe { old.assume_init() }.sa_sigaction == libc::SIG_IGN
}

/// Ends this process by `sig` (SIGINT, SIGTERM) with the signal's default action, after the
/// caller's clean-up: how a program that handled the signal tells its parent it was interrupted.
/// A shell then stops the script that ran it, as after the default action (a shell that sees an
/// exit status instead takes the signal as handled and goes on), and its `$?` is 128+`sig`
/// either way; CPython does the same after an uncaught KeyboardInterrupt. See "Proper handling
/// of SIGINT/SIGQUIT", <https://www.cons.org/cracauer/sigint.html>. Nothing is flushed: the
/// CLI's output flushes every write, and taking stdout's lock here could wait forever for a
/// thread blocked on a full pipe (`std::process::exit` only tries it). Falls back to
/// `exit(128 + sig)` if the signal does not end the process (pid 1 of a container, where the
/// kernel drops a default-action signal the process sends itself).
pub fn die_by_signal(sig: i32) -> ! {
    // SAFETY: installs the default action, which runs no code of ours (the handler it replaces,
    // tokio's, only wrote to a pipe). From here on a second signal also ends the process.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
    }
    if let Ok(signal) = nix::sys::signal::Signal::try_from(sig) {
        let mut set = nix::sys::signal::SigSet::empty();
        set.add(signal);
        let _ = set.thread_unblock();
        let _ = nix::sys::signal::raise(signal);
    }
    std::process::exit(128 + sig)
}

/// Forks the helper ([`crate::helper_main`]) from this process without an exec: `sandbox run`'s
/// helper started ahead, which so skips an exec, the loading and relocation of the binary and
/// the Rust runtime's start (~1.2 ms of CPU per run on this machine kind). Only while this
/// process has a single thread (`main`, before anything else), so that the child's copy of
/// every lock and of the allocator is consistent; checked here (`num_threads`, field 20 of
/// `/proc/self/stat`). The child puts each `(fd, number)` of `fds` at that number (stdio, the
/// control socket, the side channel: where an exec'd helper gets them), closes every other
/// descriptor above them (an exec would have closed the close-on-exec ones), empties its signal
/// mask, overwrites the arguments and environment it inherited (`retitle`: `/proc/PID/cmdline`
/// reads `sandbox-init` as an exec'd helper's does, and nothing of the caller's environment
/// stays in its memory or in that of the init it clones), and runs the helper; it exits 127 if
/// any of that fails. The parent's copies of `fds` are for it to close.
/// Errors: `ErrorKind::Other` when the process has more than one thread, else the kernel's errno
/// (`fork(2)`, or reading `/proc/self/stat`).
pub fn fork_helper(fds: &[(OwnedFd, std::os::fd::RawFd)]) -> io::Result<Pid> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let threads = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().nth(20 - 3)).and_then(|t| t.parse::<u32>().ok());
    if threads != Some(1) {
        return Err(io::Error::other(format!("the process has {threads:?} threads; a helper is forked from a single-threaded one only")));
    }
    // SAFETY: this process has one thread (checked above, and the caller's thread cannot start
    // another meanwhile), so the child's copy of its memory, locks included, is consistent.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Parent { child } => Ok(child),
        nix::unistd::ForkResult::Child => {
            use std::os::fd::AsRawFd as _;
            let target_max = fds.iter().map(|(_, n)| *n).max().unwrap_or(0);
            // Every source above every target first, so that no dup2 overwrites a source still
            // to be moved; dup2 clears the close-on-exec flag of its target.
            let placed = fds
                .iter()
                .map(|(fd, n)| dup_above(std::os::fd::AsFd::as_fd(fd), target_max + 1).map(|high| (high, *n)))
                .collect::<io::Result<Vec<_>>>()
                .and_then(|high| {
                    high.iter().try_for_each(|(fd, n)| {
                        // SAFETY: both are descriptor numbers; the target is one the helper owns.
                        match unsafe { libc::dup2(fd.as_raw_fd(), *n) } {
                            -1 => Err(io::Error::last_os_error()),
                            _ => Ok(()),
                        }
                    })
                });
            // Nothing else stays open: no exec closes the parent's close-on-exec descriptors here,
            // and among them are the engine's own ends of these very pipes (a helper holding the
            // engine's end of its control socket would never read EOF there).
            let closed = u32::try_from(target_max + 1).map_err(io::Error::other).and_then(close_from);
            let unmasked = nix::sys::signal::sigprocmask(nix::sys::signal::SigmaskHow::SIG_SETMASK, Some(&nix::sys::signal::SigSet::empty()), None);
            // SAFETY: this child is single-threaded (forked from a single-threaded process), and
            // the helper reads neither its arguments nor its environment.
            if placed.is_err() || closed.is_err() || unmasked.is_err() || unsafe { retitle(crate::HELPER_ARGV0) }.is_err() {
                exit_now(127);
            }
            crate::helper_main()
        }
    }
}

/// Overwrites this process's argument and environment strings where the kernel placed them at
/// its exec (`arg_start..arg_end` and `env_start..env_end`, fields 48-51 of `/proc/self/stat`,
/// proc(5)), so that `/proc/PID/cmdline` reads `title` and `/proc/PID/environ` only NUL bytes,
/// and clears `environ` (`clearenv(3)`): what a process exec'd with argv `[title]` and an empty
/// environment shows and holds. For a helper forked from our binary instead of exec'd
/// ([`fork_helper`]): the caller's arguments and environment (an API key, a cloud
/// credential) are not left in the memory of the helper and of the init it clones. A `title`
/// longer than the argument area is cut (the area ends with a NUL either way).
/// Errors: `/proc/self/stat` cannot be read or has no such fields.
///
/// # Safety
/// The process must be single-threaded, and nothing may read its arguments or environment
/// afterwards (`std::env::args` would return the overwritten text).
unsafe fn retitle(title: &str) -> io::Result<()> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let malformed = || io::Error::new(io::ErrorKind::InvalidData, "/proc/self/stat has no argument and environment fields");
    // Fields after the command name (which may hold spaces) start at field 3.
    let after = stat.rfind(')').map(|i| &stat[i + 1..]).ok_or_else(malformed)?;
    let field = |n: usize| after.split_whitespace().nth(n - 3).and_then(|f| f.parse::<usize>().ok()).ok_or_else(malformed);
    let (arg_start, arg_end, env_start, env_end) = (field(48)?, field(49)?, field(50)?, field(51)?);
    if arg_end < arg_start || env_end < env_start || arg_start == 0 {
        return Err(malformed());
    }
    // SAFETY: both ranges are the strings the kernel copied onto this process's stack at exec,
    // writable and still mapped (the initial stack is never unmapped); the caller guarantees no
    // other thread reads them.
    unsafe {
        std::ptr::write_bytes(env_start as *mut u8, 0, env_end - env_start);
        let area = std::slice::from_raw_parts_mut(arg_start as *mut u8, arg_end - arg_start);
        area.fill(0);
        let n = title.len().min(area.len().saturating_sub(1));
        area[..n].copy_from_slice(&title.as_bytes()[..n]);
        libc::clearenv();
    }
    Ok(())
}

/// Closes descriptor number `fd` of this process if it is open (`close(2)`; an error, `EBADF`
/// for one not open, is ignored). For numbers the process holds by convention rather than as
/// an owned value: the side channel (fd 4) that the helper and init keep only to pass on.
pub(crate) fn close_raw(fd: std::os::fd::RawFd) {
    // SAFETY: the callers (the helper and init, after passing the descriptor on) own `fd` by
    // the descriptor convention of `spec.rs` and never use it afterwards.
    unsafe {
        libc::close(fd);
    }
}

/// Closes every descriptor from `first` up (`close_range(2)`, Linux 5.9).
/// Errors: the kernel's errno.
pub fn close_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range only closes descriptors; the callers (a warm child about to wait and
    // exit, a helper at its start) own every descriptor at or above `first` and use none of
    // them afterwards.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32) };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Ends the calling process at once with `code` (`_exit(2)`): no atexit handlers, no stdio
/// flush. For the processes a warm child forks inside an interpreter's address space, whose
/// exit handlers belong to the interpreter and must not run twice; and for a [`spawn_exec`]
/// child, which shares its caller's memory, stdio buffers included.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes no pointers and never returns.
    unsafe { libc::_exit(code) }
}

/// A detached copy of the mount at `path` (`open_tree(2)` with `OPEN_TREE_CLONE`, Linux 5.2):
/// the same filesystem, reachable through the returned descriptor only, until another mount
/// namespace attaches it with `move_mount_to`. How the engine hands a warm child its own
/// workspace and code without the template ever seeing the host's directories.
/// Errors: the kernel's errno (EPERM without CAP_SYS_ADMIN over the mount namespace).
pub fn open_tree_clone(path: &std::path::Path) -> io::Result<OwnedFd> {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // O_CLOEXEC is a small positive constant.
    #[allow(clippy::cast_sign_loss)]
    let flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call; the result is checked.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, c.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: open_tree just returned this new descriptor; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets the mount attributes `attr_set` (`MOUNT_ATTR_*` bits: `MOUNT_ATTR_RDONLY` 0x1,
/// `MOUNT_ATTR_NOSUID` 0x2, `MOUNT_ATTR_NODEV` 0x4, ...) on the mount at `path` and on every
/// mount below it, in one step (`mount_setattr(2)` with `AT_RECURSIVE`, Linux 5.12): either all
/// of them change or none does. Nothing is cleared, so flags the kernel locked when the mounts
/// entered a user namespace stay as they are.
/// Errors: the kernel's errno; `ENOSYS` before 5.12 (the caller remounts one by one instead).
pub fn mount_setattr_recursive(path: &std::path::Path, attr_set: u64) -> io::Result<()> {
    const AT_RECURSIVE: libc::c_uint = 0x8000;
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let attr = libc::mount_attr { attr_set, attr_clr: 0, propagation: 0, userns_fd: 0 };
    // SAFETY: `c` and `attr` are valid for the call's duration and `attr`'s size is passed with
    // it; the kernel only reads them.
    let r = unsafe {
        libc::syscall(libc::SYS_mount_setattr, libc::AT_FDCWD, c.as_ptr(), AT_RECURSIVE, std::ptr::from_ref(&attr), std::mem::size_of::<libc::mount_attr>())
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Attaches the detached mount `tree` (from [`open_tree_clone`]) at `target` in the caller's
/// mount namespace (`move_mount(2)` with `MOVE_MOUNT_F_EMPTY_PATH`).
/// Errors: the kernel's errno.
pub fn move_mount_to(tree: std::os::fd::BorrowedFd<'_>, target: &std::path::Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;
    let c = std::ffi::CString::new(target.as_os_str().as_encoded_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let empty = c"";
    // SAFETY: both paths are valid NUL-terminated strings that outlive the call; `tree` is a
    // descriptor we borrow for its duration.
    let r = unsafe { libc::syscall(libc::SYS_move_mount, tree.as_raw_fd(), empty.as_ptr(), libc::AT_FDCWD, c.as_ptr(), MOVE_MOUNT_F_EMPTY_PATH) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends `data` and the descriptors `fds` in one message over `sock` (SCM_RIGHTS), again when
/// a signal interrupts the call (see [`recv_with_fds`]).
/// Errors: the kernel's errno (EPIPE when the other end is gone).
pub fn send_fds(sock: &UnixStream, data: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let raw: Vec<i32> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    loop {
        match nix::sys::socket::sendmsg::<()>(
            sock.as_raw_fd(),
            &[std::io::IoSlice::new(data)],
            &[nix::sys::socket::ControlMessage::ScmRights(&raw)],
            nix::sys::socket::MsgFlags::empty(),
            None,
        ) {
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
            Ok(_) => return Ok(()),
        }
    }
}

/// Receives one message of at most `buf.len()` bytes and the descriptors sent with it (at most
/// 16), waiting again when a signal interrupts the wait: on a socket with a receive timeout
/// (`SO_RCVTIMEO`) the kernel never restarts `recvmsg`, and even a stop and continue of the
/// process (SIGSTOP/SIGCONT, a freezer, a tracer's attach) fails it with EINTR (signal(7),
/// "Interruption of system calls"). The timeout, if any, starts again then. Returns the byte
/// count (0 at EOF) and the descriptors, close-on-exec. Errors: the kernel's errno (EAGAIN
/// when the timeout passed).
pub fn recv_with_fds(sock: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    use std::os::fd::AsRawFd;
    loop {
        let mut iov = [std::io::IoSliceMut::new(&mut *buf)];
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 16]);
        let msg = match nix::sys::socket::recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), nix::sys::socket::MsgFlags::MSG_CMSG_CLOEXEC) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(msg) => msg,
        };
        let mut fds = Vec::new();
        for cmsg in msg.cmsgs()? {
            if let nix::sys::socket::ControlMessageOwned::ScmRights(raw) = cmsg {
                for fd in raw {
                    // SAFETY: the kernel just installed `fd` in our table for this message; nobody else owns it.
                    fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
        return Ok((msg.bytes, fds));
    }
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, 0, &prog)`: loads one classic BPF program, given as its
/// `struct sock_filter` array (8 bytes an instruction), on the calling thread.
/// Errors: `EINVAL` for a program that is not whole instructions or longer than BPF_MAXINSNS,
/// and the kernel's refusal (`EACCES` without no_new_privs, `EINVAL` from the verifier).
pub fn seccomp_load(program: &[u8]) -> io::Result<()> {
    let unit = std::mem::size_of::<libc::sock_filter>();
    let len = u16::try_from(program.len() / unit).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    if !program.len().is_multiple_of(unit) || len == 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let prog = libc::sock_fprog { len, filter: program.as_ptr().cast::<libc::sock_filter>().cast_mut() };
    // SAFETY: `prog` points at `len` whole instructions that live until the call returns; the
    // kernel copies the program and verifies it before using it.
    let r = unsafe { libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0, &raw const prog) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The warm-start entry point, exported as the C symbol `sandbox_warm_enter` from
/// `libsandbox_warm.so` (crate `sandbox-warm`), which a template's forked child calls through
/// ctypes with its control socket's descriptor number. See [`crate::warm::enter`].
pub mod warm_ffi {
    /// `int sandbox_warm_enter(int ctl_fd)`: 0 in the sandboxed program process, non-zero when
    /// set-up failed (the caller must `_exit`).
    #[unsafe(no_mangle)]
    pub extern "C" fn sandbox_warm_enter(ctl_fd: i32) -> i32 {
        crate::warm::enter(ctl_fd)
    }

    /// `int sandbox_warm_new_pid_namespace(void)`: the next process the (single-threaded)
    /// template forks is pid 1 of a new pid namespace (`unshare(CLONE_NEWPID)`, which moves
    /// only the caller's future children; pid_namespaces(7)). Returns 0, or the errno: EINVAL
    /// when the children's pid namespace is already not the caller's own (call
    /// [`sandbox_warm_own_pid_namespace`] after each fork), EPERM without CAP_SYS_ADMIN in the
    /// caller's user namespace, ENOSPC past the nesting or `max_pid_namespaces` limit.
    #[unsafe(no_mangle)]
    pub extern "C" fn sandbox_warm_new_pid_namespace() -> i32 {
        match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWPID) {
            Ok(()) => 0,
            Err(e) => e as i32,
        }
    }

    /// `int sandbox_warm_own_pid_namespace(int fd)`: the processes the template forks are in
    /// its own pid namespace again; `fd` is its `/proc/self/ns/pid`, opened at its start
    /// (`setns(fd, CLONE_NEWPID)`, which a process may do for its own pid namespace; setns(2)).
    /// Returns 0, or the errno (EBADF, EINVAL when `fd` is not a pid namespace, EPERM).
    #[unsafe(no_mangle)]
    pub extern "C" fn sandbox_warm_own_pid_namespace(fd: i32) -> i32 {
        if fd < 0 {
            return libc::EBADF;
        }
        // SAFETY: only borrowed for this call; the kernel checks that `fd` is open.
        let ns = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        match nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWPID) {
            Ok(()) => 0,
            Err(e) => e as i32,
        }
    }
}

#[cfg(test)]
mod tests {
    /// The contract a template relies on: after `sandbox_warm_new_pid_namespace` the next child
    /// is pid 1 of a fresh pid namespace, a second call before the reset is refused, and after
    /// `sandbox_warm_own_pid_namespace` children are in the caller's own namespace again. (The
    /// children's pid namespace is per thread: this test's thread only.)
    #[test]
    fn a_template_forks_one_child_into_a_new_pid_namespace_then_its_own_again() {
        use super::warm_ffi::{sandbox_warm_new_pid_namespace, sandbox_warm_own_pid_namespace};
        use std::os::fd::AsRawFd;
        let pid_of_child = || {
            let out = std::process::Command::new("/bin/sh").args(["-c", "echo $$; readlink /proc/self/ns/pid"]).output().expect("sh runs");
            String::from_utf8(out.stdout).expect("utf-8")
        };
        let own = std::fs::File::open("/proc/self/ns/pid").expect("own pid namespace");
        let ours = std::fs::read_link("/proc/thread-self/ns/pid_for_children").expect("pid_for_children");
        assert_eq!(sandbox_warm_new_pid_namespace(), 0);
        assert_eq!(sandbox_warm_new_pid_namespace(), libc::EINVAL, "a second new namespace before the reset");
        let first = pid_of_child();
        assert!(first.starts_with("1\n"), "the child is pid 1: {first}");
        assert_ne!(first.lines().nth(1).map(std::path::PathBuf::from), Some(ours.clone()), "{first}");
        assert_eq!(sandbox_warm_own_pid_namespace(own.as_raw_fd()), 0);
        assert_eq!(std::fs::read_link("/proc/thread-self/ns/pid_for_children").expect("pid_for_children"), ours);
        let again = pid_of_child();
        assert!(!again.starts_with("1\n"), "back in the caller's namespace: {again}");
        assert_eq!(sandbox_warm_own_pid_namespace(-1), libc::EBADF);
    }

    /// `sched_normal` lifts `SCHED_IDLE` and leaves every other policy as it is.
    #[test]
    fn sched_normal_lifts_only_sched_idle() {
        for (set, want) in [(libc::SCHED_IDLE, libc::SCHED_OTHER), (libc::SCHED_BATCH, libc::SCHED_BATCH), (libc::SCHED_OTHER, libc::SCHED_OTHER)] {
            let mut child = std::process::Command::new("sleep").arg("10").spawn().expect("sleep runs");
            let pid = i32::try_from(child.id()).unwrap();
            super::sched_set(pid, set).expect("set");
            assert_eq!(super::sched_policy(pid).unwrap(), set, "policy {set} set");
            super::sched_normal(pid).expect("lifted");
            assert_eq!(super::sched_policy(pid).unwrap(), want, "policy {set}");
            let _ = child.kill();
            let _ = child.wait();
        }
        assert!(super::sched_normal(i32::MAX).is_err(), "no such thread: ESRCH");
    }

    /// `pipe_unread` counts what a reader has not taken, through a read end of `pipe_reader`'s,
    /// after the reader and the writer are gone; that read end does not keep the reader from
    /// seeing EOF.
    #[test]
    fn pipe_unread_counts_bytes_left_by_a_reader_that_exited() {
        use std::io::Write as _;
        use std::os::fd::AsFd as _;
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let probe = super::pipe_reader(w.as_fd()).unwrap();
        let mut writer = std::fs::File::from(w);
        writer.write_all(b"\nabc").unwrap();
        assert_eq!(super::pipe_unread(writer.as_fd()).unwrap(), 4);
        let mut one = [0u8; 1];
        assert_eq!(nix::unistd::read(&r, &mut one).unwrap(), 1);
        drop(writer);
        let mut rest = [0u8; 8];
        assert_eq!(nix::unistd::read(&r, &mut rest[..2]).unwrap(), 2);
        assert_eq!(super::pipe_unread(probe.as_fd()).unwrap(), 1);
        assert_eq!(nix::unistd::read(&r, &mut rest).unwrap(), 1);
        assert_eq!(nix::unistd::read(&r, &mut rest).unwrap(), 0, "EOF: the probe is no writer");
        drop(r);
        assert_eq!(super::pipe_unread(probe.as_fd()).unwrap(), 0);
    }
}
