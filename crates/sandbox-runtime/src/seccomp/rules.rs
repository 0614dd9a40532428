//! The filters' rules, built with libseccomp (see `mod.rs`): included by `build.rs`, which
//! exports the filters as BPF programs at build time and merges them into the one program
//! embedded by `program` (`merge.rs`), and by the unit tests, which check that this program is
//! what libseccomp builds from these rules, merged, and that it decides as the filters would.
//! This file may use only `libseccomp` and `libc` (a build script has no `crate`).

use libseccomp::{ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall};

/// System calls the program may make: Docker's default profile (moby/profiles
/// `seccomp/default.json`), native 64-bit names only, without what a sandboxed Python or Node
/// program never needs: clock adjustment, Linux AIO (refused in [`DENIED`]), `fanotify_mark`,
/// `name_to_handle_at`, `memfd_secret`, `remap_file_pages`, and calls newer than this review (`listmount`, `statmount`, `mseal`,
/// `lsm_*`, the `*xattrat` family, `open_tree_attr`, `file_getattr`/`file_setattr`), which stay
/// refused until they are reviewed and listed here. `personality` is allowed only with the values
/// in [`PERSONALITIES`]. A name this libseccomp does not know is not allowed (ENOSYS).
pub(crate) const ALLOWED: &[&str] = &[
    // files and directories
    "access",
    "faccessat",
    "faccessat2",
    "open",
    "openat",
    "openat2",
    "creat",
    "close",
    "close_range",
    "read",
    "readv",
    "pread64",
    "preadv",
    "preadv2",
    "write",
    "writev",
    "pwrite64",
    "pwritev",
    "pwritev2",
    "lseek",
    "dup",
    "dup2",
    "dup3",
    "fcntl",
    "flock",
    "fsync",
    "fdatasync",
    "sync",
    "syncfs",
    "sync_file_range",
    "fadvise64",
    "readahead",
    "fallocate",
    "truncate",
    "ftruncate",
    "stat",
    "fstat",
    "lstat",
    "newfstatat",
    "statx",
    "statfs",
    "fstatfs",
    "getdents",
    "getdents64",
    "getcwd",
    "chdir",
    "fchdir",
    "mkdir",
    "mkdirat",
    "rmdir",
    "mknod",
    "mknodat",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "unlink",
    "unlinkat",
    "rename",
    "renameat",
    "renameat2",
    "readlink",
    "readlinkat",
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "chown",
    "fchown",
    "fchownat",
    "lchown",
    "umask",
    "utime",
    "utimes",
    "utimensat",
    "futimesat",
    "getxattr",
    "lgetxattr",
    "fgetxattr",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "listxattr",
    "llistxattr",
    "flistxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "copy_file_range",
    "sendfile",
    "splice",
    "tee",
    "vmsplice",
    "cachestat",
    "inotify_init",
    "inotify_init1",
    "inotify_add_watch",
    "inotify_rm_watch",
    // polling, events, pipes
    "poll",
    "ppoll",
    "select",
    "pselect6",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_ctl_old",
    "epoll_wait",
    "epoll_wait_old",
    "epoll_pwait",
    "epoll_pwait2",
    "eventfd",
    "eventfd2",
    "signalfd",
    "signalfd4",
    "timerfd_create",
    "timerfd_settime",
    "timerfd_gettime",
    "pipe",
    "pipe2",
    "ioctl",
    // memory
    "brk",
    "mmap",
    "munmap",
    "mremap",
    "mprotect",
    "madvise",
    "mincore",
    "msync",
    "mlock",
    "mlock2",
    "mlockall",
    "munlock",
    "munlockall",
    "membarrier",
    "memfd_create",
    "pkey_alloc",
    "pkey_free",
    "pkey_mprotect",
    "map_shadow_stack",
    // processes, threads, signals
    "clone",
    "fork",
    "vfork",
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "wait4",
    "waitid",
    "kill",
    "tkill",
    "tgkill",
    "pidfd_open",
    "pidfd_send_signal",
    "process_mrelease",
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "rt_sigpending",
    "rt_sigsuspend",
    "rt_sigtimedwait",
    "rt_sigqueueinfo",
    "rt_tgsigqueueinfo",
    "sigaltstack",
    "restart_syscall",
    "pause",
    "futex",
    "futex_waitv",
    "futex_wake",
    "futex_wait",
    "futex_requeue",
    "set_robust_list",
    "get_robust_list",
    "set_tid_address",
    "rseq",
    "arch_prctl",
    "set_thread_area",
    "get_thread_area",
    "prctl",
    "seccomp",
    "landlock_create_ruleset",
    "landlock_add_rule",
    "landlock_restrict_self",
    // identity, limits, scheduling (changes need capabilities the program does not hold)
    "getpid",
    "getppid",
    "gettid",
    "getpgid",
    "getpgrp",
    "setpgid",
    "getsid",
    "setsid",
    "getuid",
    "geteuid",
    "getgid",
    "getegid",
    "getresuid",
    "getresgid",
    "getgroups",
    "setuid",
    "setgid",
    "setreuid",
    "setregid",
    "setresuid",
    "setresgid",
    "setgroups",
    "setfsuid",
    "setfsgid",
    "capget",
    "capset",
    "getrlimit",
    "setrlimit",
    "prlimit64",
    "getrusage",
    "getpriority",
    "setpriority",
    "ioprio_get",
    "ioprio_set",
    "sched_yield",
    "sched_getaffinity",
    "sched_setaffinity",
    "sched_getparam",
    "sched_setparam",
    "sched_getscheduler",
    "sched_setscheduler",
    "sched_getattr",
    "sched_setattr",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_rr_get_interval",
    "getcpu",
    "getrandom",
    "uname",
    "sysinfo",
    "times",
    // time
    "time",
    "gettimeofday",
    "clock_gettime",
    "clock_getres",
    "clock_nanosleep",
    "nanosleep",
    "alarm",
    "getitimer",
    "setitimer",
    "timer_create",
    "timer_delete",
    "timer_settime",
    "timer_gettime",
    "timer_getoverrun",
    // sockets (families and netlink protocols are narrowed by the argument filter)
    "socket",
    "socketpair",
    "bind",
    "listen",
    "accept",
    "accept4",
    "connect",
    "getsockname",
    "getpeername",
    "getsockopt",
    "setsockopt",
    "sendto",
    "recvfrom",
    "sendmsg",
    "recvmsg",
    "sendmmsg",
    "recvmmsg",
    "shutdown",
    // System V and POSIX IPC (private to the sandbox's IPC namespace)
    "shmget",
    "shmat",
    "shmdt",
    "shmctl",
    "semget",
    "semop",
    "semtimedop",
    "semctl",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
];

