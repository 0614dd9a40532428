//! `sandbox run`: one execution from the command line.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use base64::Engine as _;
use sandbox_core::wire::{FileContent, SkipReason};
use sandbox_core::{Config, ErrorCode, ExecutionRequest, Status};
use sandbox_engine::{Caller, Chunk, EarlySpare, NoHooks, Service, StreamKind};

/// How `sandbox run --warm` starts the execution.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum WarmStart {
    /// The language's own way: a Python profile forks from a template, a TypeScript one takes a
    /// pooled sandbox. Also `template`, the `[warm] mode` and `timing.warmStart` name.
    #[value(alias = "template")]
    Fork,
    /// A Python profile runs in a child forked from its template before the execution (as the
    /// service's pools of template children do); a TypeScript one takes a pooled sandbox.
    Prefork,
    /// A pooled sandbox, for either language.
    Pool,
}

/// Arguments of `sandbox run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Profile to run under. Default: `python-default` or `typescript-default` by language.
    #[arg(long, short = 'p')]
    profile: Option<String>,
    /// `python` or `typescript`. Default: the profile's, else from FILE's extension (.ts, .mts), else python.
    #[arg(long, short = 'l')]
    language: Option<String>,
    /// The program's source file.
    #[arg(required_unless_present = "code", conflicts_with = "code")]
    file: Option<PathBuf>,
    /// The program's source, inline.
    #[arg(short = 'c', long = "code", value_name = "CODE")]
    code: Option<String>,
    /// Input file placed at /workspace/NAME with PATH's content (repeatable).
    #[arg(long = "file", value_name = "NAME=PATH")]
    files: Vec<String>,
    /// Feed this file to the program's standard input (`-` for this command's own stdin).
    #[arg(long, value_name = "PATH")]
    stdin: Option<PathBuf>,
    /// Wall-clock timeout: `20s`, `1m`, `500ms`, or a bare number of milliseconds (`20000`), as
    /// `timeout` in the HTTP API. At least 100 ms (a smaller bare number is almost surely
    /// seconds and is refused with `invalid_timeout`), at most the profile's maximum.
    #[arg(long, value_parser = parse_timeout, value_name = "DURATION|MS")]
    timeout: Option<std::time::Duration>,
    /// Only return output files matching this glob (repeatable), e.g. `*.png`, `results/**`.
    #[arg(long = "output", value_name = "GLOB")]
    outputs: Vec<String>,
    /// `script` (run the file) or `function` (call `main(input)`; its return value is printed as
    /// JSON after the program's output). Default: the profile's.
    #[arg(long, value_name = "HARNESS")]
    harness: Option<String>,
    /// The function harness's input, as JSON text (e.g. `'{"n": 3}'`) or `@PATH` to read a JSON file.
    #[arg(long, value_name = "JSON")]
    input: Option<String>,
    /// Environment variable for the program (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Print the full result object as JSON instead of streaming the program's output.
    #[arg(long)]
    json: bool,
    /// Write the output files here (created if missing). Symlinks are never followed, hidden
    /// names (`.git/...`) are refused, and files get the directory's owner.
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    /// With --out-dir: replace files that already exist (else they are kept and reported).
    #[arg(long, requires = "out_dir")]
    overwrite: bool,
    /// Install the profile's environment first if it is missing (`sandbox env install`), with progress on stderr.
    #[arg(long)]
    install: bool,
    /// Start the execution warm, as `sandbox serve` does for warm profiles (here whatever the
    /// profile's `[warm] mode` says): `--warm` (`--warm=fork`): a Python profile forks from a
    /// template, a TypeScript one runs in a pre-started pooled sandbox; `--warm=prefork`: a
    /// Python profile runs in a child its template forked and sandboxed before the execution;
    /// `--warm=pool`: either runs in a pre-started pooled sandbox. Starts the template or pool,
    /// waits until it is ready, runs, and stops it. Slower than a cold run for one execution;
    /// for checking the warm paths. An allowlist-network profile, which no template serves,
    /// takes a pooled sandbox whichever way is asked.
    #[arg(long, value_enum, num_args = 0..=1, require_equals = true, default_missing_value = "fork", value_name = "HOW", conflicts_with = "server")]
    warm: Option<WarmStart>,
    /// Run on a `sandbox serve` at this URL (e.g. http://127.0.0.1:8080) instead of locally.
    /// Exits 5 when the service cannot be reached.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// API key for --server.
    #[arg(long, env = "SANDBOX_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
}

