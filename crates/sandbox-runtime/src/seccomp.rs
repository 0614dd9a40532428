//! The program's seccomp filter (libseccomp), modelled on container runtimes' defaults: system
//! calls that administer the machine, change namespaces or mounts, trace other processes,
//! load BPF or kernel modules, or open io_uring fail with EPERM; `clone3` fails with ENOSYS so
//! libc falls back to `clone`, whose namespace flags are checked; any architecture other than
//! the native one (32-bit or x32 calls on x86-64) kills the process.

use libseccomp::{ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall};

/// System calls refused with EPERM. Names this libseccomp does not know are skipped; every one
/// of them also needs a capability the program does not have.
pub(crate) const DENIED: &[&str] = &[
    // mounts and namespaces
    "mount", "umount", "umount2", "pivot_root", "chroot", "unshare", "setns", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",
    // tracing and other processes' memory
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise",
    // kernel facilities
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key", "init_module", "finit_module", "delete_module", "kexec_load",
    "kexec_file_load", "acct", "swapon", "swapoff", "reboot", "syslog", "quotactl", "quotactl_fd",
    "lookup_dcookie", "open_by_handle_at", "name_to_handle_at", "vhangup", "fanotify_init", "iopl", "ioperm",
    "create_module", "get_kernel_syms", "query_module", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl",
    "personality",
    // clocks
    "settimeofday", "stime", "clock_settime", "clock_adjtime", "adjtimex",
];

/// `CLONE_NEW*` flags refused in `clone`'s first argument.
const CLONE_NS_FLAGS: [u64; 7] = [
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// Socket address families the program may create.
const ALLOWED_FAMILIES: [u64; 4] = [libc::AF_UNIX as u64, libc::AF_INET as u64, libc::AF_INET6 as u64, libc::AF_NETLINK as u64];

/// Builds and loads the filter on the calling thread (no_new_privs must be set).
/// Errors: libseccomp's message.
pub(crate) fn install() -> Result<(), String> {
    let e = |e: libseccomp::error::SeccompError| e.to_string();
    let eperm = ScmpAction::Errno(libc::EPERM);
    let mut f = ScmpFilterContext::new(ScmpAction::Allow).map_err(e)?;
    f.set_act_badarch(ScmpAction::KillProcess).map_err(e)?;
    f.add_arch(ScmpArch::Native).map_err(e)?;
    for name in DENIED {
        if let Ok(sc) = ScmpSyscall::from_name(name) {
            f.add_rule(eperm, sc).map_err(e)?;
        }
    }
    f.add_rule(ScmpAction::Errno(libc::ENOSYS), ScmpSyscall::from_name("clone3").map_err(e)?).map_err(e)?;
    let clone = ScmpSyscall::from_name("clone").map_err(e)?;
    for flag in CLONE_NS_FLAGS {
        f.add_rule_conditional(eperm, clone, &[ScmpArgCompare::new(0, ScmpCompareOp::MaskedEqual(flag), flag)]).map_err(e)?;
    }
    // Socket families: only AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK. Everything else (packet,
    // vsock, which no network namespace isolates, AF_ALG, bluetooth, ...) fails with EAFNOSUPPORT.
    let refuse_family = ScmpAction::Errno(libc::EAFNOSUPPORT);
    for syscall in ["socket", "socketpair"] {
        let sc = ScmpSyscall::from_name(syscall).map_err(e)?;
        for domain in (0..=64u64).filter(|d| !ALLOWED_FAMILIES.contains(d)) {
            f.add_rule_conditional(refuse_family, sc, &[ScmpArgCompare::new(0, ScmpCompareOp::Equal, domain)]).map_err(e)?;
        }
        f.add_rule_conditional(refuse_family, sc, &[ScmpArgCompare::new(0, ScmpCompareOp::Greater, 64)]).map_err(e)?;
    }
    // TIOCSTI pushes input into a terminal another process reads.
    let ioctl = ScmpSyscall::from_name("ioctl").map_err(e)?;
    f.add_rule_conditional(eperm, ioctl, &[ScmpArgCompare::new(1, ScmpCompareOp::MaskedEqual(0xffff_ffff), libc::TIOCSTI)]).map_err(e)?;
    f.load().map_err(e)
}
