//! Pid 1 of the container: becomes root of the new user namespace, builds the root filesystem,
//! forks the program, forwards polite signals to every process, reaps, and when the program's
//! main process ends kills whatever is left and reports the exit.

use std::ffi::CString;
use std::os::fd::OwnedFd;

use std::os::unix::net::UnixStream;

use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::{Gid, Pid, Uid};

use crate::helper::send;
use crate::spec::{Event, SpawnSpec, SANDBOX_UID};
use crate::step::{step, StepError};
use crate::sys;

/// The program's RLIMIT_CORE (soft and hard): 1 is the value `fs/coredump.c` reserves to stop a
/// recursive crash of a pipe handler, so no crash of the program starts the host's core_pattern
/// pipe; it is also below the ELF minimum core size, so no core file is written either.
const CORE_LIMIT_BYTES: u64 = 1;

/// Signals init handles: SIGCHLD to reap, the rest forwarded to every process of the sandbox.
const FORWARDED: [Signal; 7] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, Signal::SIGQUIT, Signal::SIGUSR1, Signal::SIGUSR2, Signal::SIGALRM];

/// Pid 1 of a sandbox, in the namespaces the helper cloned it into. `loopback`: init's network
/// namespace is its own (the helper could not make one ahead), so init brings its loopback up.
pub(crate) fn init_main(spec: &SpawnSpec, go: OwnedFd, ctl: &UnixStream, loopback: bool, cgroup: Vec<std::fs::File>) -> ! {
    // Into the execution's cgroup first, while the helper writes our id maps (the files were
    // opened by host root, which is what the kernel checks); its failure is reported after the
    // go, where the engine expects init's events, and nothing else is done.
    let joined = join_cgroup(spec, cgroup);
    // Wait until the helper has written our id maps; EOF means it failed and we just leave.
    let mut byte = [0u8; 1];
    if !matches!(nix::unistd::read(&go, &mut byte), Ok(1)) {
        std::process::exit(1);
    }
    drop(go);
    let code = match joined.and_then(|()| setup_and_supervise(spec, ctl, loopback)) {
        Ok(()) => 0,
        Err(StepError { step, message }) => {
            send(ctl, &Event::Failed { step: step.into(), message });
            1
        }
    };
    std::process::exit(code)
}

/// Moves init, still the only thread of its process, into the execution's cgroup (cgroup v1:
/// "0" written to each hierarchy's `tasks` file the helper opened, `spec.cgroup_join`'s order:
/// the kernel skips its global lock when a single thread moves itself, see
/// `Cgroup::join_files`), then makes the sandbox's cgroup namespace, whose root is so the
/// execution's cgroup (`cgroup_namespaces(7)`: a new namespace is rooted at the creator's
/// cgroups). Nothing to do without files (v2: born inside; no cgroups). Errors: step
/// `cgroup_join` naming the file, or `cgroup_namespace`.
fn join_cgroup(spec: &SpawnSpec, files: Vec<std::fs::File>) -> Result<(), StepError> {
    if files.is_empty() {
        return Ok(());
    }
    for (file, path) in files.iter().zip(&spec.cgroup_join) {
        step("cgroup_join", std::io::Write::write_all(&mut &*file, b"0").map_err(|e| format!("{}: {e}", path.display())))?;
    }
    drop(files);
    step("cgroup_namespace", nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP))
}

fn setup_and_supervise(spec: &SpawnSpec, ctl: &UnixStream, loopback: bool) -> Result<(), StepError> {
    // Become root of the new user namespace (host uid_base): drop host supplementary groups first.
    step("setgroups", nix::unistd::setgroups(&[]))?;
    step("setresgid", nix::unistd::setresgid(Gid::from_raw(0), Gid::from_raw(0), Gid::from_raw(0)))?;
    step("setresuid", nix::unistd::setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0)))?;
    // If the helper dies, so do we, and with us (pid 1) the whole namespace. (After the uid
    // change, which clears the parent-death signal; the helper waits for us, so it is alive.)
    step("pdeathsig", nix::sys::prctl::set_pdeathsig(Signal::SIGKILL))?;
    // No one may ptrace or read the memory of pid 1.
    step("dumpable", nix::sys::prctl::set_dumpable(false))?;
    crate::rootfs::build(spec)?;
    step("hostname", nix::unistd::sethostname(&spec.hostname))?;
    if loopback {
        step("loopback", sys::loopback_up())?;
    }

    let handled = handled_signals();
    step("sigmask", handled.thread_block())?;
    // Refuse a kernel below the profile's landlock minimum before anything runs.
    let landlock_abi = crate::wall::enforceable_abi();
    if landlock_abi < spec.landlock_min_abi {
        return Err(StepError::new("landlock", crate::wall::below_minimum(landlock_abi, spec.landlock_min_abi)));
    }
    if spec.hold {
        wait_for_go()?;
    }
    // The program execs at once: it shares init's memory until then (`spawn_exec`).
    let program = step(
        "fork",
        sys::spawn_exec(&mut || {
            // A panic is caught here, so that the Failed event is sent and the panic count in
            // the memory shared with init is back to zero when the child leaves.
            let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match exec_program(spec) {
                Err(e) => e,
                Ok(never) => match never {},
            }));
            let StepError { step: name, message } = failed.unwrap_or_else(|_| StepError::new("exec", "the program's set-up panicked"));
            send(ctl, &Event::Failed { step: name.into(), message });
            sys::exit_now(127)
        }),
    )?;
    // The program's uid change reset the shared memory's dumpable flag to the host's
    // fs.suid_dumpable: pid 1 stays closed to ptrace and /proc/<pid>/mem.
    step("dumpable", nix::sys::prctl::set_dumpable(false))?;
    let template = spec.template_slots > 0;
    supervise(program, &handled, ctl, if template { 0 } else { landlock_abi }, template)
}

