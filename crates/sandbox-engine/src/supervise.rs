//! Spawn and supervise: start the helper, feed it the spec and stdin, stream stdout/stderr within
//! their caps, enforce the wall-clock timeout (SIGTERM to everything via init, a grace period,
//! then SIGKILL of the pid namespace), and turn what happened into the result's fields.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use nix::sys::signal::Signal;
use sandbox_core::network::NetworkReport;
use sandbox_core::wire::{ExecError, ResourceUsage, WarmStart};
use sandbox_core::{Admitted, ExecutionResult, Language, Status};
use sandbox_runtime::cgroup::Usage;
use sandbox_runtime::spec::Event;
use std::pin::Pin;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use crate::pool::MemberLaunch;
use crate::spare::{IdleHelper, Reaped, Spare};
use crate::warm::Template;
use tokio::sync::{mpsc, Notify};

use crate::prepare::Prepared;
use crate::{ms, EngineOptions};
use sandbox_network::Network;

/// Which stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// A piece of the program's output, streamed as it arrives (only bytes within the cap).
#[derive(Debug, Clone)]
pub struct Chunk {
    /// The stream.
    pub stream: StreamKind,
    /// The bytes, as the program wrote them.
    pub data: Vec<u8>,
}

/// What supervision observed.
#[derive(Debug, Default)]
pub(crate) struct RunOutcome {
    exit: Option<(Option<i32>, Option<i32>)>,
    killed_at_teardown: u32,
    timed_out: bool,
    output_stopped: bool,
    failure: Option<SuperviseError>,
    stdout: Captured,
    stderr: Captured,
    /// What the harness wrote on its side channel (fd 4).
    side: Captured,
    setup_ms: u64,
    run_ms: u64,
    landlock_abi: u32,
    network: Option<NetworkReport>,
    /// How it started warm; `None`: cold.
    pub(crate) warm_start: Option<WarmStart>,
    /// The pooled sandbox it was given ended before the execution started in it: the caller
    /// starts the execution again, cold, in a sandbox of its own.
    pub(crate) start_cold: bool,
    /// It was started cold (the helper's sandbox).
    pub(crate) started_cold: bool,
    /// Init reported the program's end (`Exited`), which it does once it has reaped every
    /// other process of the sandbox, and was not waited for while it tears its namespaces down
    /// (~0.5 ms of the kernel's on this machine kind): the caller reads the usage and the
    /// workspace's files meanwhile, then [`RunOutcome::finish_ending`] before the teardown.
    pub(crate) ending: Option<Ending>,
}

/// What still ends after init's `Exited` ([`RunOutcome::ending`]): init itself, and the helper
/// that waits for it (a cold or pooled start's; none for a template's child).
#[derive(Debug)]
pub(crate) struct Ending {
    helper: Option<Reaped>,
}

impl RunOutcome {
    /// Waits until the sandbox has ended: init, which ends by itself right after its report,
    /// gone (its pidfd, up to [`ENDING_PATIENCE`]); then anything left in the cgroup SIGKILLed
    /// and gone (`Prepared::stop_everything`, which so finds the cgroup empty at its first look
    /// instead of polling it every 2 ms). The helper, which only waited for init and is not in
    /// the execution's cgroup (init was born there or joined it itself), is SIGKILLed and
    /// returned unreaped: the caller reaps it after the teardown, so its exit (~0.3 ms of the
    /// kernel's on this machine kind) runs beside the cgroup's removal and the unmounts instead
    /// of before them. (On a cgroup v2 kernel without `CLONE_INTO_CGROUP`, before 5.7, the
    /// helper joined the cgroup: `stop_everything` then waits for its exit.) Blocks: call it
    /// off the async workers, after the usage and the files are read and before the teardown.
    /// A no-op returning `None` when the run already waited (`ending` is `None`).
    pub(crate) fn finish_ending(ending: Option<Ending>, prepared: &Prepared) -> Option<Reaped> {
        let ending = ending?;
        prepared.wait_init_exit(ENDING_PATIENCE);
        let mut helper = ending.helper;
        if let Some(h) = helper.as_mut() {
            h.kill();
        }
        prepared.stop_everything();
        helper
    }
}

/// How long [`RunOutcome::finish_ending`] waits for an init that reported `Exited` to end by
/// itself before it is killed (it takes ~0.5 ms; a stopped or stuck one is not waited for).
const ENDING_PATIENCE: Duration = Duration::from_secs(1);