/// System calls refused with EPERM: what a sandbox must never do (mounts and namespaces, tracing,
/// BPF, keyrings, modules, io_uring, perf, userfaultfd, clocks, ...). Listing them, rather than
/// leaving them to the default, makes a refusal by policy visible as EPERM. Names this
/// libseccomp does not know are skipped: they then get the default ENOSYS, never allow.
pub(crate) const DENIED: &[&str] = &[
    // mounts and namespaces
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "move_mount",
    "open_tree",
    "open_tree_attr",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "sethostname",
    "setdomainname",
    // tracing and other processes' memory
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    "process_madvise",
    // kernel facilities
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    // Linux AIO: every io_setup takes its events from one host-wide pool (fs.aio-max-nr, 65536
    // by default) that one program could empty for the host (databases, QEMU) and every other
    // sandbox until its end. Neither CPython nor Node (libuv) uses it.
    "io_setup",
    "io_destroy",
    "io_submit",
    "io_cancel",
    "io_getevents",
    "io_pgetevents",
    "keyctl",
    "add_key",
    "request_key",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "syslog",
    "quotactl",
    "quotactl_fd",
    "lookup_dcookie",
    "open_by_handle_at",
    "name_to_handle_at",
    "vhangup",
    "fanotify_init",
    "iopl",
    "ioperm",
    "create_module",
    "get_kernel_syms",
    "query_module",
    "nfsservctl",
    "uselib",
    "ustat",
    "sysfs",
    "_sysctl",
    // clocks
    "settimeofday",
    "stime",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
];

/// `personality` values allowed (Docker's): query (0xffffffff), PER_LINUX, PER_LINUX32 and their
/// UNAME26 variants. Others, e.g. ADDR_NO_RANDOMIZE, get ENOSYS.
const PERSONALITIES: [u64; 5] = [0, 0x0008, 0x0002_0000, 0x0002_0008, 0xffff_ffff];

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