/// Forks the helper of a cold start now, when this process's arguments ask for a local `sandbox
/// run` ([`EarlySpare::fork`]): global options, `run`, and none of `--server`, `--warm`,
/// `--help`, `--version` (a value that merely looks like one of them only costs the fork: the
/// helper is dropped unused, as it is when the profile turns out to have an allowlist network).
/// Must run before any thread exists: `main` calls it first.
pub fn early_helper() -> Option<EarlySpare> {
    use std::os::unix::ffi::OsStringExt as _;
    use zeroize::Zeroize as _;
    // Read from copies, which are zeroed before the fork: the helper's memory is a copy of this
    // process's, and keeps nothing of the invocation (the fork overwrites the originals there).
    let mut args: Vec<Vec<u8>> = std::env::args_os().skip(1).map(std::ffi::OsString::into_vec).collect();
    let local = is_local_run(&args);
    args.zeroize();
    drop(args);
    if !local {
        return None;
    }
    EarlySpare::fork(std::env::current_exe().ok()?)
}

/// Whether `args` (without argv\[0\]) are a `run` that runs here: [`early_helper`].
fn is_local_run(args: &[Vec<u8>]) -> bool {
    let mut args = args.iter().map(Vec::as_slice);
    loop {
        match args.next() {
            Some(b"--config" | b"--data-dir") => {
                args.next();
            }
            Some(a) if a.starts_with(b"--config=") || a.starts_with(b"--data-dir=") => {}
            Some(b"run") => break,
            _ => return false,
        }
    }
    !args.any(|a| matches!(a, b"--server" | b"--warm" | b"--help" | b"-h" | b"--version" | b"-V") || a.starts_with(b"--server=") || a.starts_with(b"--warm="))
}

/// `--timeout`: a bare number is milliseconds (the HTTP API's unit), anything else a humantime
/// duration (`20s`, `1m 30s`, `500ms`). Errors: the text, with the forms accepted.
fn parse_timeout(s: &str) -> Result<std::time::Duration, String> {
    if let Ok(ms) = s.trim().parse::<u64>() {
        return Ok(std::time::Duration::from_millis(ms));
    }
    humantime::parse_duration(s).map_err(|e| format!("{e}; write a duration such as 20s or 500ms, or milliseconds such as 20000"))
}

/// Exit code of `sandbox run --server` when the service cannot be reached (connection refused,
/// reset or timed out) or answers something that is not the API.
pub const UNREACHABLE: u8 = 5;