/// Why an execution could not be run to its end (status `internal_error`, the message naming
/// the step and its cause: [`SuperviseError::message`]). A warm start that fails so starts cold.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SuperviseError {
    /// A descriptor the run needs could not be made, or made async (`what`: `pipe`,
    /// `socketpair`, `fd mapping`, `side channel`, `control socket`, `stdin pipe`, ...).
    #[error("{what}")]
    Descriptor {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The helper (our binary re-executed) did not start.
    #[error("spawning the helper {}", helper.display())]
    SpawnHelper {
        helper: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The spawn spec could not be sent on the control socket.
    #[error("sending the spec")]
    SendSpec(#[source] std::io::Error),
    /// A warm start could not take a detached copy of one of the execution's mounts.
    #[error("open_tree {}", path.display())]
    OpenTree {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A warm start could not open one of the execution's cgroup files for the child.
    #[error("open {}", path.display())]
    OpenCgroupFile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The template refused or failed the fork.
    #[error("{0}")]
    Fork(String),
    /// The warm child was gone before the engine could know its pid.
    #[error("the warm child ended at once")]
    WarmChildGone,
    /// A child forked ahead could not be lifted from `SCHED_IDLE` before its go (its cgroup's
    /// processes unreadable, or `sched_setscheduler(2)` failed): nothing ran in it.
    #[error("the child forked ahead could not leave SCHED_IDLE")]
    SchedIdle,
    /// The pooled sandbox's helper was already reaped.
    #[error("the pooled sandbox's helper is gone")]
    PooledHelperGone,
    /// The pooled sandbox (or child forked ahead) ended without reading its go byte: nothing of
    /// the execution ran in it.
    #[error("the pooled sandbox ended before its execution started")]
    PooledEndedUnstarted,
    /// The sandbox's set-up failed inside (the runtime's step and message, from its `Failed` event).
    #[error("sandbox set-up failed at {step}: {message}")]
    SetUp { step: String, message: String },
    /// The service shut down, or the CLI command running the execution (`sandbox run`, `env
    /// install`, `env verify`) was interrupted (SIGINT, SIGTERM), while the execution ran
    /// ([`crate::Engine::abort_all`]).
    #[error("the service shut down (or the `sandbox` command running it was interrupted) before the execution ended")]
    ShutDown,
}

impl SuperviseError {
    /// The error and its causes, `: `-separated: the text of the caller's `internal_error`.
    pub(crate) fn message(&self) -> String {
        sandbox_runtime::selftest::chain(self)
    }

    fn descriptor(what: &'static str) -> impl FnOnce(std::io::Error) -> Self {
        move |source| Self::Descriptor { what, source }
    }
}

#[derive(Debug, Default)]
struct Captured {
    bytes: Vec<u8>,
    truncated: bool,
}

/// How long to wait for the output pipes to close once the sandbox has ended; every process
/// holding them is dead by then, so this only bounds a kernel that is slow to tear down.
const DRAIN_PATIENCE: Duration = Duration::from_secs(2);

/// The audit `begin` of an execution whose sandbox is started while it is written:
/// `Some(true)` once it is durable, `Some(false)` when it was refused or failed; `None` while
/// pending. Every start given one holds the program until then: a cold init and a template's
/// child wait for their go byte (`SpawnSpec::hold`), a pooled sandbox or a child forked ahead
/// is sent its go only then.
pub(crate) type Recorded = tokio::sync::watch::Receiver<Option<bool>>;

/// Whether the execution's audit `begin` was refused: no other sandbox may be started for it.
pub(crate) fn refused(recorded: Option<&Recorded>) -> bool {
    recorded.is_some_and(|r| *r.borrow() == Some(false))
}

/// Runs the prepared execution to its end: in `member` when the execution took a pooled sandbox
/// or a template's child (`prepared` is then that member's), else cold (with the helper waiting
/// in `spare` when there is one). With `recorded`, the program of whichever start waits for the
/// execution's audit `begin`, and a refused `begin` starts no other sandbox. A member that ends
/// before its program starts sets [`RunOutcome::start_cold`]: the caller starts the execution
/// again, cold.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(
    opts: &EngineOptions,
    spare: &Spare,
    recorded: Option<Recorded>,
    prepared: &mut Prepared,
    a: &Admitted,
    received: Instant,
    output: Option<mpsc::UnboundedSender<Chunk>>,
    abort: tokio::sync::watch::Receiver<bool>,
    member: Option<MemberLaunch>,
) -> RunOutcome {
    if let Some(m) = member {
        let how = m.how;
        return match attempt(opts, spare, prepared, a, received, output, abort.clone(), Start::Pooled(m), recorded.clone()).await {
            Ok(mut out) => {
                out.warm_start = Some(how);
                out
            }
            // It read EOF for its go (refused, or shut down before it): nothing ran, and nothing may.
            Err(out) if refused(recorded.as_ref()) || *abort.borrow() => out,
            Err(mut out) => {
                let reason = out.failure.as_ref().map(SuperviseError::message).unwrap_or_default();
                tracing::warn!(%reason, "the warm sandbox could not start the execution; starting it cold");
                out.start_cold = true;
                out
            }
        };
    }
    match attempt(opts, spare, prepared, a, received, output, abort, Start::Cold, recorded).await {
        Ok(out) | Err(out) => out,
    }
}

/// How an attempt starts the sandbox.
enum Start {
    /// The helper, now.
    Cold,
    /// A pooled sandbox or a template's child, already running and waiting for its go.
    Pooled(MemberLaunch),
}

/// One way of starting the sandbox: the helper (cold), a pooled sandbox or a template's child.
struct Launched {
    ctl: tokio::net::UnixStream,
    stdin: Option<Pin<Box<dyn AsyncWrite + Send>>>,
    stdout: Pin<Box<dyn AsyncRead + Send>>,
    stderr: Pin<Box<dyn AsyncRead + Send>>,
    /// The helper process: a cold start's, or a pooled sandbox's (none for a template's child).
    helper: Option<Reaped>,
    /// A template's child, the execution's pid 1 (its pidfd is init's in [`Prepared`]).
    warm_child: bool,
    /// A child forked ahead, waiting under `SCHED_IDLE`: lifted before its go.
    sched_idle: bool,
    /// A pooled sandbox: the landlock ABI its `Spawned` reported (the program is running
    /// already; the go byte goes before the stdin).
    pooled: Option<u32>,
    network: Option<Network>,
    spawned_at: Instant,
}

/// Starts the sandbox and supervises it. `Err` carries an outcome whose program never started
/// (for a warm or pooled start: the caller then starts it cold).
#[allow(clippy::too_many_arguments)]
async fn attempt(
    opts: &EngineOptions,
    spare: &Spare,
    prepared: &mut Prepared,
    a: &Admitted,
    received: Instant,
    output: Option<mpsc::UnboundedSender<Chunk>>,
    mut abort: tokio::sync::watch::Receiver<bool>,
    start: Start,
    recorded: Option<Recorded>,
) -> Result<RunOutcome, RunOutcome> {
    let mut out = RunOutcome { started_cold: matches!(start, Start::Cold), ..RunOutcome::default() };
    let fallback = !out.started_cold;
    macro_rules! bail {
        ($e:expr) => {{
            out.failure = Some($e);
            return if fallback { Err(out) } else { Ok(out) };
        }};
    }
    // A pooled sandbox's stdin: a read end of its pipe of our own, to ask once the sandbox has
    // ended whether its go byte was ever read (a member can die between its checkout and its go:
    // killed, or its template's end). A read end, so that the program still sees EOF once its
    // input is written. Bytes written into the pipe so far: `written`.
    let mut go_probe = None;
    let written = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (side_read, launched) = match start {
        Start::Pooled(m) => {
            let warm_child = m.warm_child();
            let MemberLaunch { helper, how, ctl, stdin, stdout, stderr, side, landlock_abi, net } = m;
            go_probe = sandbox_runtime::pipe_reader(std::os::fd::AsFd::as_fd(&stdin)).ok();
            let launched = match (&helper.0, warm_child) {
                (None, false) => Err(SuperviseError::PooledHelperGone),
                _ => launch_pooled(opts, a, helper, warm_child, ctl, [stdin, stdout, stderr], landlock_abi, net).map(|mut l| {
                    // Only a child forked ahead waits under `SCHED_IDLE` (one forked for its
                    // execution copies nothing, and stays as it was).
                    l.sched_idle = how == WarmStart::Prefork;
                    l
                }),
            };
            (side, launched)
        }
        Start::Cold => match launch_cold(opts, spare, a) {
            Ok((side, launched, refill)) => {
                if let Some(r) = refill {
                    prepared.refills.push(Box::new(r));
                }
                (side, Ok(launched))
            }
            Err(e) => bail!(e),
        },
    };
    let side_read = match tokio::net::unix::pipe::Receiver::from_owned_fd(side_read).map_err(SuperviseError::descriptor("side channel")) {
        Ok(r) => r,
        Err(e) => bail!(e),
    };
    let mut l = match launched {
        Ok(l) => l,
        Err(e) => bail!(e),
    };
    let (ctl_read, mut ctl_write) = l.ctl.into_split();
    let mut exec_at: Option<Instant> = None;
    let mut stdin_data = a.stdin.clone();
    if let Some(landlock_abi) = &l.pooled {
        out.landlock_abi = *landlock_abi;
    } else {
        prepared.spec.hold = recorded.is_some();
        let frame = crate::prepare::spec_frame(&mut prepared.spec, true);
        if let Err(e) = ctl_write.write_all(&frame).await {
            bail!(SuperviseError::SendSpec(e));
        }
    }
    // One byte on the program's stdin says go (a cold or warm init reads it, not the program;
    // a pooled sandbox's harness reads a newline), and the rest of stdin is the program's. With
    // `recorded`, the sandbox is built (or a pooled one waits) while the execution's `begin` is
    // written, and the go follows a durable `begin`; the program's clock starts then. Refused:
    // the sandbox reads EOF instead and ends; nothing ran.
    // A shutdown (or an interrupted `sandbox run`) while the `begin` is still being written
    // (it may wait for the audit log to open, or for a busy database) gives no go: the loop
    // below then ends the execution as shut down, and nothing ran.
    let go = match recorded {
        Some(mut recorded) => {
            let mut shutting_down = abort.clone();
            tokio::select! {
                // The shutdown first: both ready, no go.
                biased;
                true = async { shutting_down.wait_for(|a| *a).await.is_ok() } => false,
                written = recorded.wait_for(Option::is_some) => matches!(written.as_deref(), Ok(Some(true))),
            }
        }
        None => true,
    };
    if go && l.sched_idle && !crate::pool::lift_idle(prepared) {
        // A child forked ahead left under `SCHED_IDLE`: not started (it reads EOF and ends).
        bail!(SuperviseError::SchedIdle);
    }
    if l.pooled.is_some() || prepared.spec.hold {
        if go {
            let mut with_go = vec![b'\n'];
            with_go.extend_from_slice(&stdin_data);
            stdin_data = with_go;
            l.spawned_at = Instant::now();
            if l.pooled.is_some() {
                // The pooled program runs already: its code and `_sandbox_run.json` are in /code
                // (`Prepared::fill_member`).
                exec_at = Some(l.spawned_at);
            }
        } else {
            stdin_data = Vec::new();
        }
    }

    let stdin_task = l.stdin.take().map(|mut pipe| {
        let (data, written) = (stdin_data, written.clone());
        tokio::spawn(async move {
            // A program that exits without reading its input closes the pipe: not an error.
            let mut rest = &data[..];
            while let Ok(n @ 1..) = pipe.write(rest).await {
                written.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                rest = &rest[n..];
            }
        })
    });
    let limit_hit = Arc::new(Notify::new());
    let caps = &a.profile.output;
    let stdout_task = Some(tokio::spawn(capture(l.stdout, StreamKind::Stdout, caps.stdout_max_bytes, output.clone(), limit_hit.clone())));
    let stderr_task = Some(tokio::spawn(capture(l.stderr, StreamKind::Stderr, caps.stderr_max_bytes, output.clone(), limit_hit.clone())));
    // Its own cap and no stop: an oversized return value is reported, not streamed.
    let side_task = Some(tokio::spawn(capture(side_read, StreamKind::Stdout, caps.return_max_bytes, None, Arc::new(Notify::new()))));

    let mut events = BufReader::new(ctl_read).lines();
    let mut exited = false;
    let deadline = tokio::time::Instant::from_std(l.spawned_at + Duration::from_millis(a.timeout_ms));
    let grace = Duration::from_millis(a.profile.limits.grace_ms);
    let mut kill_at: Option<tokio::time::Instant> = None;
    let mut aborted = false;
    loop {
        tokio::select! {
            line = events.next_line() => match line {
                Ok(Some(line)) => match serde_json::from_str::<Event>(&line) {
                    Ok(Event::Started { init_pid }) => {
                        // A warm child is its sandbox's pid 1: its pidfd came with the fork.
                        if !l.warm_child {
                            prepared.set_init(Some(init_pid), l.helper.as_ref().and_then(Reaped::pid));
                        }
                    }
                    Ok(Event::Spawned { landlock_abi }) => {
                        exec_at = Some(Instant::now());
                        out.landlock_abi = landlock_abi;
                    }
                    Ok(Event::Failed { step, message }) => {
                        out.failure.get_or_insert(SuperviseError::SetUp { step, message });
                    }
                    Ok(Event::Exited { code, signal, killed_at_teardown }) => {
                        out.exit = Some((code, signal));
                        out.killed_at_teardown = killed_at_teardown;
                        // Every other process of the sandbox is reaped and its pipes closed:
                        // what remains is init's and the helper's own end (RunOutcome::ending).
                        exited = true;
                        break;
                    }
                    Err(e) => tracing::warn!(error = %e, "unreadable helper event"),
                },
                // EOF: the helper and init have both exited.
                Ok(None) | Err(_) => break,
            },
            () = tokio::time::sleep_until(deadline), if !out.timed_out && !out.output_stopped => {
                tracing::info!("timeout: SIGTERM to the sandbox");
                out.timed_out = true;
                prepared.signal_init(Signal::SIGTERM);
                kill_at = Some(tokio::time::Instant::now() + grace);
            }
            () = sleep_until_opt(kill_at) => {
                tracing::info!("grace period over: SIGKILL to the sandbox");
                prepared.signal_init(Signal::SIGKILL);
                prepared.stop().await;
                kill_at = None;
            }
            true = async { abort.wait_for(|a| *a).await.is_ok() }, if out.failure.is_none() => {
                tracing::warn!("service shutting down: ending the execution");
                aborted = true;
                out.failure = Some(SuperviseError::ShutDown);
                prepared.signal_init(Signal::SIGKILL);
                prepared.stop().await;
            }
            () = limit_hit.notified(), if a.profile.output.stop_at_limit && !out.output_stopped && !out.timed_out => {
                tracing::info!("output cap reached: stopping the sandbox");
                out.output_stopped = true;
                prepared.signal_init(Signal::SIGKILL);
            }
        }
    }
    let ended = Instant::now();
    if exited {
        out.ending = Some(Ending { helper: l.helper.take() });
    } else if let Some(helper) = l.helper.take() {
        // It has exited (the control socket's EOF says so): this only reaps it.
        helper.reap().await;
    }
    out.network = l.network.take().map(Network::finish);
    if !exited {
        // Every process of the sandbox is gone once init is; the pipes close with them.
        prepared.stop().await;
    }
    if let Some(t) = stdin_task {
        t.abort();
        // Cancelled, or ended: `written` is final.
        let _ = t.await;
    }
    for (task, slot) in [(stdout_task, &mut out.stdout), (stderr_task, &mut out.stderr), (side_task, &mut out.side)] {
        if let Some(mut task) = task {
            match tokio::time::timeout(DRAIN_PATIENCE, &mut task).await {
                Ok(Ok(c)) => *slot = c,
                _ => {
                    task.abort();
                    tracing::error!("an output pipe stayed open after the sandbox ended");
                }
            }
        }
    }
    // A program that passed the output cap and ended at once (its last writes drained and
    // discarded) can have its `Exited` read before the cap's notice: it still ran past its limit.
    if a.profile.output.stop_at_limit && !out.timed_out && (out.stdout.truncated || out.stderr.truncated) {
        out.output_stopped = true;
    }
    let exec_at = exec_at.unwrap_or(ended);
    out.setup_ms = ms(exec_at.saturating_duration_since(received));
    out.run_ms = ms(ended.saturating_duration_since(exec_at));
    // Nothing written to a pooled sandbox's stdin (its reader was gone), or all of it still
    // unread: its go byte never was read, so nothing of the execution ran in it.
    let sent = written.load(std::sync::atomic::Ordering::Relaxed);
    if !aborted && go_probe.is_some_and(|fd| sent == 0 || sandbox_runtime::pipe_unread(std::os::fd::AsFd::as_fd(&fd)).is_ok_and(|n| n == sent)) {
        out.failure = Some(SuperviseError::PooledEndedUnstarted);
        return Err(out);
    }
    Ok(out)
}

/// Cold start: our binary re-executed as the helper, with the control socket on fd 3, the side
/// channel on fd 4 and, for allowlist profiles, the network channel on fd 5: the one waiting
/// in `spare` when there is one (not for an allowlist), else started now. Returns the side
/// channel's read end and the launch; the spec is sent by the caller.
fn launch_cold(
    opts: &EngineOptions,
    spare: &Spare,
    a: &Admitted,
) -> Result<(std::os::fd::OwnedFd, Launched, Option<crate::spare::SpareRefill>), SuperviseError> {
    let allow = match &a.profile.network {
        sandbox_core::network::Network::Allowlist(allow) => Some(allow),
        sandbox_core::network::Network::None => None,
    };
    let idle = match allow {
        // `sandbox run`'s (a single-threaded runtime) may wait a moment for its helper being
        // started; a service's never waits.
        None => spare.take(),
        Some(_) => None,
    };
    let (IdleHelper { helper, ctl, stdin, stdout, stderr, side, net }, refill) = match idle {
        Some(taken) => taken,
        None => (IdleHelper::spawn(&opts.helper, allow.is_some())?, None),
    };
    let mut l = async_ends(ctl, stdin, stdout, stderr, Instant::now())?;
    l.helper = Some(helper);
    l.network = net.zip(allow).map(|(channel, allow)| Network::start(channel, allow, opts.config.network.upstream_dns));
    Ok((side, l, refill))
}

/// Pooled start: the member's helper (or, for a template's pre-forked child, that child's host
/// pid) and pipes, its program waiting for its go byte; for an allowlist profile, its network
/// starts now, reading the TUN device the helper made when the member started.
#[allow(clippy::too_many_arguments)]
fn launch_pooled(
    opts: &EngineOptions,
    a: &Admitted,
    helper: Reaped,
    warm_child: bool,
    ctl: std::os::unix::net::UnixStream,
    [stdin, stdout, stderr]: [std::os::fd::OwnedFd; 3],
    landlock_abi: u32,
    net: Option<std::os::unix::net::UnixStream>,
) -> Result<Launched, SuperviseError> {
    let allow = match &a.profile.network {
        sandbox_core::network::Network::Allowlist(allow) => Some(allow),
        sandbox_core::network::Network::None => None,
    };
    let mut l = async_ends(ctl, stdin, stdout, stderr, Instant::now())?;
    l.helper = helper.0.is_some().then_some(helper);
    l.pooled = Some(landlock_abi);
    l.warm_child = warm_child;
    l.network = net.zip(allow).map(|(channel, allow)| Network::start(channel, allow, opts.config.network.upstream_dns));
    Ok(l)
}

/// The engine's ends of a started sandbox (control socket, stdin, stdout, stderr) made async:
/// a [`Launched`] with no helper, warm child or network yet.
fn async_ends(
    ctl: std::os::unix::net::UnixStream,
    stdin: std::os::fd::OwnedFd,
    stdout: std::os::fd::OwnedFd,
    stderr: std::os::fd::OwnedFd,
    spawned_at: Instant,
) -> Result<Launched, SuperviseError> {
    let ctl = ctl.set_nonblocking(true).and_then(|()| tokio::net::UnixStream::from_std(ctl)).map_err(SuperviseError::descriptor("control socket"))?;
    let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(stdin).map_err(SuperviseError::descriptor("stdin pipe"))?;
    let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(stdout).map_err(SuperviseError::descriptor("stdout pipe"))?;
    let stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(stderr).map_err(SuperviseError::descriptor("stderr pipe"))?;
    Ok(Launched {
        ctl,
        stdin: Some(Box::pin(stdin)),
        stdout: Box::pin(stdout),
        stderr: Box::pin(stderr),
        helper: None,
        warm_child: false,
        sched_idle: false,
        pooled: None,
        network: None,
        spawned_at,
    })
}

/// The descriptors of one fork request: the child's ends, in the order [`Template::fork`]
/// takes them, and the engine's.
pub(crate) struct ForkFds {
    child: Vec<std::os::fd::OwnedFd>,
    ctl: std::os::unix::net::UnixStream,
    stdin: std::os::fd::OwnedFd,
    stdout: std::os::fd::OwnedFd,
    stderr: std::os::fd::OwnedFd,
}

/// A template's child, forked: the execution's pid 1 (the pidfd the template answered with)
/// and the engine's ends of its control socket, stdin, stdout and stderr.
pub(crate) struct WarmChild {
    pub(crate) pidfd: std::os::fd::OwnedFd,
    pub(crate) ctl: std::os::unix::net::UnixStream,
    pub(crate) stdin: std::os::fd::OwnedFd,
    pub(crate) stdout: std::os::fd::OwnedFd,
    pub(crate) stderr: std::os::fd::OwnedFd,
}

/// The descriptors a template's child of `prepared` gets (its `warm/` files written): a control
/// socket, stdio pipes, the side channel's write end, detached copies of the execution's mounts
/// (the child attaches them in its own mount namespace; the template never sees a host path),
/// and the execution's cgroup files, which the child writes to join, first thing (a process
/// that moves its own single thread skips the v1 global lock, an RCU grace period when another
/// process moves it), so nothing of the execution runs outside its cgroup.
/// Errors: a descriptor, a mount copy or a cgroup file could not be made or opened.
pub(crate) fn fork_fds(prepared: &Prepared, side_write: std::os::fd::OwnedFd) -> Result<ForkFds, SuperviseError> {
    let warm = prepared.dir.join("warm");
    let tree = |path: std::path::PathBuf| sandbox_runtime::open_tree_clone(&path).map_err(|source| SuperviseError::OpenTree { path, source });
    let trees = [tree(prepared.workspace.clone())?, tree(warm.join("code"))?, tree(warm.join("etc/passwd"))?, tree(warm.join("etc/group"))?];
    let (engine_end, child_end) = std::os::unix::net::UnixStream::pair().map_err(SuperviseError::descriptor("socketpair"))?;
    let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| SuperviseError::Descriptor { what: "pipe", source: e.into() });
    let (stdin_r, stdin_w) = pipe()?;
    let (stdout_r, stdout_w) = pipe()?;
    let (stderr_r, stderr_w) = pipe()?;
    let mut child: Vec<std::os::fd::OwnedFd> = vec![child_end.into(), stdin_r, stdout_w, stderr_w, side_write];
    child.extend(trees);
    for f in &prepared.spec.cgroup_join {
        let opened = std::fs::OpenOptions::new().write(true).open(f);
        child.push(opened.map(std::os::fd::OwnedFd::from).map_err(|source| SuperviseError::OpenCgroupFile { path: f.clone(), source })?);
    }
    Ok(ForkFds { child, ctl: engine_end, stdin: stdin_w, stdout: stdout_r, stderr: stderr_r })
}

impl ForkFds {
    /// Asks `template` to fork the child (blocks for its answer; see [`Template::fork`] for
    /// `ahead`). Our copies of the child's ends close here: only the child holds them after.
    /// Errors: the template refused or failed the fork, or the child was gone at once.
    pub(crate) fn fork(self, template: &Template, ahead: u64) -> Result<WarmChild, SuperviseError> {
        let Self { child, ctl, stdin, stdout, stderr } = self;
        let pidfd = template.fork(&child.iter().collect::<Vec<_>>(), ahead).map_err(SuperviseError::Fork)?;
        drop(child);
        // A pidfd that names no pid: the child was reaped already.
        crate::warm::pidfd_pid(&pidfd).ok_or(SuperviseError::WarmChildGone)?;
        Ok(WarmChild { pidfd, ctl, stdin, stdout, stderr })
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Reads a pipe to EOF, keeping the first `cap` bytes and discarding the rest (memory stays bounded).
async fn capture(
    mut pipe: impl AsyncRead + Unpin,
    stream: StreamKind,
    cap: u64,
    sink: Option<mpsc::UnboundedSender<Chunk>>,
    limit_hit: Arc<Notify>,
) -> Captured {
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut c = Captured::default();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let room = cap.saturating_sub(c.bytes.len());
        let keep = n.min(room);
        if keep > 0 {
            c.bytes.extend_from_slice(&buf[..keep]);
            if let Some(s) = &sink {
                let _ = s.send(Chunk { stream, data: buf[..keep].to_vec() });
            }
        }
        if keep < n && !c.truncated {
            c.truncated = true;
            limit_hit.notify_one();
        }
    }
    c
}

/// Fills the result from what supervision and the cgroup saw.
pub(crate) fn fill_result(r: &mut ExecutionResult, a: &Admitted, run: RunOutcome, usage: Usage) {
    let (stdout, stdout_b64) = text(run.stdout.bytes);
    let (stderr, stderr_b64) = text(run.stderr.bytes);
    r.stdout = stdout;
    r.stdout_base64 = stdout_b64;
    r.stderr = stderr;
    r.stderr_base64 = stderr_b64;
    r.stdout_truncated = run.stdout.truncated;
    r.stderr_truncated = run.stderr.truncated;
    r.killed_at_teardown = run.killed_at_teardown;
    r.network = run.network;
    r.timed_out = run.timed_out;
    r.timing.setup_ms = run.setup_ms;
    r.timing.warm = run.warm_start.is_some();
    r.timing.warm_start = run.warm_start;
    r.timing.run_ms = run.run_ms;
    r.resource_usage = ResourceUsage { cpu_time_ms: usage.cpu_time_ms, peak_memory_bytes: usage.peak_memory_bytes };
    if let Some(e) = r.enforcement.as_mut() {
        e.landlock_abi = run.landlock_abi;
    }
    let (code, signal) = match run.exit {
        Some(exit) => exit,
        // Killed before init could report: the program died with the namespace, by SIGKILL.
        None if run.timed_out || run.output_stopped => (None, Some(Signal::SIGKILL as i32)),
        None => (None, None),
    };
    r.signal = signal;
    r.signal_name = signal.and_then(signal_name);
    r.exit_code = code.or(signal.map(|s| 128 + s));
    let v8_heap = a.language == Language::Typescript
        && (signal == Some(Signal::SIGABRT as i32) || code == Some(134))
        && r.stderr.contains("JavaScript heap out of memory");
    r.oom_killed = (usage.oom_kills > 0 && (signal.is_some() || run.exit.is_none())) || v8_heap;
    r.status = if let Some(f) = run.failure {
        let f = f.message();
        tracing::error!(failure = %f, "execution failed");
        r.error = Some(ExecError::new("internal_error", format!("{f} (execution {})", r.execution_id)));
        Status::InternalError
    } else if run.timed_out {
        Status::Timeout
    } else if r.oom_killed {
        Status::MemoryLimit
    } else if run.output_stopped {
        Status::OutputLimit
    } else if code == Some(0) {
        Status::Ok
    } else if run.exit.is_none() {
        r.error = Some(ExecError::new("internal_error", format!("the sandbox ended without reporting an exit (execution {})", r.execution_id)));
        Status::InternalError
    } else {
        Status::Error
    };
    apply_side_channel(r, a, &run.side);
}

/// What the harness reports on its side channel: one JSON object, `{"returnData": value}` from
/// the function harness (`null` included: a function that returned None), or
/// `{"error": {type, message, traceback?, line?, column?}}` for an uncaught exception (written by
/// `harness.py` / `harness.mjs`).
enum SideReport {
    Returned(serde_json::Value),
    Raised(ExecError),
}

impl SideReport {
    fn parse(bytes: &[u8]) -> Result<Self, String> {
        let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        let serde_json::Value::Object(mut o) = v else { return Err("not a JSON object".into()) };
        match (o.remove("returnData"), o.remove("error")) {
            (_, Some(e)) => serde_json::from_value(e).map(Self::Raised).map_err(|e| e.to_string()),
            (Some(v), None) => Ok(Self::Returned(v)),
            (None, None) => Err("neither returnData nor error".into()),
        }
    }
}

/// Takes the harness's report into the result: `returnData` for a function that returned, the
/// structured error for a program that raised. Only a program that ran to an exit is believed:
/// after a timeout or a limit, the status and its error stand.
fn apply_side_channel(r: &mut ExecutionResult, a: &Admitted, side: &Captured) {
    if side.bytes.is_empty() && !side.truncated {
        return;
    }
    if !matches!(r.status, Status::Ok | Status::Error) {
        return;
    }
    let fail = |r: &mut ExecutionResult, kind: &str, message: String| {
        r.status = Status::Error;
        r.return_data = None;
        r.error = Some(ExecError::new(kind, message));
    };
    if side.truncated {
        return fail(
            r,
            "ReturnDataTooLarge",
            format!("the return value is larger than the profile's output.return_max_bytes ({} bytes)", a.profile.output.return_max_bytes),
        );
    }
    match SideReport::parse(&side.bytes) {
        Ok(SideReport::Raised(e)) => {
            r.status = Status::Error;
            r.error = Some(e);
        }
        Ok(SideReport::Returned(v)) if a.harness == sandbox_core::Harness::Function => {
            if r.status == Status::Ok {
                r.return_data = Some(v);
            }
        }
        Ok(SideReport::Returned(_)) => {}
        Err(e) => fail(
            r,
            "HarnessProtocolError",
            format!("the harness side channel (fd 4) did not hold one JSON report ({e}); did the program write to fd 4 itself?"),
        ),
    }
}

/// Lossy text, plus the exact bytes in base64 when they were not valid UTF-8.
fn text(bytes: Vec<u8>) -> (String, Option<String>) {
    match String::from_utf8(bytes) {
        Ok(s) => (s, None),
        Err(e) => {
            let bytes = e.into_bytes();
            (String::from_utf8_lossy(&bytes).into_owned(), Some(base64::engine::general_purpose::STANDARD.encode(&bytes)))
        }
    }
}

/// The first real-time signal as the sandboxed runtimes (glibc builds of Python and Node) and
/// `kill -l` number them: glibc's `SIGRTMIN()`, 34 on Linux (the kernel's 32 and 33 are its
/// threads'). A constant, not this binary's `SIGRTMIN()`: musl's is 35, and a static musl build
/// named a program's `SIGRTMIN+2` `SIGRTMIN+1`.
const RTMIN: i32 = 34;

/// The name of signal `n`: `SIGKILL`, ...; a real-time signal as `SIGRTMIN` or `SIGRTMIN+k`,
/// counted from [`RTMIN`] up to the kernel's last signal (64, `SIGRTMAX`). `None` for a number
/// that is no signal.
fn signal_name(n: i32) -> Option<String> {
    if let Ok(s) = Signal::try_from(n) {
        return Some(s.as_str().to_owned());
    }
    let (min, max) = (RTMIN, 64);
    match n - min {
        0 => Some("SIGRTMIN".to_owned()),
        k if k > 0 && n <= max => Some(format!("SIGRTMIN+{k}")),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
