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
//! [`Spare`] keeps at most one, started by a thread of its own: `sandbox run` starts one as an
//! [`EarlySpare`] as soon as its arguments and configuration say the run is a cold start that
//! can use it, before the audit log is opened and the host probed (it then starts while those
//! run, the audit `begin` is written and the sandbox's directories and cgroup are prepared); a
//! service has it keep one ready.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use command_fds::{CommandFdExt, FdMapping};
use sandbox_runtime::spec::{CONTROL_FD, RESULT_FD};
use sandbox_runtime::HELPER_ARGV0;

use crate::supervise::SuperviseError;

/// A helper process that is killed and reaped (on a thread of its own) if dropped unreaped.
pub(crate) struct Reaped(pub(crate) Option<std::process::Child>);

impl Reaped {
    /// Its host pid; `None` once reaped.
    pub(crate) fn pid(&self) -> Option<i32> {
        self.0.as_ref().and_then(|c| i32::try_from(c.id()).ok())
    }

    /// Whether it has not exited (a failed check counts as exited).
    pub(crate) fn alive(&mut self) -> bool {
        self.0.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
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
    /// forked it, so call this from a thread that outlives the execution (a runtime worker,
    /// the main thread, the pool's filler or the spare's own thread), never from tokio's
    /// blocking pool, whose idle threads exit.
    /// Errors: [`SuperviseError::Descriptor`] (a pipe or socket), [`SuperviseError::SpawnHelper`],
    /// [`SuperviseError::MissingPipe`].
    pub(crate) fn spawn(helper: &Path, net: bool) -> Result<Self, SuperviseError> {
        let descriptor = |what| move |source| SuperviseError::Descriptor { what, source };
        let (side, side_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| descriptor("pipe")(e.into()))?;
        let (ctl, helper_end) = UnixStream::pair().map_err(descriptor("socketpair"))?;
        let mut fds = vec![FdMapping { parent_fd: helper_end.into(), child_fd: CONTROL_FD }, FdMapping { parent_fd: side_write, child_fd: RESULT_FD }];
        let net = match net {
            true => {
                let (engine, helper) = UnixStream::pair().map_err(descriptor("socketpair"))?;
                fds.push(FdMapping { parent_fd: helper.into(), child_fd: sandbox_runtime::tun::NET_FD });
                Some(engine)
            }
            false => None,
        };
        let mut cmd = std::process::Command::new(helper);
        cmd.arg0(HELPER_ARGV0).env_clear().stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        cmd.fd_mappings(fds).map_err(|e| descriptor("fd mapping")(std::io::Error::other(e)))?;
        let spawned = cmd.spawn();
        // The command holds the helper's ends; drop them so that their only copies live in the
        // helper and init, and EOF means both have exited.
        drop(cmd);
        let mut child = spawned.map_err(|source| SuperviseError::SpawnHelper { helper: helper.to_owned(), source })?;
        let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let helper = Reaped(Some(child));
        Ok(Self {
            helper,
            ctl,
            stdin: stdin.ok_or(SuperviseError::MissingPipe("stdin"))?.into(),
            stdout: stdout.ok_or(SuperviseError::MissingPipe("stdout"))?.into(),
            stderr: stderr.ok_or(SuperviseError::MissingPipe("stderr"))?.into(),
            side,
            net,
        })
    }
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
    pub(crate) fn take(&self) -> Option<IdleHelper> {
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
        self.inner.wake.notify_all();
        drop(s);
        idle.helper.alive().then_some(idle)
    }

    /// Stops keeping a helper and kills the waiting one (service shutdown, end of `sandbox run`).
    pub(crate) fn stop(&self) {
        let idle = {
            let mut s = self.lock();
            s.stopped = true;
            s.idle.take()
        };
        self.inner.wake.notify_all();
        drop(idle);
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
                if s.stopped || s.starts_left == Some(0) {
                    s = self.wake.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner);
                } else if s.idle.as_mut().is_some_and(|h| h.helper.alive()) {
                    s = self.wake.wait_timeout(s, LIVENESS_CHECK).unwrap_or_else(std::sync::PoisonError::into_inner).0;
                } else {
                    break;
                }
            }
            // Dropping a dead one only reaps it.
            s.idle = None;
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
    /// Starts one helper of the binary `helper` on a thread of its own (see [`Spare::keep`]);
    /// returns at once. The binary must be the engine's [`crate::EngineOptions::helper`].
    pub fn start(helper: PathBuf) -> Self {
        let spare = Spare::new(helper);
        spare.keep(Some(1));
        Self(spare)
    }

    /// The binary its helper runs.
    pub(crate) fn helper(&self) -> &Path {
        &self.0.inner.helper
    }

    pub(crate) fn into_inner(self) -> Spare {
        self.0
    }
}