/// Init's wait for the engine's go (`SpawnSpec::hold`): one byte on the program's stdin, read
/// unbuffered so that the rest is the program's, sent once the execution is on record. Errors:
/// step `go` when stdin closes first (the execution was refused or abandoned) or cannot be read.
pub(crate) fn wait_for_go() -> Result<(), StepError> {
    let mut go = [0u8; 1];
    loop {
        match nix::unistd::read(std::io::stdin(), &mut go) {
            Ok(1) => return Ok(()),
            Ok(_) => return Err(StepError::new("go", "the engine did not start the program (its stdin closed first)")),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(StepError::new("go", format!("reading the go byte: {e}"))),
        }
    }
}

/// SIGCHLD and the signals init forwards.
pub(crate) fn handled_signals() -> SigSet {
    let mut handled = SigSet::empty();
    handled.add(Signal::SIGCHLD);
    for s in FORWARDED {
        handled.add(s);
    }
    handled
}

/// Pid 1's life once the program is forked (`handled` blocked): reports `Spawned`, forwards
/// polite signals to every process, reaps, and when the program ends kills whatever is left
/// and reports `Exited`. A template's init (`linger`) instead reports `Exited` at once and then
/// waits for what is left: the warm executions its interpreter forked, each in its own pid
/// namespace and supervised by the engine, end on their own.
pub(crate) fn supervise(program: Pid, handled: &SigSet, ctl: &UnixStream, landlock_abi: u32, linger: bool) -> Result<(), StepError> {
    send(ctl, &Event::Spawned { landlock_abi });
    // Hold no copy of the program's stdio or of its side channel (fd 4): each pipe closes when
    // the last process of the program ends, so the engine has the program's whole output at
    // `Exited`, without waiting for init's own end.
    step("stdio", stdio_to_dev_null("/dev/null"))?;
    crate::sys::close_raw(crate::spec::RESULT_FD);

    let (code, signal) = loop {
        let sig = step("sigwait", handled.wait())?;
        if sig != Signal::SIGCHLD {
            // kill(-1) from pid 1 reaches every other process of the namespace.
            let _ = kill(Pid::from_raw(-1), sig);
            continue;
        }
        if let Some(status) = reap(program) {
            break status;
        }
    };
    if linger {
        send(ctl, &Event::Exited { code, signal, killed_at_teardown: 0 });
        while !matches!(waitpid(None, None), Err(nix::errno::Errno::ECHILD)) {}
        return Ok(());
    }
    let killed_at_teardown = count_others();
    let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
    while !matches!(waitpid(None, None), Err(nix::errno::Errno::ECHILD)) {}
    send(ctl, &Event::Exited { code, signal, killed_at_teardown });
    Ok(())
}

/// Reaps every exited child; returns the program's (exit code, signal) once it has ended,
/// whatever the signal (a real-time one too: `sys::reap_one`).
fn reap(program: Pid) -> Option<(Option<i32>, Option<i32>)> {
    let mut result = None;
    while let Some((pid, ended)) = sys::reap_one() {
        if pid == program.as_raw() {
            result = Some(match ended {
                sys::Ended::Exited(code) => (Some(code), None),
                sys::Ended::Signaled(sig) => (None, Some(sig)),
            });
        }
    }
    result
}