/// The only netlink protocol the program may open: NETLINK_ROUTE (interfaces, addresses, routes
/// of its own namespace; `if_nameindex`, `getifaddrs`). Others (audit, uevents, sock_diag,
/// generic, ...) fail with EPROTONOSUPPORT.
const NETLINK_ROUTE: u64 = libc::NETLINK_ROUTE as u64;

/// `mmap`'s flag for a mapping of the host's reserved huge pages (linux/mman.h).
const MAP_HUGETLB: u64 = 0x4_0000;
/// `memfd_create`'s flag for a file of the host's reserved huge pages (linux/memfd.h).
const MFD_HUGETLB: u64 = 0x4;
/// `shmget`'s flag for a segment of the host's reserved huge pages (linux/shm.h, `04000`).
const SHM_HUGETLB: u64 = 0o4000;

/// Low 32 bits: the kernel reads `int`/`unsigned int` arguments from them alone, so a comparison
/// on the whole register could be dodged with junk in the high half.
const LOW32: u64 = 0xffff_ffff;

/// An empty filter for the native architecture (any other kills the process) whose calls are
/// sorted into a binary tree when exported (libseccomp's `SCMP_FLTATR_CTL_OPTIMIZE` level 2,
/// libseccomp 2.5+; seccomp_attr_set(3)): a call is found in ~9 comparisons instead of one per
/// listed call. The kernel runs the program when it is loaded, once per system call number, to
/// build its cache of always-allowed calls (`seccomp_cache_prepare`), and on each call that is
/// not cached: the linear calls filter (370 instructions) took ~0.37 ms to load on this machine
/// kind, the tree ~0.14 ms. The decisions are the same; a libseccomp before 2.5 refuses the
/// attribute and the filter stays linear.
fn new_filter(default: ScmpAction) -> Result<ScmpFilterContext, libseccomp::error::SeccompError> {
    let mut f = ScmpFilterContext::new(default)?;
    f.set_act_badarch(ScmpAction::KillProcess)?;
    f.add_arch(ScmpArch::Native)?;
    let _ = f.set_ctl_optimize(2);
    Ok(f)
}

/// Which calls exist: [`ALLOWED`] allowed, [`DENIED`] EPERM, everything else ENOSYS (among them
/// `clone3`, so libc falls back to `clone`, whose namespace flags the argument filter checks).
pub(crate) fn calls_filter() -> Result<ScmpFilterContext, libseccomp::error::SeccompError> {
    let mut f = new_filter(ScmpAction::Errno(libc::ENOSYS))?;
    for name in ALLOWED {
        // Unknown to this libseccomp (newer than its table): not allowed.
        if let Ok(sc) = ScmpSyscall::from_name(name) {
            f.add_rule(ScmpAction::Allow, sc)?;
        }
    }
    for name in DENIED {
        if let Ok(sc) = ScmpSyscall::from_name(name) {
            f.add_rule(ScmpAction::Errno(libc::EPERM), sc)?;
        }
    }
    add_personalities(&mut f)?;
    Ok(f)
}

/// `personality` allowed with the values in [`PERSONALITIES`], as in [`calls_filter`].
fn add_personalities(f: &mut ScmpFilterContext) -> Result<(), libseccomp::error::SeccompError> {
    let personality = ScmpSyscall::from_name("personality")?;
    for value in PERSONALITIES {
        f.add_rule_conditional(ScmpAction::Allow, personality, &[ScmpArgCompare::new(0, ScmpCompareOp::Equal, value)])?;
    }
    Ok(())
}

/// The calls filter's rules for the calls on which it reads arguments (`personality`), and
/// nothing else: the merged program (`merge.rs`) jumps here for them instead of into the whole
/// calls filter. Every other call gets the calls filter's default (ENOSYS), never used.
pub(crate) fn calls_with_arguments_filter() -> Result<ScmpFilterContext, libseccomp::error::SeccompError> {
    let mut f = new_filter(ScmpAction::Errno(libc::ENOSYS))?;
    add_personalities(&mut f)?;
    Ok(f)
}

