//! The helper: our own binary re-executed as `sandbox-init` by the engine, single-threaded.
//! It makes the sandbox's network namespace before its spec arrives, clones init into the
//! other new namespaces and into the execution's cgroup (on v1 init joins it itself, through
//! files the helper opened), writes init's uid/gid maps (host root may map any range; init
//! itself could not), and waits for init. It is never in the execution's cgroup itself.

use std::io::{BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

use nix::sched::CloneFlags;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{getppid, pipe, Uid};

use crate::spec::{Event, SpawnSpec, CONTROL_FD};
use crate::step::{step, StepError};
use crate::sys::{self, Forked};

/// `argv[0]` the engine gives the helper; the binary's `main` dispatches on it before anything
/// else (no threads, no runtime). It is also what `/proc/1/cmdline` shows inside.
pub const HELPER_ARGV0: &str = "sandbox-init";

/// Namespaces every sandbox gets. The helper makes the network namespace itself, before its
/// spec arrives ([`helper_main`]), and clones init with the others (with this whole set only
/// when the kernel refused it that namespace).
pub(crate) const NAMESPACES: CloneFlags = CloneFlags::CLONE_NEWUSER
    .union(CloneFlags::CLONE_NEWPID)
    .union(CloneFlags::CLONE_NEWNS)
    .union(CloneFlags::CLONE_NEWNET)
    .union(CloneFlags::CLONE_NEWIPC)
    .union(CloneFlags::CLONE_NEWUTS)
    .union(CloneFlags::CLONE_NEWCGROUP);

/// Entry point of the helper process. Reads the [`SpawnSpec`] from fd 3, reports [`Event`]s on
/// it, and exits 0 when init ran to its end, 1 when set-up failed (a `failed` event says why).
pub fn helper_main() -> ! {
    // Only stdio, the control socket, the side channel and the network channel (0-5) are the
    // helper's. Anything else came from the engine's own environment without close-on-exec (a
    // shell's or a test runner's descriptors): closed before anything, since a helper started
    // ahead (`spare.rs`) may wait long for its spec. A kernel without close_range (before
    // 5.9) keeps them until `cloexec_from` below keeps them from the program.
    let _ = sys::close_from(6);
    let ctl = match sys::take_control_socket(CONTROL_FD) {
        Ok(s) => s,
        Err(_) => std::process::exit(2),
    };
    // The sandbox's network namespace, made now, while a helper started ahead still waits for
    // its spec: the kernel's set-up of a network namespace (`setup_net`) is ~0.7 ms of CPU on
    // this machine kind, which a clone of init with CLONE_NEWNET spent on every start's critical
    // path. Made here as host root, so it belongs to the host's user namespace, not to init's:
    // nothing in the sandbox has any capability over it (init, root of its own user namespace,
    // could bring an interface up in a network namespace that user namespace owns; here it
    // cannot), and the helper brings loopback up. Each helper serves one execution, so each
    // execution still has a network namespace of its own, made fresh for it. The namespace
    // counts against host root's `max_net_namespaces`, one per helper, however many the
    // program makes (it can make none: unshare and namespace flags of clone are refused). If
    // the kernel refuses, init is cloned into a new network namespace as before.
    let netns_ready = nix::sched::unshare(CloneFlags::CLONE_NEWNET).is_ok() && sys::loopback_up().is_ok();
    let code = match run(&ctl, netns_ready) {
        Ok(code) => code,
        Err(StepError { step, message }) => {
            send(&ctl, &Event::Failed { step: step.into(), message });
            1
        }
    };
    std::process::exit(code)
}

fn run(ctl: &UnixStream, netns_ready: bool) -> Result<i32, StepError> {
    let namespaces = if netns_ready { NAMESPACES.difference(CloneFlags::CLONE_NEWNET) } else { NAMESPACES };
    let spec = SpawnSpec::read_frame(&mut BufReader::new(ctl))?;
    // Die with the engine: an orphaned helper would leave init running.
    step("pdeathsig", nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL))?;
    if engine_gone(&spec) {
        return Err(StepError::new("pdeathsig", "the engine exited before the helper started"));
    }
    // Init is in the execution's cgroup before it does anything: on v2 born there (clone3 with
    // CLONE_INTO_CGROUP); on v1 it joins first thing (`init::join_cgroup`), through the `tasks`
    // files opened here as host root, and only then makes its cgroup namespace, rooted there.
    // The helper itself never enters the cgroup, so an execution's teardown can remove it as
    // soon as init is gone, without waiting for the helper's own exit (on v1 it used to join
    // first and clone init inside).
    let into = match &spec.cgroup_dir {
        Some(dir) => Some(step(
            "cgroup_open",
            nix::fcntl::open(dir, nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
                .map_err(|e| format!("{}: {e}", dir.display())),
        )?),
        None => None,
    };
    let join = |files: &[std::path::PathBuf]| -> Result<(), StepError> {
        for file in files {
            step("cgroup_join", std::fs::write(file, "0").map_err(|e| format!("{}: {e}", file.display())))?;
        }
        Ok(())
    };
    let init_joins = into.is_none() && !spec.cgroup_join.is_empty();
    let join_files = match init_joins {
        true => spec
            .cgroup_join
            .iter()
            .map(|file| step("cgroup_join", std::fs::OpenOptions::new().write(true).open(file).map_err(|e| format!("{}: {e}", file.display()))))
            .collect::<Result<Vec<_>, _>>()?,
        false => Vec::new(),
    };
    let namespaces = if init_joins { namespaces.difference(CloneFlags::CLONE_NEWCGROUP) } else { namespaces };
    // No descriptor but stdio, the control socket and the harness's side channel (fd 4) may
    // reach the container (the network channel, fd 5, is the helper's own and close-on-exec).
    step("cloexec", sys::cloexec_from(5))?;
    let (go_read, go_write) = step("pipe", pipe())?;
    // Create the user namespace as an unprivileged host uid, not as root: the kernel charges the
    // per-user counters of everything inside (inotify instances and watches, pending signals,
    // message queues, locked memory, processes) to the namespace's owner at the host level too,
    // so with root as owner ~128 inotify_init1() calls in any sandbox would exhaust host root's
    // fs.inotify.max_user_instances. The real and saved uid stay 0, so the capabilities stay
    // permitted; we raise them again for the clone and return to euid 0 right after.
    step("namespace_owner", become_owner(spec.namespace_owner()))?;
    let cloned = match &into {
        Some(dir) => match sys::clone_into_cgroup(namespaces, dir.as_fd()) {
            // A kernel without CLONE_INTO_CGROUP (before 5.7) or clone3 (before 5.3): join, then clone.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::E2BIG | libc::EINVAL)) => {
                step("namespace_owner", nix::unistd::seteuid(Uid::from_raw(0)))?;
                join(&spec.cgroup_join)?;
                step("namespace_owner", become_owner(spec.namespace_owner()))?;
                sys::clone_namespaces(namespaces)
            }
            other => other,
        },
        None => sys::clone_namespaces(namespaces),
    };
    if matches!(cloned, Ok(Forked::Parent(_)) | Err(_)) {
        step("namespace_owner", nix::unistd::seteuid(Uid::from_raw(0)))?;
        // An euid change clears the parent-death signal: set it again.
        step("pdeathsig", nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL))?;
        if engine_gone(&spec) {
            return Err(StepError::new("pdeathsig", "the engine exited while the helper cloned init"));
        }
    }
    match step("clone", cloned)? {
        Forked::Child => {
            drop(go_write);
            crate::init::init_main(&spec, go_read, ctl, !netns_ready, join_files)
        }
        Forked::Parent(init) => {
            drop((go_read, join_files));
            // Root inside is host uid_base; the program's uid maps to a host uid no other
            // running execution has (a template maps one uid per child slot).
            step("uid_map", std::fs::write(format!("/proc/{init}/uid_map"), spec.uid_map()))?;
            step("gid_map", std::fs::write(format!("/proc/{init}/gid_map"), spec.gid_map()))?;
            if spec.tun {
                // Allowlist network: init's namespace gets a TUN device whose packets the engine decides.
                crate::tun::setup(init)?;
            }
            send(ctl, &Event::Started { init_pid: init.as_raw() });
            step("release_init", nix::unistd::write(go_write.as_fd(), b"g"))?;
            drop(go_write);
            // Hold no copy of the program's stdio or side channel (fd 4, init's now): its pipes
            // must close when the program ends.
            step("stdio", crate::init::stdio_to_dev_null("/dev/null"))?;
            sys::close_raw(crate::spec::RESULT_FD);
            loop {
                match waitpid(init, None) {
                    Ok(WaitStatus::Exited(_, code)) => return Ok(code),
                    Ok(WaitStatus::Signaled(_, sig, _)) => return Ok(128 + sig as i32),
                    Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => return Err(StepError::new("wait_init", e.to_string())),
                }
            }
        }
    }
}

