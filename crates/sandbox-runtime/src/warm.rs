//! Warm starts: the child side of a template. A template is a sandbox whose program (a Python
//! interpreter that has imported its environment's libraries) never runs caller code; per
//! execution it forks, and the forked child calls [`enter`] (through `libsandbox_warm.so`)
//! with a control socket from the engine. `enter` gives that child everything a cold execution
//! gets before the caller's first instruction, then returns in the program process only:
//!
//! ```text
//! template (root of the template's user namespace, capabilities inside it only)
//!  └─ child      reads its SpawnSpec; joins the execution's cgroup (through files the engine
//!      │          opened); unshares mount, pid, net, ipc, uts and cgroup namespaces; binds its
//!      │          own /workspace, /code, /etc/passwd; fresh /tmp, /dev/shm; hides /.sandbox;
//!      │          hostname; lo up; forks ↓ and waits for it
//!      └─ init    pid 1: fresh /proc, forwards signals, reaps, reports `Exited` (as cold)
//!          └─ program  rlimits, no capabilities, its own uid, no_new_privs, landlock,
//!                      seccomp; returns into the interpreter, which runs the harness
//! ```
//!
//! The user namespace is the template's (it maps one uid per execution slot); every other
//! namespace, the cgroup, the uid, the workspace and the protocol on the control socket are
//! the execution's own, exactly as on the cold path.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;

use nix::sched::CloneFlags;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitStatus};

use crate::helper::send;
use crate::spec::{Event, SpawnSpec, WARM_TREES};
use crate::step::{step, StepError};
use crate::sys::{self, Forked};

/// Namespaces a template's child enters (the user namespace stays the template's).
const NAMESPACES: CloneFlags = CloneFlags::CLONE_NEWNS
    .union(CloneFlags::CLONE_NEWPID)
    .union(CloneFlags::CLONE_NEWNET)
    .union(CloneFlags::CLONE_NEWIPC)
    .union(CloneFlags::CLONE_NEWUTS)
    .union(CloneFlags::CLONE_NEWCGROUP);

/// Entry point of a template's forked child, `ctl_fd` being its control socket. Returns 0 in
/// the program process, sandboxed and ready to run the caller's code; non-zero when set-up
/// failed (a `failed` event on the socket says where; the caller must `_exit`). The child and
/// init processes it creates on the way never return: they exit when the program has ended.
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
    // The engine sends the spec once this process is in the execution's cgroup.
    let mut line = String::new();
    step("read_spec", BufReader::new(ctl).read_line(&mut line))?;
    let spec: SpawnSpec = step("parse_spec", serde_json::from_str(&line))?;
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
    match step("fork", sys::fork())? {
        Forked::Parent(init) => {
            // Outside the new pid namespace: hold nothing of the execution's, wait for its
            // pid 1 and leave with it.
            let _ = crate::init::stdio_to_dev_null("/dev/null");
            let _ = sys::close_from(3);
            let code = loop {
                match waitpid(init, None) {
                    Ok(WaitStatus::Exited(_, code)) => break code,
                    Ok(WaitStatus::Signaled(_, sig, _)) => break 128 + sig as i32,
                    Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => break 1,
                }
            };
            sys::exit_now(code)
        }
        Forked::Child => {}
    }
    // Pid 1 of the execution. If the child above dies, so does the whole namespace.
    let init = || -> Result<nix::unistd::Pid, StepError> {
        step("pdeathsig", nix::sys::prctl::set_pdeathsig(Signal::SIGKILL))?;
        step("dumpable", nix::sys::prctl::set_dumpable(false))?;
        send(ctl, &Event::Started { init_pid: 0 });
        crate::rootfs::mount_proc(std::path::Path::new("/proc"))?;
        let handled = crate::init::handled_signals();
        step("sigmask", handled.thread_block())?;
        // Refuse a kernel below the profile's landlock minimum before anything runs.
        let abi = crate::wall::enforceable_abi();
        if abi < spec.landlock_min_abi {
            return Err(StepError::new("landlock", crate::wall::below_minimum(abi, spec.landlock_min_abi)));
        }
        match step("fork", sys::fork())? {
            Forked::Child => Ok(nix::unistd::Pid::from_raw(0)),
            Forked::Parent(program) => {
                crate::init::supervise(program, &handled, ctl, crate::wall::enforceable_abi(), false)?;
                sys::exit_now(0)
            }
        }
    };
    match init() {
        Ok(_) => {}
        Err(StepError { step: name, message }) => {
            send(ctl, &Event::Failed { step: name.into(), message });
            sys::exit_now(1)
        }
    }
    // The program: the same steps as a cold program before its exec.
    crate::init::drop_privileges(&spec)
}