/// Runs one execution and maps its result to an exit code: the program's own, 128+signal when a
/// signal ended it, [`TIMEOUT_EXIT`] (124) at its timeout, 2 for a rejected request, 3 when the
/// host cannot run it, 4 for an internal error, [`UNREACHABLE`] (5) when `--server` cannot be
/// reached. Interrupted (SIGINT, SIGTERM), once what ran is ended and removed, the code is
/// 128+signal and `main` ends the process by the signal itself ([`crate::interrupt::end_by`]).
/// `early`: the helper `main` forked ([`early_helper`]), used for a cold start without an
/// allowlist network, else dropped (which kills it).
/// A cold local run with a local (SQLite) audit log does not return once its result is written:
/// it ends the process (`std::process::exit` with that code), so nothing a caller would do after
/// it runs.
pub fn run(config: Config, data_dir: PathBuf, args: RunArgs, early: Option<EarlySpare>) -> anyhow::Result<ExitCode> {
    let request = build_request(&args)?;
    if let Some(url) = &args.server {
        return run_remote(url, request, &args);
    }
    // A cold start's helper: the one `main` forked, else one started now, so that its start
    // overlaps opening the audit log, probing the host, the audit `begin` and the sandbox's
    // preparation (an allowlist profile starts its own at its run; a warm one needs none).
    let cold = args.warm.is_none() && config.profiles.get(&request.profile).is_some_and(|p| p.network == sandbox_core::network::Network::None);
    let early = cold.then(|| early.or_else(|| std::env::current_exe().ok().map(EarlySpare::start))).flatten();
    if let Some(env) = config.profiles.get(&request.profile).and_then(|p| p.environment.clone()) {
        let envs = sandbox_engine::environment::Environments::for_runtime(&config.runtime, &data_dir);
        if envs.installed_in(&config, &env).is_none() {
            if args.install {
                crate::env::install(&config, &data_dir, &env)?;
            } else {
                installed_elsewhere(&config, &data_dir, &env);
            }
        }
    }
    let (engine, audit) = crate::audit::engine_opening(config, data_dir)?;
    let engine = match early {
        Some(early) => engine.with_spare(early),
        None => engine,
    };
    let engine = std::sync::Arc::new(engine);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // A Ctrl-C (SIGINT) or a SIGTERM ends what runs, and the command then ends by it: a
    // warm start is stopped and removed, an execution is ended as a service's shutdown ends it
    // (killed, torn down, recorded). Dying at once instead left their cgroups, mounts and
    // directories until the next run's recovery. The streams exist from the warm start on, or
    // from the execution's admission: before, nothing of the run exists on the host.
    let mut signals: Signals = if args.warm.is_some() { signal_streams(&rt) } else { None };
    // A data directory no sandbox can use (`mktemp -d` makes one) is refused here, with the fix,
    // by the availability check every door makes (runtime_unavailable, exit 3).
    if let Some(how) = args.warm.filter(|_| engine.availability(&request.profile).is_ok()) {
        if let Err(stopped) = warm_start(&engine, &request.profile, how, &rt, &mut signals) {
            // Whatever of the warm start exists is stopped and removed (processes, cgroups,
            // directories). The thread still waiting for it is not waited for; the audit log's
            // open is (its recovery is not cut short), and its failure is the one reported.
            engine.stop_warm();
            let unopened = opened_or_exit(&rt, &mut signals, &audit);
            rt.shutdown_background();
            return match stopped {
                WarmStopped::Interrupted(sig) => {
                    errln!("sandbox: interrupted by {} during the warm start: it was stopped and removed; nothing ran", signal_name(sig));
                    Ok(crate::interrupt::end_by(sig))
                }
                WarmStopped::Failed(e) => Err(unopened.unwrap_or(e)),
            };
        }
    }
    // Decode → submit → run → encode, as every door does; one slot, no queue.
    let service = std::sync::Arc::new(Service::new(engine.clone(), 1, 0, std::sync::Arc::new(NoHooks)));
    let profile = request.profile.clone();
    let ticket = match service.submit(&Caller::local(crate::audit::cli_caller()), request) {
        Ok(t) => t,
        Err(refusal) => {
            // Nothing runs unrecorded: a log that did not open fails the command, as it says.
            if let Some(e) = audit.failure() {
                return Err(e);
            }
            let code = finish(&refusal.into_result(&profile), &args)?;
            // A signal that came while the refusal was recorded (the log may have been opening).
            return Ok(match rt.block_on(pending_interruption(&mut signals)) {
                Some(sig) => {
                    errln!("sandbox: interrupted by {}", signal_name(sig));
                    crate::interrupt::end_by(sig)
                }
                None => code,
            });
        }
    };
    if signals.is_none() {
        signals = signal_streams(&rt);
    }
    let interrupted = std::sync::Arc::new(std::sync::atomic::AtomicI32::new(0));
    let result = rt.block_on(async {
        let watcher = {
            let (engine, interrupted) = (engine.clone(), interrupted.clone());
            tokio::spawn(async move {
                let sig = interruption(&mut signals).await;
                interrupted.store(sig, std::sync::atomic::Ordering::Relaxed);
                engine.abort_all();
                // A second signal insists (the execution's end may wait for a database that does
                // not answer): exit now, as the command did before it handled signals; the next
                // run's recovery sweeps what is left and marks the record interrupted.
                let again = interruption(&mut signals).await;
                errln!("sandbox: interrupted again by {}: exiting at once; the next run sweeps what this one left", signal_name(again));
                crate::interrupt::die(again);
            })
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Chunk>();
        let stream = !args.json;
        let printer = tokio::spawn(async move {
            while let Some(c) = rx.recv().await {
                if stream {
                    let _ = match c.stream {
                        StreamKind::Stdout => std::io::stdout().write_all(&c.data).and_then(|()| std::io::stdout().flush()),
                        StreamKind::Stderr => std::io::stderr().write_all(&c.data).and_then(|()| std::io::stderr().flush()),
                    };
                }
            }
        });
        let result = ticket.run(Some(tx)).await;
        let _ = printer.await;
        watcher.abort();
        result
    });
    // Everything the run started was awaited (the sandbox's teardown and the `finish` record
    // included): the runtime's idle blocking threads are left to end with the process, as
    // dropping the runtime would wait ~0.2 ms for each to wake and exit.
    rt.shutdown_background();
    engine.stop_warm();
    if let Some(e) = audit.failure() {
        return Err(e);
    }
    let code = finish_code(&result, &args)?;
    match interrupted.load(std::sync::atomic::Ordering::Relaxed) {
        // A cold run's sandbox is gone and its record complete (both were awaited), an unused
        // helper killed and reaped (`stop_warm`), and the result written: with a local log the
        // process ends here, without dropping the engine, the log's connection and the runtime's
        // handles one by one (~0.05-0.1 ms of a `sandbox run`); SQLite's files are left as a
        // close leaves them (no checkpoint on close). A PostgreSQL log's connection is closed
        // politely instead (a Terminate message, not an EOF the server logs), and a warm run
        // returns, so that what `stop_warm` stopped is dropped as it always is.
        0 if args.warm.is_none() && sandbox_core::record::Recorder::local(&*audit) => {
            let _ = std::io::stdout().flush();
            std::process::exit(i32::from(code))
        }
        0 => Ok(ExitCode::from(code)),
        sig => {
            errln!("sandbox: interrupted by {}: the execution was ended and its sandbox removed", signal_name(sig));
            Ok(crate::interrupt::end_by(sig))
        }
    }
}

/// Why `sandbox run --warm` did not start warm ([`warm_start`]).
enum WarmStopped {
    /// A SIGINT or SIGTERM came (its number) while the template or pooled sandbox started.
    Interrupted(i32),
    /// The warm start failed or did not get ready within 300 s (the message says which).
    Failed(anyhow::Error),
}

/// Where SIGTERM and SIGINT are received, once made ([`signal_streams`]); `None`: nowhere (the
/// signals act as they would without us).
pub(crate) type Signals = Option<SignalSource>;

/// See [`Signals`].
pub(crate) enum SignalSource {
    /// tokio's streams of SIGTERM and SIGINT. Either may be missing (it could not be made): that
    /// signal then acts as it would without us.
    Streams(Option<tokio::signal::unix::Signal>, Option<tokio::signal::unix::Signal>),
    /// The signals [`crate::interrupt`]'s thread, whose streams came first, forwards.
    Forwarded(tokio::sync::mpsc::UnboundedReceiver<i32>),
}

/// Starts `profile` warm as `how` asks and waits until it is ready; a profile that cannot start
/// warm runs cold (said on stderr). Errors: [`WarmStopped`]; the caller stops what started.
fn warm_start(
    engine: &std::sync::Arc<sandbox_engine::Engine>,
    profile: &str,
    how: WarmStart,
    rt: &tokio::runtime::Runtime,
    signals: &mut Signals,
) -> Result<(), WarmStopped> {
    let how = match how {
        WarmStart::Fork => sandbox_engine::WarmFor::Fork,
        WarmStart::Prefork => sandbox_engine::WarmFor::Prefork,
        WarmStart::Pool => sandbox_engine::WarmFor::Pool,
    };
    if !engine.enable_warm_for(profile, how).map_err(|why| WarmStopped::Failed(anyhow::anyhow!("--warm: {why}")))? {
        errln!("sandbox: --warm: profile {profile:?} cannot start warm; running cold");
        return Ok(());
    }
    let waiting = {
        let (engine, profile) = (engine.clone(), profile.to_owned());
        move || engine.wait_warm(&profile, std::time::Duration::from_secs(300))
    };
    let waited = rt.block_on(async {
        tokio::select! {
            waited = tokio::task::spawn_blocking(waiting) => Ok(waited),
            sig = interruption(signals) => Err(sig),
        }
    });
    let failed = |why: String| Err(WarmStopped::Failed(anyhow::anyhow!("--warm: the warm start of profile {profile:?} {why}")));
    match waited {
        Ok(Ok(Ok(true))) => Ok(()),
        Ok(Ok(Ok(false))) => failed("did not get ready".into()),
        Ok(Ok(Err(why))) => failed(format!("failed: {why}")),
        Ok(Err(_)) => failed("failed: the thread waiting for it panicked".into()),
        Err(sig) => Err(WarmStopped::Interrupted(sig)),
    }
}

/// SIGTERM and SIGINT, received from now on (`None` if neither can be): the ones
/// [`crate::interrupt`] forwards if it was armed (`run --install`'s install, `doctor`'s
/// self-test), which then stops handling them itself, else new streams.
pub(crate) fn signal_streams(rt: &tokio::runtime::Runtime) -> Signals {
    match crate::interrupt::hand_over() {
        Some(forwarded) => Some(SignalSource::Forwarded(forwarded)),
        None => signal_streams_unowned(rt),
    }
}

/// New streams of SIGTERM and SIGINT, each kept if it was made: once tokio has taken a signal
/// over it keeps its handler for the process's life, so a stream dropped because the other
/// failed would leave that signal swallowed.
///
/// A SIGINT that this process was started with ignored stays ignored (no stream): a shell
/// starts a background job (`cmd &`) without job control, and `nohup`-like wrappers start their
/// command, with SIGINT ignored so that a terminal's Ctrl-C, sent to the whole foreground
/// process group, does not end it (POSIX, Shell Command Language 2.9.3 "Asynchronous Lists";
/// the convention of <https://www.cons.org/cracauer/sigint.html>, which CPython and Go's
/// runtime follow). Such a command still ends cleanly on SIGTERM.
pub(crate) fn signal_streams_unowned(rt: &tokio::runtime::Runtime) -> Signals {
    use tokio::signal::unix::{signal, SignalKind};
    let _runtime = rt.enter();
    let int = if sandbox_runtime::signal_ignored(libc::SIGINT) { None } else { signal(SignalKind::interrupt()).ok() };
    match (signal(SignalKind::terminate()).ok(), int) {
        (None, None) => None,
        (term, int) => Some(SignalSource::Streams(term, int)),
    }
}

/// Waits for the audit log's open to end, and returns why it failed, if it did; a SIGINT or
/// SIGTERM meanwhile exits at once (an open may wait long for a busy or unanswering database).
fn opened_or_exit(rt: &tokio::runtime::Runtime, signals: &mut Signals, audit: &std::sync::Arc<crate::audit::Opening>) -> Option<anyhow::Error> {
    let audit = audit.clone();
    rt.block_on(async {
        tokio::select! {
            failure = tokio::task::spawn_blocking(move || audit.failure()) => failure.unwrap_or_else(|_| Some(anyhow::anyhow!("the audit log's opening thread panicked"))),
            sig = interruption(signals) => {
                errln!("sandbox: interrupted by {} while the audit log opened: exiting at once", signal_name(sig));
                crate::interrupt::die(sig)
            }
        }
    })
}

/// A SIGTERM or SIGINT that `signals` received already, if any (never waits for one).
pub(crate) async fn pending_interruption(signals: &mut Signals) -> Option<i32> {
    // A signal reaches its stream only once the runtime's driver has run: let it.
    tokio::task::yield_now().await;
    tokio::select! {
        biased;
        sig = interruption(signals) => Some(sig),
        () = std::future::ready(()) => None,
    }
}

/// The first SIGTERM or SIGINT `signals` (the streams of both) receive, as its number; never,
/// without streams (they could not be made: the signals then act as they would).
pub(crate) async fn interruption(signals: &mut Signals) -> i32 {
    async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    match signals {
        Some(SignalSource::Streams(term, int)) => tokio::select! {
            () = recv(term) => libc::SIGTERM,
            () = recv(int) => libc::SIGINT,
        },
        Some(SignalSource::Forwarded(from)) => match from.recv().await {
            Some(sig) => sig,
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// `SIGINT` or `SIGTERM`, the signals [`interruption`] reports.
pub(crate) fn signal_name(sig: i32) -> &'static str {
    if sig == libc::SIGINT {
        "SIGINT"
    } else {
        "SIGTERM"
    }
}

/// `--server`: the same run through the HTTP API, streaming output as it comes.
fn run_remote(url: &str, request: ExecutionRequest, args: &RunArgs) -> anyhow::Result<ExitCode> {
    let client = sandbox_client::Client::new(url, args.api_key.clone());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let outcome = rt.block_on(async {
        if args.json {
            client.execute(&request).await
        } else {
            client
                .execute_stream(&request, |stream, text| {
                    let _ = match stream {
                        sandbox_client::Stream::Stdout => std::io::stdout().write_all(text.as_bytes()).and_then(|()| std::io::stdout().flush()),
                        sandbox_client::Stream::Stderr => std::io::stderr().write_all(text.as_bytes()).and_then(|()| std::io::stderr().flush()),
                    };
                })
                .await
        }
    });
    match outcome {
        Ok(result) => finish(&result, args),
        Err(sandbox_client::ClientError::Problem { problem, .. }) => {
            if args.json {
                outln!("{}", serde_json::to_string_pretty(&problem)?);
            } else {
                let field = problem.field.as_deref().map(|f| format!(" ({f})")).unwrap_or_default();
                errln!("sandbox: error[{}]{field}: {}", problem.code, problem.detail);
                timeout_hint(problem.code.as_str());
            }
            Ok(ExitCode::from(u8::try_from(problem.code.exit_code()).unwrap_or(2)))
        }
        // Not the service's answer: the connection failed, broke, or the answer was not the API's.
        Err(e) => {
            errln!("sandbox: error: cannot reach the sandbox service at {url}: {:#}", anyhow::Error::new(e));
            Ok(ExitCode::from(UNREACHABLE))
        }
    }
}

/// The exit status of a run that reached its timeout, whatever the program's (GNU coreutils'
/// `timeout(1)` exits 124 when the command timed out).
pub const TIMEOUT_EXIT: u8 = 124;

/// Writes the result out (its files to `--out-dir`, each one that cannot be written said on
/// stderr and skipped; then the JSON or the report) and returns the command's exit status: the
/// program's exit code (128 + the signal that ended it), [`TIMEOUT_EXIT`] when it reached its
/// timeout, 1 when it has none (e.g. a TypeScript syntax error), or the error code's
/// ([`ErrorCode::exit_code`]) for a rejected run or an internal error.
/// Errors: the `--out-dir` directory cannot be created or opened (nothing else is written then).
fn finish(result: &sandbox_core::ExecutionResult, args: &RunArgs) -> anyhow::Result<ExitCode> {
    finish_code(result, args).map(ExitCode::from)
}

/// [`finish`], with the exit status as a number (0-255).
fn finish_code(result: &sandbox_core::ExecutionResult, args: &RunArgs) -> anyhow::Result<u8> {
    let result = result.clone();
    if let Some(dir) = &args.out_dir {
        crate::outdir::write(dir, &result.files, args.overwrite)?;
    }
    if args.json {
        let mut out = std::io::stdout().lock();
        // A reader that went away (`| head`) is not an error of the run.
        if serde_json::to_writer_pretty(&mut out, &result).is_ok() {
            let _ = writeln!(out);
        }
    } else {
        report(&result, args.out_dir.is_some());
    }
    let code = match result.status {
        Status::Rejected | Status::InternalError => {
            let kind = result.error.as_ref().map(|e| e.kind.as_str()).unwrap_or("internal_error");
            let code = ErrorCode::parse(kind).unwrap_or(ErrorCode::InternalError);
            code.exit_code()
        }
        // As coreutils' `timeout(1)`: a script tells a timeout from the program's own exit and
        // from an interrupted `sandbox run` (130, 143); the program's code stays in the result.
        Status::Timeout => TIMEOUT_EXIT.into(),
        _ => result.exit_code.unwrap_or(1),
    };
    Ok(u8::try_from(code.clamp(0, 255)).unwrap_or(1))
}

fn build_request(args: &RunArgs) -> anyhow::Result<ExecutionRequest> {
    let code = match (&args.code, &args.file) {
        (Some(c), _) => c.clone(),
        (None, Some(f)) => std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?,
        (None, None) => anyhow::bail!("give a FILE or -c CODE"),
    };
    let by_extension = args.file.as_ref().and_then(|f| f.extension()).and_then(|e| e.to_str()).and_then(|e| match e {
        "ts" | "mts" => Some("typescript"),
        "py" => Some("python"),
        _ => None,
    });
    let language = args.language.clone().or_else(|| by_extension.map(str::to_owned));
    let profile = match (&args.profile, language.as_deref()) {
        (Some(p), _) => p.clone(),
        (None, Some(l)) if matches!(l.to_ascii_lowercase().as_str(), "typescript" | "ts") => "typescript-default".into(),
        (None, _) => "python-default".into(),
    };
    let mut files = std::collections::BTreeMap::new();
    for spec in &args.files {
        let (name, path) = spec.split_once('=').with_context(|| format!("--file {spec:?}: expected NAME=PATH"))?;
        let bytes = std::fs::read(path).with_context(|| format!("--file {name}: cannot read {path}"))?;
        let content = match String::from_utf8(bytes) {
            Ok(text) => FileContent::Text(text),
            Err(e) => FileContent::Base64 { base64: base64::engine::general_purpose::STANDARD.encode(e.into_bytes()) },
        };
        files.insert(name.to_owned(), content);
    }
    let stdin = match &args.stdin {
        None => None,
        Some(p) => {
            let bytes = if p.as_os_str() == "-" {
                let mut b = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut b).context("--stdin -: cannot read standard input")?;
                b
            } else {
                std::fs::read(p).with_context(|| format!("--stdin: cannot read {}", p.display()))?
            };
            Some(FileContent::Base64 { base64: base64::engine::general_purpose::STANDARD.encode(bytes) })
        }
    };
    let mut env = std::collections::BTreeMap::new();
    for kv in &args.env {
        let (k, v) = kv.split_once('=').with_context(|| format!("--env {kv:?}: expected KEY=VALUE"))?;
        env.insert(k.to_owned(), v.to_owned());
    }
    Ok(ExecutionRequest {
        profile,
        language,
        code,
        harness: args.harness.clone(),
        timeout: args.timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        files,
        outputs: args.outputs.clone(),
        stdin,
        input: match &args.input {
            None => None,
            Some(text) => {
                let (what, text) = match text.strip_prefix('@') {
                    Some(path) => (path.to_owned(), std::fs::read_to_string(path).with_context(|| format!("--input: cannot read {path}"))?),
                    None => ("the argument".to_owned(), text.clone()),
                };
                Some(serde_json::from_str(&text).with_context(|| format!("--input: {what} is not JSON"))?)
            }
        },
        env,
    })
}

/// Issue 17, item 1: an environment missing from this data directory but installed in the
/// default one (`--data-dir` elsewhere) is named on stderr, with the setting that shares it.
fn installed_elsewhere(config: &Config, data_dir: &std::path::Path, env: &str) {
    let default = crate::config::data_dir(None, config);
    if default == data_dir || config.runtime.environments_dir.is_some() {
        return;
    }
    let envs = sandbox_engine::environment::Environments::for_runtime(&config.runtime, &default);
    if envs.installed_in(config, env).is_some() {
        errln!(
            "sandbox: note: environment {env} is installed in {}, the default data directory's; to use it from every data \
             directory, set `environments_dir = {:?}` under [runtime] in the configuration file",
            envs.dir().display(),
            envs.dir().display().to_string()
        );
    }
}

/// After a streamed run, says on stderr what the exit code alone does not.
fn report(r: &sandbox_core::ExecutionResult, wrote_files: bool) {
    if let Some(e) = &r.error {
        let field = e.field.as_deref().map(|f| format!(" ({f})")).unwrap_or_default();
        match r.status {
            Status::Rejected | Status::InternalError => {
                errln!("sandbox: error[{}]{field}: {}", e.kind, e.message);
                timeout_hint(&e.kind);
            }
            // Never ran (a TypeScript syntax error): nothing was streamed, so show it here.
            _ if r.enforcement.is_none() && !r.stderr.is_empty() => errln!("{}", r.stderr.trim_end()),
            _ => {}
        }
    }
    if let Some(v) = &r.return_data {
        // The function harness's return value, after the program's own output.
        let text = serde_json::to_string_pretty(v).unwrap_or_default();
        // On a line of its own, even after output that did not end in a newline.
        let sep = if r.stdout.is_empty() || r.stdout.ends_with('\n') { "" } else { "\n" };
        let mut out = std::io::stdout();
        let _ = writeln!(out, "{sep}{text}").and_then(|()| out.flush());
    }
    match r.status {
        Status::Timeout => errln!("sandbox: timed out after {} ms (killed by {})", r.duration_ms, r.signal_name.as_deref().unwrap_or("signal")),
        Status::MemoryLimit => errln!("sandbox: memory limit reached (oom killed)"),
        Status::OutputLimit => errln!("sandbox: output cap reached; the program was stopped"),
        _ => {}
    }
    if r.stdout_truncated || r.stderr_truncated {
        errln!("sandbox: output truncated at the profile's cap (stdout: {}, stderr: {})", r.stdout_truncated, r.stderr_truncated);
    }
    if !r.files.is_empty() && !wrote_files {
        // Names come from the program: escape control characters before they reach a terminal.
        let names: Vec<String> = r.files.keys().map(|n| n.escape_debug().to_string()).collect();
        errln!("sandbox: {} output file(s) not written (use --out-dir): {}", names.len(), names.join(", "));
    }
    if wrote_files {
        // What the collection left out (a symlink, a cap): not returned, so not written either.
        // The first few by name; a program that made thousands gets a count, not a screenful.
        const NAMED: usize = 20;
        // Past its 1,000 entries the list ends with one `list_cap` entry counting the rest (its
        // `count`; a `--server` of a version before it has only its name): the count below
        // adds those.
        let (listed, past_cap) = match r.skipped_files.last() {
            Some(f) if f.reason == SkipReason::ListCap => (&r.skipped_files[..r.skipped_files.len() - 1], f.count.unwrap_or_else(|| list_cap_count(&f.name))),
            _ => (&r.skipped_files[..], 0),
        };
        for f in listed.iter().take(NAMED) {
            errln!("sandbox: output file {} not written: not collected ({})", f.name.escape_debug(), f.reason.as_str());
        }
        let more = (listed.len() as u64 + past_cap).saturating_sub(NAMED as u64);
        if more > 0 {
            let listing = if past_cap > 0 { "the first 1,000 in skippedFiles" } else { "them in skippedFiles" };
            let entries = if more == 1 { "entry" } else { "entries" };
            errln!("sandbox: {more} more {entries} not collected (--json lists {listing})");
        }
    }
}

/// After an `invalid_timeout` refusal, whose message speaks of the wire's milliseconds (every
/// door shares it): the CLI's `--timeout` also takes a unit.
fn timeout_hint(code: &str) {
    if code == ErrorCode::InvalidTimeout.as_str() {
        errln!("sandbox: hint: --timeout takes a unit (`20s`, `1m`, `500ms`); a bare number is milliseconds");
    }
}

/// The count in a `list_cap` entry's name, "… and K more" (0 if it does not parse): what a
/// service of a version before `count` sends.
fn list_cap_count(name: &str) -> u64 {
    name.trim_start_matches("… and ").trim_end_matches(" more").parse().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::{is_local_run, list_cap_count};

    #[test]
    fn a_list_cap_entry_of_an_older_service_counts_the_rest_in_its_name() {
        assert_eq!(list_cap_count("… and 4021 more"), 4021);
        assert_eq!(list_cap_count("something else"), 0);
    }

    fn local(args: &str) -> bool {
        is_local_run(&args.split(' ').map(|a| a.as_bytes().to_vec()).collect::<Vec<_>>())
    }

    #[test]
    fn a_local_run_is_told_from_its_arguments_alone() {
        for yes in
            ["run -c pass", "--data-dir /d run x.py", "--config=c.toml --data-dir=/d run -c pass", "--config c.toml run --json -c pass -p python-default"]
        {
            assert!(local(yes), "{yes}");
        }
        for no in [
            "serve",
            "profiles list",
            "audit show run",
            "--data-dir run profiles list",
            "run --server http://h -c pass",
            "run --server=http://h -c pass",
            "run --warm -c pass",
            "run --warm=pool -c pass",
            "run --help",
            "run -h",
            "--version",
            "",
        ] {
            assert!(!local(no), "{no}");
        }
    }
}