/// Whether the engine that spawned this helper has exited (the helper was re-parented): its
/// parent is no longer the engine's pid the spec names, or, without one, is pid 1. The engine
/// may itself be pid 1 (the service as a container's first process), hence the pid in the spec.
fn engine_gone(spec: &SpawnSpec) -> bool {
    let parent = getppid().as_raw();
    match spec.engine_pid {
        0 => parent == 1,
        pid => u32::try_from(parent).ok() != Some(pid),
    }
}

/// Sets the effective uid to `owner` (host), keeping every capability effective (`seteuid`
/// away from 0 clears the effective set; the permitted set stays because the saved uid is 0).
pub(crate) fn become_owner(owner: u32) -> Result<(), String> {
    nix::unistd::seteuid(Uid::from_raw(owner)).map_err(|e| format!("seteuid({owner}): {e}"))?;
    let permitted = caps::read(None, caps::CapSet::Permitted).map_err(|e| e.to_string())?;
    caps::set(None, caps::CapSet::Effective, &permitted).map_err(|e| e.to_string())
}

/// Writes one event line to the control socket. A failed write means the engine is gone;
/// there is nobody left to tell, so it is ignored.
pub(crate) fn send(mut ctl: &UnixStream, event: &Event) {
    let mut line = serde_json::to_vec(event).expect("events always serialize");
    line.push(b'\n');
    let _ = ctl.write_all(&line);
}