/// Processes of the namespace other than init, from /proc.
fn count_others() -> u32 {
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    let n = dir.filter_map(Result::ok).filter(|e| e.file_name().to_str().is_some_and(|n| n != "1" && n.bytes().all(|b| b.is_ascii_digit()))).count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Points fds 0, 1 and 2 at `dev_null`.
pub(crate) fn stdio_to_dev_null(dev_null: &str) -> nix::Result<()> {
    let null = nix::fcntl::open(dev_null, nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())?;
    nix::unistd::dup2_stdin(&null)?;
    nix::unistd::dup2_stdout(&null)?;
    nix::unistd::dup2_stderr(&null)?;
    Ok(())
}

/// In the forked program process: limits, credentials, capabilities, no_new_privs, landlock,
/// seccomp, then exec. Returns only on failure. A template's program keeps root and its
/// capabilities inside its user namespace (it must create its children's namespaces and
/// mounts) and gets neither landlock nor seccomp (which would forbid that); its children apply
/// all of them before the caller's first instruction.
fn exec_program(spec: &SpawnSpec) -> Result<std::convert::Infallible, StepError> {
    // Nothing ignored comes through exec from the service or from us (`sys::signals_default`).
    step("signals", crate::sys::signals_default())?;
    if spec.template_slots > 0 {
        step("sigmask", SigSet::all().thread_unblock())?;
        step("setsid", nix::unistd::setsid())?;
        limits(spec, true)?;
        step("no_new_privs", nix::sys::prctl::set_no_new_privs())?;
    } else {
        drop_privileges(spec, true)?;
    }
    let argv: Vec<CString> = step("argv", spec.argv.iter().map(|a| CString::new(a.as_str())).collect::<Result<_, _>>())?;
    let env: Vec<CString> = step("env", spec.env.iter().map(|(k, v)| CString::new(format!("{k}={v}"))).collect::<Result<_, _>>())?;
    let err = nix::unistd::execve(&argv[0], &argv, &env).expect_err("execve returns only on failure");
    Err(StepError::new("exec", format!("{}: {err}", spec.argv[0])))
}

/// Every rlimit of the program that does not come from the profile, as (resource, soft = hard).
/// None is inherited from the service (whose limits an administrator or a systemd unit may
/// have raised, e.g. `LimitMEMLOCK=infinity` or a real-time priority):
///
/// - `RLIMIT_CORE` 1: see [`CORE_LIMIT_BYTES`] (pinned by seccomp).
/// - `RLIMIT_RTPRIO` 0, `RLIMIT_NICE` 0, `RLIMIT_RTTIME` 0: no real-time scheduling and no
///   priority above normal, so a program cannot starve the host's CPUs with SCHED_FIFO.
/// - `RLIMIT_MEMLOCK` 64 KiB: the kernel's historic default; neither runtime locks memory, and
///   io_uring and bpf (which charge it) are refused by seccomp.
/// - `RLIMIT_MSGQUEUE` 819200 bytes: the kernel's default for POSIX message queues.
/// - `RLIMIT_SIGPENDING` 4096 queued signals: far above what a runtime queues, far below a host's
///   default (about 60,000 on a 16 GiB machine).
/// - `RLIMIT_STACK` 8 MiB: the usual default; an inherited `unlimited` would switch the kernel
///   to the legacy mmap layout, and glibc sizes thread stacks from it.
/// - `RLIMIT_CPU`, `RLIMIT_DATA`, `RLIMIT_AS`, `RLIMIT_RSS`, `RLIMIT_LOCKS` unlimited: CPU time
///   and memory are the cgroup's and the timeout's to bound (V8 reserves far more address
///   space than it uses); RSS and LOCKS are not enforced by Linux.
///
/// A value above the inherited hard limit is lowered to it (a sandbox's user namespace cannot
/// raise a hard limit): stricter, never weaker.
pub const FIXED_RLIMITS: [(nix::sys::resource::Resource, u64); 13] = {
    use nix::sys::resource::{Resource, RLIM_INFINITY};
    [
        (Resource::RLIMIT_CORE, CORE_LIMIT_BYTES),
        (Resource::RLIMIT_RTPRIO, 0),
        (Resource::RLIMIT_NICE, 0),
        (Resource::RLIMIT_RTTIME, 0),
        (Resource::RLIMIT_MEMLOCK, 64 << 10),
        (Resource::RLIMIT_MSGQUEUE, 819_200),
        (Resource::RLIMIT_SIGPENDING, 4096),
        (Resource::RLIMIT_STACK, 8 << 20),
        (Resource::RLIMIT_CPU, RLIM_INFINITY),
        (Resource::RLIMIT_DATA, RLIM_INFINITY),
        (Resource::RLIMIT_AS, RLIM_INFINITY),
        (Resource::RLIMIT_RSS, RLIM_INFINITY),
        (Resource::RLIMIT_LOCKS, RLIM_INFINITY),
    ]
};

/// The rlimits of the program (every one of the kernel's 16: [`FIXED_RLIMITS`] and the
/// profile's NOFILE, FSIZE and NPROC), and its working directory. `template`: a template's own
/// program, which keeps the inherited NPROC (its children's inits run as its uid).
fn limits(spec: &SpawnSpec, template: bool) -> Result<(), StepError> {
    use nix::sys::resource::Resource;
    for (resource, value) in FIXED_RLIMITS {
        step("rlimit", set_rlimit(resource, value))?;
    }
    step("rlimit_nofile", set_rlimit(Resource::RLIMIT_NOFILE, spec.rlimits.nofile))?;
    step("rlimit_fsize", set_rlimit(Resource::RLIMIT_FSIZE, spec.rlimits.fsize_bytes))?;
    if !template {
        step("rlimit_nproc", set_rlimit(Resource::RLIMIT_NPROC, spec.rlimits.nproc))?;
    }
    step("chdir", nix::unistd::chdir(spec.cwd.as_str()))
}

/// Sets soft and hard limit of `resource` to `value`, or to the current hard limit if that is lower.
fn set_rlimit(resource: nix::sys::resource::Resource, value: u64) -> Result<(), String> {
    let (_, hard) = nix::sys::resource::getrlimit(resource).map_err(|e| format!("{resource:?}: {e}"))?;
    let value = value.min(hard);
    nix::sys::resource::setrlimit(resource, value, value).map_err(|e| format!("{resource:?} = {value}: {e}"))
}

/// Whether the host's `kernel.core_pattern` (global, read through the sandbox's /proc) sends
/// crashes to a socket (`@`); true when it cannot be read.
fn core_pattern_is_socket() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/core_pattern").map_or(true, |p| p.starts_with('@'))
}

