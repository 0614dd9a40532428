//! The readiness self-test: every kernel step an execution needs, done once for real, each
//! reported, so that a platform that forbids one (read-only cgroupfs, masked /proc, a seccomp
//! profile that refuses unshare, no /dev/net/tun) makes the node not ready naming the step,
//! instead of failing executions later. Like an execution, the isolating part runs in our own
//! binary re-executed ([`SELFTEST_ARGV0`], single-threaded), never on the daemon's threads:
//!
//! ```text
//! engine: cgroup        create <parent>/selftest-<pid>-<n>, write memory.max, cpu.max, pids.max
//!  └─ sandbox-selftest  cgroup_join; namespaces (clone user/pid/mount/net/ipc/uts/cgroup);
//!      │                uid_map; tun (allowlist profiles: /dev/net/tun in the new netns)
//!      └─ pid 1         proc (a fresh /proc in the new mount namespace); landlock; seccomp
//! ```

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::mount::{mount, MsFlags};
use nix::sys::wait::{waitpid, WaitStatus};
use serde::{Deserialize, Serialize};

use crate::cgroup::{Cgroup, Layout, Limits};
use crate::helper::NAMESPACES;
use crate::sys::{self, Forked};

/// `argv[0]` of the self-test process; the binary's `main` dispatches on it first, as for the helper.
pub const SELFTEST_ARGV0: &str = "sandbox-selftest";

/// One step of the self-test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// `cgroup`, `cgroup_join`, `namespaces`, `uid_map`, `tun`, `proc`, `landlock`, `seccomp`.
    pub name: String,
    /// Whether it worked.
    pub ok: bool,
    /// What was done, or the kernel's answer.
    pub detail: String,
}

/// What the self-test process is told (its only argument, JSON).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Plan {
    cgroup_join: Vec<PathBuf>,
    uid_base: u32,
    tun: bool,
}

/// Runs the self-test: creates a cgroup `selftest-<pid>-<n>` under `parent` with small limits,
/// starts `helper` as [`SELFTEST_ARGV0`] to do the rest, and removes the cgroup. `tun`: whether
/// an allowlist profile exists (then `/dev/net/tun` must work). Never fails: a step that did not
/// work is a [`Step`] with `ok: false`, and the steps after it that depend on it are not tried.
pub fn run(helper: &Path, layout: Option<&Layout>, parent: &str, uid_base: u32, tun: bool) -> Vec<Step> {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let mut steps = Vec::new();
    let name = format!("selftest-{}-{}", std::process::id(), COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let limits = Limits { memory_max_bytes: 64 << 20, cpu_max: 0.5, pids_max: 16 };
    let cgroup = match layout.map(|l| Cgroup::create(l, parent, &name, limits)) {
        Some(Ok(cg)) => {
            let dir = cg.dirs()[0].display().to_string();
            steps.push(ok("cgroup", format!("created {dir} with memory, cpu and pids limits")));
            Some(cg)
        }
        Some(Err(e)) => {
            steps.push(fail("cgroup", chain(&e)));
            None
        }
        None => {
            steps.push(fail("cgroup", "no cgroup hierarchy with memory, cpu and pids".into()));
            None
        }
    };
    if cgroup.is_some() {
        let plan = Plan { cgroup_join: cgroup.as_ref().map(Cgroup::join_files).unwrap_or_default(), uid_base, tun };
        steps.extend(spawn(helper, &plan));
    }
    if let Some(cg) = cgroup {
        if let Err(e) = cg.kill_all(Duration::from_secs(5)).and_then(|()| cg.remove()) {
            steps.push(fail("cgroup_remove", chain(&e)));
        }
    }
    steps
}

/// The first failed step, as "self-test step NAME: DETAIL".
pub fn first_failure(steps: &[Step]) -> Option<String> {
    steps.iter().find(|s| !s.ok).map(|s| format!("self-test step {}: {}", s.name, s.detail))
}

/// `e` and its causes, "a: b: c" (the step's detail must name the kernel's answer).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

fn ok(name: &str, detail: String) -> Step {
    Step { name: name.into(), ok: true, detail }
}

fn fail(name: &str, detail: String) -> Step {
    Step { name: name.into(), ok: false, detail }
}

/// Starts the self-test process and reads its steps (one JSON line each) for up to 20 s.
fn spawn(helper: &Path, plan: &Plan) -> Vec<Step> {
    use std::os::unix::process::CommandExt;
    let arg = serde_json::to_string(plan).expect("a plan serializes");
    let child = Command::new(helper).arg0(SELFTEST_ARGV0).arg(arg).env_clear().stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return vec![fail("spawn", format!("{}: {e}", helper.display()))],
    };
    let stdout = child.stdout.take().expect("stdout is piped");
    let started = Instant::now();
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout).lines().map_while(Result::ok).filter_map(|l| serde_json::from_str::<Step>(&l).ok()).collect::<Vec<_>>()
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if started.elapsed() < Duration::from_secs(20) => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let mut steps = reader.join().unwrap_or_default();
    let expected_last = "seccomp";
    if !steps.iter().any(|s| !s.ok) && !steps.iter().any(|s| s.name == expected_last) {
        let detail = match status {
            None => "the self-test process did not finish within 20 s".to_owned(),
            Some(s) => format!("the self-test process ended ({s}) before reporting every step"),
        };
        steps.push(fail("selftest", detail));
    }
    steps
}

/// Entry point of the self-test process (`argv[0]` = [`SELFTEST_ARGV0`], `argv[1]` = the plan).
/// Prints one [`Step`] per line on stdout and exits 0 when every step worked.
pub fn selftest_main() -> ! {
    let plan: Plan = std::env::args().nth(1).and_then(|a| serde_json::from_str(&a).ok()).unwrap_or_default();
    let code = match outer(&plan) {
        Ok(code) => code,
        Err((name, detail)) => {
            report(&fail(name, detail));
            1
        }
    };
    std::process::exit(code)
}