/// Argument rules on calls the first filter allows; default allow.
pub(crate) fn arguments_filter() -> Result<ScmpFilterContext, libseccomp::error::SeccompError> {
    let eperm = ScmpAction::Errno(libc::EPERM);
    let mut f = new_filter(ScmpAction::Allow)?;
    let clone = ScmpSyscall::from_name("clone")?;
    for flag in CLONE_NS_FLAGS {
        f.add_rule_conditional(eperm, clone, &[ScmpArgCompare::new(0, ScmpCompareOp::MaskedEqual(flag), flag)])?;
    }
    // Socket families: only AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK. Everything else (packet,
    // vsock, which no network namespace isolates, AF_ALG, bluetooth, ...) fails with EAFNOSUPPORT.
    let refuse_family = ScmpAction::Errno(libc::EAFNOSUPPORT);
    // Each value below the highest allowed one is refused by itself, everything above it at once
    // (on the whole 64-bit register: junk in the high half is refused too).
    let highest = ALLOWED_FAMILIES.iter().copied().max().unwrap_or(0);
    for syscall in ["socket", "socketpair"] {
        let sc = ScmpSyscall::from_name(syscall)?;
        for domain in (0..highest).filter(|d| !ALLOWED_FAMILIES.contains(d)) {
            f.add_rule_conditional(refuse_family, sc, &[ScmpArgCompare::new(0, ScmpCompareOp::Equal, domain)])?;
        }
        f.add_rule_conditional(refuse_family, sc, &[ScmpArgCompare::new(0, ScmpCompareOp::Greater, highest)])?;
    }
    // Netlink: NETLINK_ROUTE only (the protocol is socket's third argument).
    f.add_rule_conditional(
        ScmpAction::Errno(libc::EPROTONOSUPPORT),
        ScmpSyscall::from_name("socket")?,
        &[ScmpArgCompare::new(0, ScmpCompareOp::Equal, libc::AF_NETLINK as u64), ScmpArgCompare::new(2, ScmpCompareOp::NotEqual, NETLINK_ROUTE)],
    )?;
    // TIOCSTI pushes input into a terminal another process reads.
    let ioctl = ScmpSyscall::from_name("ioctl")?;
    // An unsigned long in glibc's libc crate, an int in musl's (a static build's unit tests).
    #[allow(clippy::unnecessary_cast, clippy::cast_sign_loss)]
    let tiocsti = libc::TIOCSTI as u64;
    f.add_rule_conditional(eperm, ioctl, &[ScmpArgCompare::new(1, ScmpCompareOp::MaskedEqual(LOW32), tiocsti)])?;
    // Huge pages (MAP_HUGETLB, MFD_HUGETLB, SHM_HUGETLB) come from the host's reserved pool
    // (vm.nr_hugepages), which the memory cgroup does not charge: a program could take them all
    // from the host, past its memory limit. Transparent huge pages stay (charged as any page).
    f.add_rule_conditional(eperm, ScmpSyscall::from_name("mmap")?, &[ScmpArgCompare::new(3, ScmpCompareOp::MaskedEqual(MAP_HUGETLB), MAP_HUGETLB)])?;
    f.add_rule_conditional(eperm, ScmpSyscall::from_name("memfd_create")?, &[ScmpArgCompare::new(1, ScmpCompareOp::MaskedEqual(MFD_HUGETLB), MFD_HUGETLB)])?;
    f.add_rule_conditional(eperm, ScmpSyscall::from_name("shmget")?, &[ScmpArgCompare::new(2, ScmpCompareOp::MaskedEqual(SHM_HUGETLB), SHM_HUGETLB)])?;
    // RLIMIT_CORE stays 1: for a piped core_pattern the kernel ignores every other value, so a
    // program that could lower it to 0 would have its crash handed to the host's handler.
    let core = libc::RLIMIT_CORE as u64;
    f.add_rule_conditional(eperm, ScmpSyscall::from_name("setrlimit")?, &[ScmpArgCompare::new(0, ScmpCompareOp::MaskedEqual(LOW32), core)])?;
    f.add_rule_conditional(
        eperm,
        ScmpSyscall::from_name("prlimit64")?,
        &[ScmpArgCompare::new(1, ScmpCompareOp::MaskedEqual(LOW32), core), ScmpArgCompare::new(2, ScmpCompareOp::NotEqual, 0)],
    )?;
    Ok(f)
}