/// Everything between init's fork and the caller's first instruction, in the program process:
/// signals unblocked, own session, rlimits, no capabilities in any set, the program's uid and
/// gid, dumpable again when `execs` is false, no_new_privs, landlock, seccomp. Shared by the
/// cold path (`execs`: followed by exec, which makes the process dumpable itself) and a
/// template's children (followed by a return into the pre-imported interpreter).
pub(crate) fn drop_privileges(spec: &SpawnSpec, execs: bool) -> Result<(), StepError> {
    step("sigmask", SigSet::all().thread_unblock())?;
    step("setsid", nix::unistd::setsid())?;
    limits(spec, false)?;
    // Empty the bounding and ambient sets while we still hold CAP_SETPCAP, then change to the
    // unprivileged uid, which clears the permitted and effective sets.
    step("capabilities", caps::clear(None, caps::CapSet::Ambient))?;
    step("capabilities", caps::clear(None, caps::CapSet::Inheritable))?;
    step("capabilities", caps::clear(None, caps::CapSet::Bounding))?;
    let (uid, gid) = (Uid::from_raw(spec.program_uid), Gid::from_raw(SANDBOX_UID));
    step("setgroups", nix::unistd::setgroups(&[]))?;
    step("setresgid", nix::unistd::setresgid(gid, gid, gid))?;
    step("setresuid", nix::unistd::setresuid(uid, uid, uid))?;
    let left = step("capabilities", caps::read(None, caps::CapSet::Permitted))?;
    if !left.is_empty() {
        return Err(StepError::new("capabilities", format!("capabilities survived the uid change: {left:?}")));
    }
    // The uid change made the process non-dumpable (`fs.suid_dumpable` 0), so its /proc/self
    // files belonged to root and its own mem, ns and pagemap were closed to it. A cold program's
    // exec makes it dumpable again; a warm one never execs, so it is made so here: only
    // processes of its own uid (its own children) and none of another execution's may then read
    // or ptrace it, and RLIMIT_CORE 1 keeps its crashes from a file or pipe core_pattern. A
    // socket core_pattern (`@`, Linux 6.16+) ignores RLIMIT_CORE and is sent the whole image,
    // which for a warm program is mostly its template's: there (or when the pattern cannot be
    // read) it stays non-dumpable, as a warm program was before.
    if !execs && !core_pattern_is_socket() {
        step("dumpable", nix::sys::prctl::set_dumpable(true))?;
    }
    step("no_new_privs", nix::sys::prctl::set_no_new_privs())?;
    // Exactly the ABI init reported, or nothing runs.
    crate::wall::restrict(spec).map_err(|e| StepError::new("landlock", e))?;
    crate::seccomp::install_given(&spec.seccomp_bpf).map_err(|e| StepError::new("seccomp", e))
}