type StepError = (&'static str, String);

fn report(step: &Step) {
    let mut line = serde_json::to_vec(step).expect("a step serializes");
    line.push(b'\n');
    // One write per line (below PIPE_BUF), so the two processes' lines never interleave.
    let _ = std::io::stdout().lock().write_all(&line);
}

fn done<T, E: std::fmt::Display>(name: &'static str, r: Result<T, E>, detail: impl FnOnce(&T) -> String) -> Result<T, StepError> {
    match r {
        Ok(v) => {
            report(&ok(name, detail(&v)));
            Ok(v)
        }
        Err(e) => Err((name, e.to_string())),
    }
}

/// The host side: join the cgroup, clone pid 1 into new namespaces, map its ids, make its TUN.
fn outer(plan: &Plan) -> Result<i32, StepError> {
    for file in &plan.cgroup_join {
        std::fs::write(file, "0").map_err(|e| ("cgroup_join", format!("{}: {e}", file.display())))?;
    }
    report(&ok("cgroup_join", "joined through cgroup.procs/tasks".into()));
    let (go_read, go_write) = nix::unistd::pipe().map_err(|e| ("pipe", e.to_string()))?;
    // As the helper does: the user namespace is created by an unprivileged host uid, so that
    // root owns neither it nor the network namespace, and the steps below meet the checks an
    // execution meets (opening init's namespace needs CAP_SYS_PTRACE, a TUN in it CAP_NET_ADMIN:
    // a container without them passed a self-test cloned by root and failed allowlist runs).
    crate::helper::become_owner(plan.uid_base).map_err(|e| ("namespaces", format!("namespace owner: {e}")))?;
    let forked = sys::clone_namespaces(NAMESPACES);
    if matches!(forked, Ok(Forked::Parent(_)) | Err(_)) {
        nix::unistd::seteuid(nix::unistd::Uid::from_raw(0)).map_err(|e| ("namespaces", format!("seteuid(0): {e}")))?;
    }
    let forked = forked.map_err(|e| ("namespaces", format!("clone(user, pid, mount, net, ipc, uts, cgroup): {e}")))?;
    let init = match forked {
        Forked::Child => {
            drop(go_write);
            let mut byte = [0u8; 1];
            if !matches!(nix::unistd::read(&go_read, &mut byte), Ok(1)) {
                sys::exit_now(1);
            }
            let code = match inner() {
                Ok(()) => 0,
                Err((name, detail)) => {
                    report(&fail(name, detail));
                    1
                }
            };
            sys::exit_now(code)
        }
        Forked::Parent(pid) => pid,
    };
    drop(go_read);
    report(&ok("namespaces", "clone(user, pid, mount, net, ipc, uts, cgroup)".into()));
    let map = format!("0 {} 1\n", plan.uid_base);
    let mapped = std::fs::write(format!("/proc/{init}/uid_map"), &map)
        .and_then(|()| std::fs::write(format!("/proc/{init}/gid_map"), &map))
        .map_err(|e| ("uid_map", e.to_string()));
    let tunned = mapped.and_then(|()| {
        report(&ok("uid_map", format!("root inside is host uid {}", plan.uid_base)));
        if plan.tun {
            let path = format!("/proc/{init}/ns/net");
            let netns = std::fs::File::open(&path).map_err(|e| ("tun", format!("{path}: {e}")))?;
            nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| ("tun", format!("setns({path}): {e}")))?;
            done("tun", sys::tun_create(crate::tun::DEVICE).map_err(|e| format!("/dev/net/tun: {e}")), |_| {
                "created a TUN device in the new network namespace (allowlist profiles need it)".into()
            })?;
        }
        Ok(())
    });
    if let Err(e) = tunned {
        // pid 1 sees EOF and leaves.
        drop(go_write);
        let _ = waitpid(init, None);
        return Err(e);
    }
    let _ = nix::unistd::write(go_write.as_fd(), b"g");
    drop(go_write);
    loop {
        match waitpid(init, None) {
            Ok(WaitStatus::Exited(_, code)) => return Ok(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Err(("seccomp", format!("pid 1 of the self-test died by {sig}"))),
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(("wait", e.to_string())),
        }
    }
}

/// Pid 1 of the new namespaces: a fresh /proc, landlock, seccomp, as the program gets them.
fn inner() -> Result<(), StepError> {
    let root = nix::unistd::Uid::from_raw(0);
    nix::unistd::setresuid(root, root, root).map_err(|e| ("uid_map", format!("setresuid(0) inside: {e}")))?;
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>).map_err(|e| ("proc", format!("making / private: {e}")))?;
    crate::rootfs::mount_proc(Path::new("/proc"), &[]).map_err(|e| ("proc", e.message))?;
    report(&ok("proc", "mounted a fresh /proc of the new pid namespace".into()));
    nix::sys::prctl::set_no_new_privs().map_err(|e| ("landlock", format!("no_new_privs: {e}")))?;
    let spec = crate::spec::SpawnSpec { system_dirs: vec!["/".into()], ..Default::default() };
    let abi = crate::wall::restrict(&spec).map_err(|e| ("landlock", e))?;
    report(&ok("landlock", if abi == 0 { "absent: only profiles with landlock_min_abi = 0 run".into() } else { format!("restricted at ABI {abi}") }));
    crate::seccomp::install_given(&[]).map_err(|e| ("seccomp", e))?;
    report(&ok("seccomp", "the allowlist filter is loaded".into()));
    Ok(())
}
