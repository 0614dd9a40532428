//! Warm starts: the child side of a template. A template is a sandbox whose program (a Python
//! interpreter that has imported its environment's libraries) never runs caller code; per
//! execution it forks, into a pid namespace of its own
//! ([`crate::sys::warm_ffi::sandbox_warm_new_pid_namespace`]), and the forked child calls
//! [`enter`] (through `libsandbox_warm.so`) with a control socket from the engine. `enter` gives
//! that child everything a cold execution gets before the caller's first instruction, then
//! returns in the program process only:
//!
//! ```text
//! template (root of the template's user namespace, capabilities inside it only)
//!  └─ child = init  pid 1 of its own pid namespace (the template forked it there): reads its
//!      │             SpawnSpec; joins the execution's cgroup (through files the engine
//!      │             opened); unshares mount, net, ipc, uts and cgroup namespaces; binds its
//!      │             own /workspace, /code, /etc/passwd; fresh /tmp, /dev/shm; hides /.sandbox;
//!      │             hostname; lo up; not dumpable; fresh /proc; then, as the cold init:
//!      │             forwards signals, reaps, reports `Exited`
//!      └─ program    pid 3 (never the template's 2); rlimits, no capabilities, its own uid,
//!                    no_new_privs, landlock, seccomp; returns into the interpreter, which runs
//!                    the harness
//! ```
//!
//! The child is the sandbox's init itself, so a warm execution costs one copy of the
//! template's address space besides the program's (an init forked by the child was a third:
//! ~4.5 ms of fork and exit for the analysis environment, measured on the host).
//!
//! The user namespace is the template's (it maps one uid per execution slot); every other
//! namespace, the cgroup, the uid, the workspace and the protocol on the control socket are
//! the execution's own, exactly as on the cold path.

use std::io::BufReader;
use std::os::unix::net::UnixStream;

use nix::sched::CloneFlags;

use crate::helper::send;
use crate::spec::{Event, SpawnSpec, WARM_TREES};
use crate::step::{step, StepError};
use crate::sys::{self, Forked};

/// Namespaces a template's child enters itself (the user namespace stays the template's; the
/// pid namespace is one the child was forked into).
const NAMESPACES: CloneFlags =
    CloneFlags::CLONE_NEWNS.union(CloneFlags::CLONE_NEWNET).union(CloneFlags::CLONE_NEWIPC).union(CloneFlags::CLONE_NEWUTS).union(CloneFlags::CLONE_NEWCGROUP);

/// Entry point of a template's forked child, `ctl_fd` being its control socket. Returns 0 in
/// the program process, sandboxed and ready to run the caller's code; non-zero when set-up
/// failed (a `failed` event on the socket says where; the caller must `_exit`). The calling
/// process, pid 1 of its pid namespace, becomes the sandbox's init and never returns: it exits
/// when the program has ended.
pub fn enter(ctl_fd: i32) -> i32 {
    let Ok(ctl) = sys::take_control_socket(ctl_fd) else { return 2 };
    match child(&ctl) {
        Ok(()) => {
            // The program keeps no descriptor of the engine's but stdio and the side channel.
            drop(ctl);
            0
        }
        Err(StepError { step: name, message }) => {
            send(&ctl, &Event::Failed { step: name.into(), message });
            1
        }
    }
}

fn child(ctl: &UnixStream) -> Result<(), StepError> {
    // The sandbox's pid 1 is this process: a template that did not fork it into a pid namespace
    // of its own (an older template script) gets no execution.
    let pid = nix::unistd::getpid().as_raw();
    if pid != 1 {
        return Err(StepError::new(
            "pid_namespace",
            format!("the child is pid {pid} of its pid namespace, not pid 1: the template did not fork it into one of its own"),
        ));
    }
    // The engine sends the spec once this process is in the execution's cgroup.
    let spec = SpawnSpec::read_frame(&mut BufReader::new(ctl))?;
    // Into the execution's cgroup before anything else: "0" moves this (single-threaded)
    // process, through the files the engine opened (its credentials are the ones checked).
    for i in 0..spec.cgroup_join.len() {
        let fd = i32::try_from(WARM_TREES.len() + 5 + i).map_err(|e| StepError::new("cgroup_join", e.to_string()))?;
        let file = std::fs::File::from(step("cgroup_join", sys::take_fd(fd))?);
        step("cgroup_join", std::io::Write::write_all(&mut &file, b"0"))?;
    }
    step("setgroups", nix::unistd::setgroups(&[]))?;
    step("unshare", nix::sched::unshare(NAMESPACES))?;
    crate::rootfs::warm_child(&spec)?;
    step("hostname", nix::unistd::sethostname(&spec.hostname))?;
    step("loopback", sys::loopback_up())?;
    // Pid 1 of the execution from here on, as a cold init: no one may ptrace it or read its
    // memory; its own /proc. (No parent-death signal: its parent is the template, whose
    // interpreter may die while the execution runs on; the engine holds this process's pidfd.)
    step("dumpable", nix::sys::prctl::set_dumpable(false))?;
    send(ctl, &Event::Started { init_pid: 0 });
    // The program is pid 3, not 2: the template is pid 2 of its own sandbox, and a library that
    // notices a fork by its pid changing (tempfile's name generator, connection pools) would
    // otherwise take the program for the template and keep what it drew there (every warm
    // execution's temporary names were the same). The pid namespace's last pid, set here (this
    // process is root of the namespace's user namespace), makes the next fork pid 3.
    crate::rootfs::mount_proc(std::path::Path::new("/proc"), &[("kernel/ns_last_pid", "2".to_owned())])?;
    let handled = crate::init::handled_signals();
    step("sigmask", handled.thread_block())?;
    // Refuse a kernel below the profile's landlock minimum before anything runs.
    let abi = crate::wall::enforceable_abi();
    if abi < spec.landlock_min_abi {
        return Err(StepError::new("landlock", crate::wall::below_minimum(abi, spec.landlock_min_abi)));
    }
    if spec.hold {
        // As a cold init: the program starts once the execution is on record.
        crate::init::wait_for_go()?;
    }
    match step("fork", sys::fork())? {
        Forked::Child => {}
        Forked::Parent(program) => {
            if let Err(StepError { step: name, message }) = crate::init::supervise(program, &handled, ctl, abi, false) {
                send(ctl, &Event::Failed { step: name.into(), message });
                sys::exit_now(1)
            }
            sys::exit_now(0)
        }
    }
    // The program: the same steps as a cold program before its exec.
    crate::init::drop_privileges(&spec, false)
}
