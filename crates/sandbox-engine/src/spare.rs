//! Helpers started ahead of their execution.
//!
//! A cold start used to fork the engine, exec our binary as `sandbox-init` and let it load and
//! relocate itself before it could read its spawn spec: 2-3 ms on every cold execution's
//! critical path. An [`IdleHelper`] is that process started early, blocked reading its control
//! socket. It holds nothing of any execution until its spec arrives (no cgroup, namespace,
//! mount, file or secret: its environment is empty and its only descriptors are its own
//! pipes), so starting it early changes what runs when, not what any sandbox gets: the spec,
//! the clone into new namespaces, the uid maps, init's set-up and the program are those of a
//! helper started at the last moment. Each is used once.
//!
//! [`Spare`] keeps at most one. `sandbox run` forks one from its `main` while it is still
//! single-threaded ([`EarlySpare::fork`]: no exec; the child overwrites the arguments and
//! environment it inherited), or, when that fails, starts one by a thread as soon as its
//! arguments and configuration say the run is a cold start that can use it
//! ([`EarlySpare::start`]); either way before the audit log is opened and the host probed, so
//! it gets ready while those run, the audit `begin` is written and the sandbox's directories
//! and cgroup are prepared. A service has a thread of its own keep one ready.

use std::os::fd::{AsRawFd as _, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use nix::unistd::Pid;
use sandbox_runtime::spec::{CONTROL_FD, RESULT_FD};
use sandbox_runtime::HELPER_ARGV0;

use crate::supervise::SuperviseError;

/// A helper process of ours, by pid. Until it is reaped the pid stays ours (an exited helper is
/// a zombie), so signalling it cannot reach another process.
#[derive(Debug)]
pub(crate) struct HelperProcess {
    pid: Pid,
    reaped: bool,
}

impl HelperProcess {
    /// SIGKILL, unless it was reaped already.
    /// Errors: `kill(2)`'s.
    pub(crate) fn kill(&mut self) -> nix::Result<()> {
        match self.reaped {
            true => Ok(()),
            false => nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGKILL),
        }
    }

    /// Blocks until it has exited, and reaps it.
    /// Errors: `waitpid(2)`'s (other than `EINTR`, retried, and `ECHILD`: already reaped).
    pub(crate) fn wait(&mut self) -> nix::Result<()> {
        while !self.reaped {
            match nix::sys::wait::waitpid(self.pid, None) {
                Ok(_) | Err(nix::errno::Errno::ECHILD) => self.reaped = true,
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reaps it if it has exited; `Ok(true)` while it runs.
    /// Errors: `waitpid(2)`'s (other than `ECHILD`: already reaped).
    pub(crate) fn running(&mut self) -> nix::Result<bool> {
        if self.reaped {
            return Ok(false);
        }
        match nix::sys::wait::waitpid(self.pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
            Ok(nix::sys::wait::WaitStatus::StillAlive) => Ok(true),
            Ok(_) | Err(nix::errno::Errno::ECHILD) => {
                self.reaped = true;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

/// A helper process that is killed and reaped (on a thread of its own) if dropped unreaped.
#[derive(Debug)]
pub(crate) struct Reaped(pub(crate) Option<HelperProcess>);

impl Reaped {
    /// Its host pid; `None` once reaped.
    pub(crate) fn pid(&self) -> Option<i32> {
        self.0.as_ref().map(|c| c.pid.as_raw())
    }

    /// Whether it has not exited (a failed check counts as exited).
    pub(crate) fn alive(&mut self) -> bool {
        self.0.as_mut().is_some_and(|c| matches!(c.running(), Ok(true)))
    }

    /// SIGKILLs it, leaving it to be reaped ([`Reaped::kill_and_wait`], or the drop).
    pub(crate) fn kill(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
        }
    }

    /// SIGKILLs it and reaps it, blocking (a helper whose init is gone only has its exit
    /// left, which this does not wait for a stopped one to take).
    pub(crate) fn kill_and_wait(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Reaps it, on tokio's blocking pool (it has exited or is about to: its control socket's
    /// EOF said so).
    pub(crate) async fn reap(mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = tokio::task::spawn_blocking(move || c.wait()).await;
        }
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = std::thread::Builder::new().name("reap-helper".into()).spawn(move || c.wait());
        }
    }
}

/// A started helper waiting for its spawn spec, and the engine's ends of its descriptors.
pub(crate) struct IdleHelper {
    /// The process (killed and reaped if dropped unused).
    pub(crate) helper: Reaped,
    /// The engine's end of the control socket (fd 3 inside): the spec goes out, events come back.
    pub(crate) ctl: UnixStream,
    /// Write end of the program's stdin; read ends of its stdout and stderr.
    pub(crate) stdin: OwnedFd,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
    /// Read end of the harness's side channel (fd 4 inside).
    pub(crate) side: OwnedFd,
    /// The engine's end of the network channel (fd 5 inside): allowlist profiles only.
    pub(crate) net: Option<UnixStream>,
}

impl IdleHelper {
    /// Starts `helper` (the binary, [`crate::EngineOptions::helper`]) as `sandbox-init` with an
    /// empty environment, piped stdio, the control socket on fd 3, the side channel's write end
    /// on fd 4 and, when `net`, the network channel on fd 5. It waits until a spec is written
    /// on the control socket, and exits when the socket closes first.
    ///
    /// The helper's parent-death signal (set once it has its spec) follows the thread that
    /// started it ([`spawn_with_fds`]), so call this from a thread that outlives the execution
    /// (a runtime worker, the main thread, the pool's filler or the spare's own thread), never
    /// from tokio's blocking pool, whose idle threads exit.
    /// Errors: [`SuperviseError::Descriptor`] (a pipe or socket), [`SuperviseError::SpawnHelper`]
    /// (the binary cannot be started, or a descriptor not moved out of the way).
    pub(crate) fn spawn(helper: &Path, net: bool) -> Result<Self, SuperviseError> {
        let (fds, ends) = Self::channels(net)?;
        let pid = spawn_with_fds(helper, HELPER_ARGV0, fds).map_err(|source| SuperviseError::SpawnHelper { helper: helper.to_owned(), source })?;
        Ok(ends.started(pid))
    }

    /// A helper forked from this process, which must still be single-threaded (`sandbox run`'s
    /// `main`, before anything else): [`sandbox_runtime::fork_helper`], with the descriptors
    /// [`IdleHelper::spawn`] gives, but no network channel (a cold start without an allowlist).
    /// Errors: [`SuperviseError::Descriptor`] (a pipe or socket); [`SuperviseError::SpawnHelper`]
    /// (`fork(2)` failed, or the process has more than one thread).
    fn fork(helper: &Path) -> Result<Self, SuperviseError> {
        let (fds, ends) = Self::channels(false)?;
        let pid = sandbox_runtime::fork_helper(&fds).map_err(|source| SuperviseError::SpawnHelper { helper: helper.to_owned(), source })?;
        drop(fds);
        Ok(ends.started(pid))
    }

    /// The helper's descriptors, each with the number it gets inside (stdio, the control
    /// socket on 3, the side channel on 4, the network channel on 5 when `net`), and the
    /// engine's ends.
    /// Errors: [`SuperviseError::Descriptor`].
    fn channels(net: bool) -> Result<(Vec<(OwnedFd, RawFd)>, Ends), SuperviseError> {
        let descriptor = |what| move |source| SuperviseError::Descriptor { what, source };
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| descriptor("pipe")(e.into()));
        let (side, side_write) = pipe()?;
        let (ctl, helper_end) = UnixStream::pair().map_err(descriptor("socketpair"))?;
        let (stdin_read, stdin) = pipe()?;
        let (stdout, stdout_write) = pipe()?;
        let (stderr, stderr_write) = pipe()?;
        let mut fds: Vec<(OwnedFd, RawFd)> =
            vec![(stdin_read, 0), (stdout_write, 1), (stderr_write, 2), (helper_end.into(), CONTROL_FD), (side_write, RESULT_FD)];
        let net = match net {
            true => {
                let (engine, helper) = UnixStream::pair().map_err(descriptor("socketpair"))?;
                fds.push((helper.into(), sandbox_runtime::tun::NET_FD));
                Some(engine)
            }
            false => None,
        };
        Ok((fds, Ends { ctl, stdin, stdout, stderr, side, net }))
    }
}

/// The engine's ends of a helper's descriptors, before the helper exists.
struct Ends {
    ctl: UnixStream,
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
    side: OwnedFd,
    net: Option<UnixStream>,
}

impl Ends {
    fn started(self, pid: Pid) -> IdleHelper {
        let Self { ctl, stdin, stdout, stderr, side, net } = self;
        IdleHelper { helper: Reaped(Some(HelperProcess { pid, reaped: false })), ctl, stdin, stdout, stderr, side, net }
    }
}

/// Starts `program` as `argv0` with an empty environment, an empty signal mask, and each
/// `(fd, number)` of `fds` as that descriptor number (all else the caller holds is close-on-exec, as everything Rust opens
/// is). `posix_spawn(3)`, which glibc runs as
/// `clone(CLONE_VM | CLONE_VFORK)`: unlike `fork(2)` (what `std::process::Command` falls back to
/// when descriptors must be moved), it neither copies this process's page tables nor leaves
/// its pages copy-on-write for every thread of a large multi-threaded service to fault on.
/// The child's parent is the calling thread (its parent-death signal follows that thread).
/// Our ends of `fds` are closed once it has started.
/// Errors: the program cannot be started (`posix_spawn`'s error, e.g. `ENOENT`), or a
/// descriptor cannot be duplicated.
fn spawn_with_fds(program: &Path, argv0: &str, fds: Vec<(OwnedFd, RawFd)>) -> std::io::Result<Pid> {
    use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags};
    let target_max = fds.iter().map(|(_, n)| *n).max().unwrap_or(0);
    // Every source above every target number first (close-on-exec), so that no `dup2` onto a
    // target overwrites a source still to be moved; a `dup2` onto a target clears its
    // close-on-exec flag, and the sources then close at exec.
    let high: Vec<(OwnedFd, RawFd)> =
        fds.into_iter().map(|(fd, n)| sandbox_runtime::dup_above(std::os::fd::AsFd::as_fd(&fd), target_max + 1).map(|h| (h, n))).collect::<Result<_, _>>()?;
    let mut actions = PosixSpawnFileActions::init()?;
    for (fd, n) in &high {
        actions.add_dup2(fd.as_raw_fd(), *n)?;
    }
    // No signal blocked from the calling thread. Dispositions are left alone: the helper's Rust
    // runtime sets its own, and the program's exec resets them all (`sys::signals_default`).
    let mut attr = PosixSpawnAttr::init()?;
    attr.set_flags(PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK)?;
    attr.set_sigmask(&nix::sys::signal::SigSet::empty())?;
    let path = std::ffi::CString::new(program.as_os_str().as_bytes())?;
    let argv0 = std::ffi::CString::new(argv0)?;
    let env: [&std::ffi::CStr; 0] = [];
    Ok(nix::spawn::posix_spawn(path.as_c_str(), &actions, &attr, &[argv0], &env)?)
}

/// How long [`Spare::take`] waits for a helper being started (a start takes 1-3 ms; one that
/// takes longer is left to finish for the next execution).
const TAKE_PATIENCE: std::time::Duration = std::time::Duration::from_millis(100);

/// How often the refill thread checks that the waiting helper is alive.
const LIVENESS_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// At most one [`IdleHelper`] kept for the next cold start of a profile without an allowlist
/// network (an allowlist's helper needs the network channel, so it is started at its run).
pub(crate) struct Spare {
    inner: Arc<Inner>,
}

struct Inner {
    helper: PathBuf,
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    idle: Option<IdleHelper>,
    /// A refill thread runs and starts another helper whenever the slot is empty.
    keeping: bool,
    /// How many more helpers the refill thread may start; `None`: no limit.
    starts_left: Option<u32>,
    /// The refill thread is starting one now (between its fork and its exec).
    starting: bool,
    stopped: bool,
    /// A service's helper taken by an execution that still runs ([`SpareRefill`] token,
    /// take time): the next start waits for its end, at most [`crate::pool::REFILL_DEFER_MAX`].
    deferred: Option<(u64, std::time::Instant)>,
    /// The token of the next [`SpareRefill`].
    next_token: u64,
}

/// Held by a service's execution that took the waiting helper, until its result is complete
/// (it goes with the execution's [`crate::prepare::Prepared`], as [`crate::pool::Refill`]
/// does): dropping it lets the spare's thread start the next helper. Started at the take,
/// that helper's exec, loading and network namespace took the CPU the execution needed
/// (`JOB=cold bash bench/ab.sh`: `setupMs` mean ~2.2-2.6 against ~4.7-5.2 ms, p50 ~0.5 ms
/// less; README "Performance").
pub(crate) struct SpareRefill {
    inner: std::sync::Weak<Inner>,
    token: u64,
}

impl Drop for SpareRefill {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            let mut s = inner.lock();
            if s.deferred.is_some_and(|(t, _)| t == self.token) {
                s.deferred = None;
            }
            drop(s);
            inner.wake.notify_all();
        }
    }
}

impl Spare {
    /// An empty slot for helpers of the binary `helper`.
    pub(crate) fn new(helper: PathBuf) -> Self {
        Self { inner: Arc::new(Inner { helper, state: Mutex::new(State::default()), wake: Condvar::new() }) }
    }

    /// Keeps a helper waiting from now on: a thread of its own starts one whenever the slot is
    /// empty (after each [`Spare::take`]), at most `starts` times (`None`: until
    /// [`Spare::stop`]). A start that fails is retried after a second. The caller does not wait
    /// for the fork and exec (`sandbox run` passes `Some(1)`: its main thread goes on with the
    /// audit log and the preparation meanwhile).
    pub(crate) fn keep(&self, starts: Option<u32>) {
        {
            let mut s = self.lock();
            if s.keeping || s.stopped {
                return;
            }
            s.keeping = true;
            s.starts_left = starts;
        }
        let inner = self.inner.clone();
        let started = std::thread::Builder::new().name("spare-helper".into()).spawn(move || inner.refill());
        if let Err(e) = started {
            tracing::warn!(error = %e, "cannot start the spare helper's thread");
            self.lock().keeping = false;
        }
    }

    /// The waiting helper, if one is and it is still alive (a dead one is dropped). With a
    /// limited number of starts (`sandbox run`'s one), one being started is waited for, up to
    /// [`TAKE_PATIENCE`]: its fork is done and its exec under way, so it is ready sooner than a
    /// helper the caller would start now, and a second start would only compete with it for
    /// the CPUs (`sandbox run` took one in four runs before its spare had finished starting,
    /// and so paid for two: ~3 ms). A service's spare (no limit) is never waited for: a
    /// runtime worker serving other executions' streams must not block on it. Blocks the
    /// calling thread.
    /// A service's take (no limit of starts) also returns a [`SpareRefill`]: the next helper
    /// is started once the caller drops it (after its execution's result and teardown) or
    /// [`crate::pool::REFILL_DEFER_MAX`] after the take.
    pub(crate) fn take(&self) -> Option<(IdleHelper, Option<SpareRefill>)> {
        let mut s = self.lock();
        if s.idle.is_none() && s.starting && s.starts_left.is_some() {
            s = self
                .inner
                .wake
                .wait_timeout_while(s, TAKE_PATIENCE, |s| s.idle.is_none() && s.starting && !s.stopped)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        let mut idle = s.idle.take()?;
        if !idle.helper.alive() {
            drop(s);
            self.inner.wake.notify_all();
            return None;
        }
        let refill = s.starts_left.is_none().then(|| {
            let token = s.next_token;
            s.next_token += 1;
            s.deferred = Some((token, std::time::Instant::now()));
            SpareRefill { inner: Arc::downgrade(&self.inner), token }
        });
        drop(s);
        self.inner.wake.notify_all();
        Some((idle, refill))
    }

    /// Stops keeping a helper, and kills and reaps the waiting one (service shutdown, end of
    /// `sandbox run`). Reaped here, not on a thread of its own as a dropped one is: `sandbox run`
    /// ends its process right after (`std::process::exit`), which would leave the dead helper to
    /// whoever inherits it, a zombie under a PID 1 that reaps no stranger. A waiting helper only
    /// reads its control socket: it dies at once.
    pub(crate) fn stop(&self) {
        let idle = {
            let mut s = self.lock();
            s.stopped = true;
            s.idle.take()
        };
        self.inner.wake.notify_all();
        if let Some(mut idle) = idle {
            idle.helper.kill_and_wait();
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock()
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The refill thread. The helpers it forks have it as their parent thread: their
    /// parent-death signal fires when it exits, which would kill an execution that took one.
    /// So it never returns; after [`Spare::stop`] or its last start it only sleeps (one parked
    /// thread). A waiting helper that died (killed from outside) is replaced within
    /// [`LIVENESS_CHECK`].
    fn refill(&self) -> ! {
        let mut s = self.lock();
        loop {
            loop {
                let deferred = s.deferred.map(|(_, at)| crate::pool::REFILL_DEFER_MAX.saturating_sub(at.elapsed()));
                if s.stopped || s.starts_left == Some(0) {
                    s = self.wake.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner);
                } else if let Some(left) = deferred.filter(|d| !d.is_zero()) {
                    // The execution that took the last one still runs.
                    s = self.wake.wait_timeout(s, left).unwrap_or_else(std::sync::PoisonError::into_inner).0;
                } else if s.idle.as_mut().is_some_and(|h| h.helper.alive()) {
                    s = self.wake.wait_timeout(s, LIVENESS_CHECK).unwrap_or_else(std::sync::PoisonError::into_inner).0;
                } else {
                    break;
                }
            }
            // Dropping a dead one only reaps it.
            s.idle = None;
            s.deferred = None;
            s.starts_left = s.starts_left.map(|n| n - 1);
            s.starting = true;
            drop(s);
            let started = IdleHelper::spawn(&self.helper, false);
            s = self.lock();
            s.starting = false;
            // A take() may be waiting for this one.
            self.wake.notify_all();
            match started {
                Ok(h) if !s.stopped => s.idle = Some(h),
                Ok(unused) => drop(unused),
                Err(e) => {
                    tracing::warn!(error = %e.message(), "cannot start a spare helper; retrying in 1 s");
                    s = self.wake.wait_timeout(s, std::time::Duration::from_secs(1)).unwrap_or_else(std::sync::PoisonError::into_inner).0;
                }
            }
        }
    }
}

impl Drop for Spare {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One helper started before its [`crate::Engine`] exists (`sandbox run`): opening the audit
/// log, recovering and probing the host take ~1.5 ms, and a helper started after them reached
/// its spec ~0.8 ms after the spec was ready (a tracepoint timeline of 28 runs). Hand it to
/// [`crate::Engine::with_spare`]; dropped unused, it kills its helper (and one still starting
/// is killed once started).
pub struct EarlySpare(Spare);

impl EarlySpare {
    /// Starts one helper of the binary `helper` on a thread of its own (see `Spare::keep`);
    /// returns at once. The binary must be the engine's [`crate::EngineOptions::helper`].
    pub fn start(helper: PathBuf) -> Self {
        let spare = Spare::new(helper);
        spare.keep(Some(1));
        Self(spare)
    }

    /// Forks its helper now, from this process ([`sandbox_runtime::fork_helper`]): no exec, so
    /// it is ready ~1 ms sooner and costs ~1.2 ms less CPU than [`EarlySpare::start`]'s. Call it
    /// first thing in `main`: once the process has a second thread it refuses. `helper` is this
    /// binary (`std::env::current_exe`), which the engine must also run as its helper (see
    /// [`crate::Engine::with_spare`]). `None` when a descriptor or the fork fails, or a thread
    /// exists (the caller then starts one the usual way).
    pub fn fork(helper: PathBuf) -> Option<Self> {
        let idle = match IdleHelper::fork(&helper) {
            Ok(idle) => idle,
            Err(e) => {
                tracing::debug!(error = %e.message(), "cannot fork the early helper");
                return None;
            }
        };
        let spare = Spare::new(helper);
        {
            let mut s = spare.lock();
            s.idle = Some(idle);
            s.starts_left = Some(0);
        }
        Some(Self(spare))
    }

    /// The binary its helper runs.
    pub(crate) fn helper(&self) -> &Path {
        &self.0.inner.helper
    }

    pub(crate) fn into_inner(self) -> Spare {
        self.0
    }
}
