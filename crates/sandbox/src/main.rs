//! `sandbox`: the Sandbox Service's one binary. Also the helper that builds each container: when
//! started as `sandbox-init` it becomes that helper before anything else runs.

#[macro_use]
mod out;
mod audit;
mod config;
mod env;
mod interrupt;
mod mcp;
mod outdir;
mod run;
mod serve;
mod status;
mod subid;
mod table;
mod units;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Runs untrusted Python and TypeScript in isolated Linux containers under named profiles.
// Doc comments here are `--help` text (clap shows them as written): `[runtime]` names a
// configuration table, not an intra-doc link.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Parser, Debug)]
#[command(name = "sandbox", version, about)]
struct Cli {
    /// Configuration file (TOML) laid over the built-in profiles. Without it, the first of
    /// $SANDBOX_CONFIG, ~/.config/sandbox/config.toml and /etc/sandbox/config.toml that exists is used.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Data directory: all the state of this service: the audit log (DIR/audit.db and its head
    /// file audit.db.head), installed environments (DIR/environments/, unless [runtime]
    /// environments_dir puts them in one place for every data directory), running
    /// executions' workspaces (DIR/executions/) and the status sockets of the services running
    /// on it (DIR/services/, for `sandbox doctor`). Another DIR starts empty: its environments
    /// are installed with `sandbox --data-dir DIR env install NAME`. Default: [runtime] data_dir,
    /// else $SANDBOX_DATA_DIR, else /var/lib/sandbox as root, else ~/.local/state/sandbox.
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a program in a fresh sandbox; exits with its exit code (128+signal when killed, 124 at
    /// its timeout).
    #[command(after_help = "Exit codes: the program's own (128+signal when a signal ended it), 124 when it reached its \
timeout (as coreutils' `timeout`); before it runs, \
2 for a rejected request, 3 when the host cannot run the profile (see `sandbox doctor`), 4 for an \
internal error, 5 when the --server cannot be reached; interrupted (SIGINT, SIGTERM), it ends the execution \
and removes its sandbox, then ends by that signal (a shell sees 130 or 143).")]
    Run(Box<run::RunArgs>),
    /// Serve the HTTP API (POST /v1/executions, GET /v1/profiles, /healthz, /readyz, /metrics, /openapi.json)
    /// and MCP over streamable HTTP at /mcp.
    Serve(serve::ServeArgs),
    /// Serve MCP (Model Context Protocol) on stdin/stdout: tools sandbox_execute_code and
    /// sandbox_list_profiles, for agents that spawn their tools (`{"command": "sandbox", "args": ["mcp"]}`).
    Mcp,
    /// Read the audit log: list, show, export, verify, prune.
    Audit {
        #[command(subcommand)]
        command: audit::AuditCommand,
    },
    /// Package environments: list, install, verify, lock, gc, remove.
    Env {
        #[command(subcommand)]
        command: env::EnvCommand,
    },
    /// Print the OpenAPI document of the HTTP API.
    Openapi,
    /// List or show profiles.
    Profiles {
        #[command(subcommand)]
        command: ProfilesCommand,
    },
    /// Check the host features the runtime needs and which profiles can run. Exits 0 when every
    /// built-in profile can run, 1 when one cannot (the report says why and how to fix it), 3
    /// when the host cannot run sandboxes at all. Interrupted (SIGINT, SIGTERM), it stops and
    /// removes the warm templates and pools it started, then ends by that signal (130 or 143 in
    /// a shell).
    Doctor {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum ProfilesCommand {
    /// One line per profile: name, language, limits, network.
    List,
    /// Every setting of a profile, one per line, with its unit (bytes, ms, CPUs, processes),
    /// defaults included.
    Show {
        /// Profile name.
        name: String,
        /// Print it as a TOML table instead (`[profiles.NAME]`, ready for a config file).
        #[arg(long)]
        toml: bool,
    },
}

fn main() -> ExitCode {
    // The helper must start before any thread exists: it clones into new namespaces.
    if std::env::args_os().next().is_some_and(|a| a == sandbox_runtime::HELPER_ARGV0) {
        sandbox_runtime::helper_main();
    }
    if std::env::args_os().next().is_some_and(|a| a == sandbox_runtime::SELFTEST_ARGV0) {
        sandbox_runtime::selftest_main();
    }
    // Still single-threaded: a local cold `sandbox run` forks its helper now, before clap and the
    // configuration, so that it makes its network namespace while they and the audit log run.
    let early = run::early_helper();
    let cli = Cli::parse();
    COMMAND.get_or_init(|| command_of(cli.config.as_deref(), cli.data_dir.as_deref()));
    // `run` reports failures in its own words (and the result); a server logs its work.
    let default_level = match cli.command {
        Command::Run(_) | Command::Env { .. } => "off",
        // rmcp logs every session it opens and the whole `initialize` (a client's capabilities, any
        // size) at INFO: a log flood for one request each (an attack review).
        Command::Serve(_) => "info,rmcp=warn",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SANDBOX_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)))
        .with_writer(std::io::stderr)
        // Colours only for a person watching: a redirected log gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let code = match dispatch(cli, early) {
        Ok(code) => code,
        // A reader that went away (`| head`) ends the output, not in an error. Only when it is
        // stdout's reader: an EPIPE of anything else (a database connection) is an error.
        Err(e)
            if e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)) && stdout_reader_gone() =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            errln!("sandbox: error: {e:#}");
            ExitCode::from(2)
        }
    };
    // An interrupted command that returned after its clean-up ends by its signal.
    interrupt::ending(code)
}

/// Whether standard output is a pipe or socket whose reader has gone: `poll` reports POLLERR
/// (a pipe without readers, pipe(7)) or POLLHUP on it.
fn stdout_reader_gone() -> bool {
    use nix::poll::{PollFd, PollFlags};
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(std::os::fd::AsFd::as_fd(&stdout), PollFlags::empty())];
    nix::poll::poll(&mut fds, 0u16).is_ok_and(|n| n > 0) && fds[0].revents().is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP))
}

/// `sandbox` with the global flags this invocation was given, so that a command a message
/// suggests works as written (see [`command`]).
static COMMAND: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// `sandbox`, followed by this invocation's `--config FILE` and `--data-dir DIR` when given
/// (absolute, quoted for a POSIX shell when needed): the start of every command a message
/// suggests (`sandbox --data-dir /tmp/d env install python-analysis`).
pub fn command() -> &'static str {
    COMMAND.get().map_or("sandbox", String::as_str)
}

fn command_of(config: Option<&std::path::Path>, data_dir: Option<&std::path::Path>) -> String {
    let mut c = "sandbox".to_owned();
    for (flag, path) in [("--config", config), ("--data-dir", data_dir)] {
        if let Some(p) = path {
            let p = std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
            c.push_str(&format!(" {flag} {}", shell_quote(&p.display().to_string())));
        }
    }
    c
}

/// `s` as one POSIX shell word.
fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+:@,=%".contains(c)) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn dispatch(cli: Cli, early: Option<sandbox_engine::EarlySpare>) -> anyhow::Result<ExitCode> {
    let config = config::load(cli.config.as_deref())?;
    match cli.command {
        Command::Run(args) => {
            let data_dir = config::data_dir(cli.data_dir.as_deref(), &config);
            run::run(config, data_dir, *args, early)
        }
        Command::Serve(args) => {
            let data_dir = config::data_dir(cli.data_dir.as_deref(), &config);
            serve::serve(config, data_dir, args)
        }
        Command::Mcp => {
            let data_dir = config::data_dir(cli.data_dir.as_deref(), &config);
            mcp::stdio(config, data_dir)
        }
        Command::Audit { command } => {
            let data_dir = config::data_dir(cli.data_dir.as_deref(), &config);
            audit::run(&data_dir, &config, command)
        }
        Command::Env { command } => {
            let data_dir = config::data_dir(cli.data_dir.as_deref(), &config);
            env::run(config, &data_dir, command)
        }
        Command::Openapi => {
            use utoipa::OpenApi as _;
            outln!("{}", sandbox_server::ApiDoc::openapi().to_pretty_json()?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Profiles { command: ProfilesCommand::List } => {
            let mut t = table::new(&["NAME", "LANGUAGE", "INTERPRETER", "MEMORY", "CPU", "PIDS", "TIMEOUT", "NETWORK", "ENVIRONMENT", "DESCRIPTION"]);
            let data_dir = config::data_dir(cli.data_dir.as_deref(), &config);
            let envs = sandbox_engine::environment::Environments::for_runtime(&config.runtime, &data_dir);
            let host_versions: std::collections::BTreeMap<&str, String> =
                [("python", &config.runtime.python), ("typescript", &config.runtime.node)].into_iter().map(|(l, bin)| (l, interpreter_version(bin))).collect();
            for (name, p) in &config.profiles {
                let env = p.environment.as_ref().and_then(|e| config.environments.get(e));
                let interpreter = match env.and_then(|e| sandbox_engine::base::base_of(e).map(|id| (id, e.debian.as_ref().map_or("", |d| d.suite.as_str())))) {
                    None => host_versions[p.language.as_str()].clone(),
                    Some((id, suite)) => match envs.bases().manifest(&id).ok().and_then(|m| m.python_version) {
                        Some(v) => format!("python {v} ({suite} base)"),
                        None => format!("python3 ({suite} base, not installed)"),
                    },
                };
                let environment = match p.environment.as_deref() {
                    None => "-".to_owned(),
                    Some(e) => match envs.installed_in(&config, e) {
                        Some(_) => e.to_owned(),
                        None => format!("{e} (missing)"),
                    },
                };
                t.add_row(vec![
                    name.clone(),
                    p.language.as_str().to_owned(),
                    interpreter,
                    format!("{}MiB", p.limits.memory_max_bytes >> 20),
                    p.limits.cpu_max.to_string(),
                    p.limits.pids_max.to_string(),
                    units::ms(p.limits.timeout_ms),
                    p.network.mode().to_string(),
                    environment,
                    p.description.clone(),
                ]);
            }
            table::print(t);
            Ok(ExitCode::SUCCESS)
        }
        Command::Profiles { command: ProfilesCommand::Show { name, toml: as_toml } } => {
            let Some(p) = config.profiles.get(&name) else {
                let known: Vec<&str> = config.profiles.keys().map(String::as_str).collect();
                errln!("sandbox: error[profile_not_found]: no profile named {name:?}; known profiles: {}", known.join(", "));
                return Ok(ExitCode::from(2));
            };
            if as_toml {
                let mut table = toml::Table::new();
                let mut profiles = toml::Table::new();
                profiles.insert(name.clone(), toml::Value::try_from(p)?);
                table.insert("profiles".into(), toml::Value::Table(profiles));
                out!("{}", toml::to_string(&table)?);
                return Ok(ExitCode::SUCCESS);
            }
            let mut fields = Vec::new();
            units::leaves("", &serde_json::to_value(p)?, &mut fields);
            // What a warm start imports comes with the profile's environment: shown beside it.
            if let Some(env) = p.environment.as_deref().and_then(|e| config.environments.get(e)) {
                let at = fields.iter().position(|(k, _)| k == "environment").map_or(fields.len(), |i| i + 1);
                fields.insert(at, ("environment.preload".into(), serde_json::json!(env.preload.join(", "))));
            }
            let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
            outln!("profile {name}");
            for (key, value) in &fields {
                outln!("  {key:<width$}  {}", units::field(key, value));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Doctor { json } => {
            let data_dir = config::data_dir(cli.data_dir.as_deref(), &config);
            Ok(doctor(&config, &data_dir, json))
        }
    }
}

/// `doctor`'s lines on the services running on its data directory: each one's templates and
/// pools as they are now.
fn print_services(services: &[Result<status::ServiceStatus, String>]) {
    if services.is_empty() {
        outln!("Running services on this data directory: none");
        return;
    }
    outln!("Running services on this data directory (their warm state now):");
    for s in services {
        let s = match s {
            Ok(s) => s,
            Err(e) => {
                outln!("  [FAIL] {e}");
                continue;
            }
        };
        let listen = s.listen.as_deref().map(|l| format!(", http://{l}")).unwrap_or_default();
        let up = humantime::format_duration(std::time::Duration::from_secs(s.uptime_ms / 1000));
        outln!("  sandbox {} (pid {}{listen}, version {}, up {up}):", s.command, s.pid, s.version);
        if s.templates.is_empty() && s.pools.is_empty() {
            outln!("    no templates or pools (every execution starts cold)");
        }
        for t in &s.templates {
            let detail = match &t.error {
                Some(e) if t.state != "ready" => format!("{}: {e}", t.state),
                _ => format!(
                    "{}, {} fork{}, {} MiB peak memory, {} old",
                    t.state,
                    t.forks,
                    if t.forks == 1 { "" } else { "s" },
                    t.peak_memory_bytes >> 20,
                    humantime::format_duration(std::time::Duration::from_secs(t.age_ms / 1000))
                ),
            };
            outln!("    [{}] template {:<20} {detail}", if t.state == "failed" { "FAIL" } else { "ok" }, t.profile);
        }
        for p in &s.pools {
            let what = if p.prefork { "children forked ahead" } else { "pool" };
            let mut detail = format!(
                "{} of {} ready, {} MiB peak memory, {} hits, {} misses, {} started, {} discarded",
                p.ready,
                p.size,
                p.memory_bytes >> 20,
                p.hits,
                p.misses,
                p.started,
                p.discarded
            );
            if let Some(e) = &p.error {
                detail = format!("{detail}; last start failed: {e}");
            }
            outln!("    [{}] {what} {:<20} {detail}", if p.ready == 0 && p.error.is_some() { "FAIL" } else { "ok" }, p.profile);
        }
    }
}

/// Starts the template or pool of every runnable warm profile, as `sandbox serve` would, waits
/// for each (up to 3 minutes), reports its state and memory, and stops them all.
fn warm_self_test(
    engine: &sandbox_engine::Engine,
    profiles: &[(String, Option<String>)],
) -> (Vec<sandbox_engine::warm::TemplateStatus>, Vec<sandbox_engine::pool::PoolStatus>) {
    use sandbox_core::profile::WarmMode;
    let config = engine.config();
    let warm: Vec<&String> =
        profiles.iter().filter(|(name, why)| why.is_none() && config.profiles[name].warm.mode != WarmMode::Off).map(|(name, _)| name).collect();
    if warm.is_empty() {
        return (Vec::new(), Vec::new());
    }
    // Starting them may take minutes: a Ctrl-C (or SIGTERM) meanwhile stops and removes what
    // started (cgroups, mounts, directories) before the command ends by the signal, instead of
    // leaving it for the next service start on this data directory to sweep. The streams exist
    // before anything starts.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok();
    let mut signals = rt.as_ref().and_then(run::signal_streams);
    let out = match engine.enable_warm() {
        Ok(true) => {
            std::thread::scope(|scope| {
                let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
                scope.spawn(|| {
                    for name in &warm {
                        let _ = engine.wait_warm(name, std::time::Duration::from_secs(180));
                    }
                    let _ = ready_tx.send(());
                });
                let interrupted = match &rt {
                    Some(rt) => rt.block_on(async {
                        tokio::select! {
                            _ = ready_rx => None,
                            sig = run::interruption(&mut signals) => Some(sig),
                        }
                    }),
                    None => None,
                };
                if let Some(sig) = interrupted {
                    errln!("sandbox: doctor interrupted: stopping the warm templates and pools it started");
                    engine.stop_warm();
                    crate::interrupt::die(sig);
                }
            });
            (engine.templates().map(|t| t.status()).unwrap_or_default(), engine.pools().map(|p| p.status()).unwrap_or_default())
        }
        Ok(false) => (Vec::new(), Vec::new()),
        Err(e) => {
            let failed = |mode: WarmMode| warm.iter().filter(move |n| config.profiles[n.as_str()].warm.mode == mode);
            let templates = failed(WarmMode::Template)
                .map(|name| sandbox_engine::warm::TemplateStatus {
                    profile: (*name).clone(),
                    state: "failed".into(),
                    forks: 0,
                    peak_memory_bytes: 0,
                    age_ms: 0,
                    error: Some(e.clone()),
                })
                .collect();
            let prefork = warm.iter().filter(|n| config.profiles[n.as_str()].warm.mode == WarmMode::Template && config.profiles[n.as_str()].warm.pool_size > 0);
            let pools = failed(WarmMode::Pool)
                .chain(prefork)
                .map(|name| sandbox_engine::pool::PoolStatus {
                    profile: (*name).clone(),
                    size: config.profiles[name.as_str()].warm.pool_size,
                    prefork: config.profiles[name.as_str()].warm.mode == WarmMode::Template,
                    ready: 0,
                    starting: false,
                    memory_bytes: 0,
                    error: Some(e.clone()),
                    hits: 0,
                    misses: 0,
                    started: 0,
                    discarded: 0,
                })
                .collect();
            (templates, pools)
        }
    };
    engine.stop_warm();
    // A signal that came once they were ready (the handlers stay): the same exit, now that
    // they are stopped.
    if let Some(sig) = rt.as_ref().and_then(|rt| rt.block_on(run::pending_interruption(&mut signals))) {
        errln!("sandbox: doctor interrupted");
        crate::interrupt::die(sig);
    }
    out
}

/// `doctor`'s line on the inotify share of each warm execution: `[ok]` at 8 instances or more,
/// else `[low]` with the host setting that would give 8 (programs that watch files, a file
/// watcher per library, fail with EMFILE past their share).
fn inotify_line(share: &sandbox_runtime::InotifyShare) -> String {
    let show = |n: Option<u64>| n.map_or_else(|| "?".to_owned(), |n| n.to_string());
    let text = format!(
        "inotify: {} instances and {} watches per warm execution (the host's fs.inotify.max_user_instances {} and max_user_watches {} over {} shares: the executions at once, children forked ahead, one more)",
        show(share.instances),
        show(share.watches),
        show(share.host_instances),
        show(share.host_watches),
        share.shares
    );
    match share.instances {
        Some(n) if n < 8 => format!("[low] {text}; `sysctl fs.inotify.max_user_instances={}` gives each 8", share.shares * 8),
        _ => format!("[ok] {text}"),
    }
}

/// `python 3.11.2` / `node 24.1.0` from `BIN --version` (the host's own interpreter, run on the
/// host as `doctor` does), or `? (BIN not runnable)`.
fn interpreter_version(bin: &std::path::Path) -> String {
    let out = std::process::Command::new(bin).arg("--version").output().ok().filter(|o| o.status.success());
    match out {
        Some(o) => {
            let text = String::from_utf8_lossy(if o.stdout.is_empty() { &o.stderr } else { &o.stdout }).trim().to_owned();
            let version = text.trim_start_matches("Python ").trim_start_matches('v');
            let what = if text.starts_with("Python") { "python" } else { "node" };
            format!("{what} {version}")
        }
        None => format!("? ({} not runnable)", bin.display()),
    }
}

fn doctor(config: &sandbox_core::Config, data_dir: &std::path::Path, json: bool) -> ExitCode {
    // The engine every door runs on decides which profiles can run (it probes the host once).
    let helper = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("sandbox"));
    // As `run` and `serve` do: a data directory that does not exist yet is created, so that the
    // warm self-test checks the host, not a missing directory.
    let _ = std::fs::create_dir_all(data_dir);
    let options = sandbox_engine::EngineOptions {
        config: config.clone(),
        data_dir: data_dir.to_owned(),
        helper,
        cgroup_parent: "sandbox".into(),
        command: command().to_owned(),
        environment_builds: Default::default(),
    };
    let engine = sandbox_engine::Engine::new(options, std::sync::Arc::new(sandbox_engine::NoRecorder));
    // What an earlier doctor's self-test left, killed mid-test.
    engine.recover_self_tests();
    let mut report = engine.host().clone();
    // Issue 12, finding 5: no local user may own the sandboxes' host ids.
    let subid = subid::check(config.runtime.uid_base);
    report.checks.push(sandbox_runtime::probe::Check { name: "subid", ok: subid.is_ok(), detail: subid.unwrap_or_else(|e| e) });
    // The readiness self-test (as /readyz runs it): every kernel step of an execution, once. A
    // SIGINT or SIGTERM meanwhile waits for its sandbox's removal, then ends doctor by it.
    crate::interrupt::arm();
    let self_test = match crate::interrupt::hold("the self-test") {
        Ok(_hold) if report.first_failure().is_none() => engine.self_test(),
        _ => Vec::new(),
    };
    crate::interrupt::exit_if_interrupted(None, "the self-test's sandbox was removed");
    let self_test_failure = sandbox_runtime::selftest::first_failure(&self_test);
    let mut runtimes = Vec::new();
    for (what, path) in [("python", &config.runtime.python), ("node", &config.runtime.node)] {
        let version = std::process::Command::new(path).arg("--version").output().ok().map(|o| {
            let s = String::from_utf8_lossy(if o.stdout.is_empty() { &o.stderr } else { &o.stdout }).trim().to_owned();
            s
        });
        runtimes.push((what, path.display().to_string(), version));
    }
    let host_failure = report.first_failure();
    let landlock_abi = sandbox_engine::landlock_abi(&report);
    let profiles: Vec<(String, Option<String>)> =
        config.profiles.keys().map(|name| (name.clone(), engine.availability(name).err().map(|u| u.reason))).collect();
    // Templates cannot start on a node that is not ready; the failing step says why.
    let (templates, pools) = if self_test_failure.is_none() { warm_self_test(&engine, &profiles) } else { (Vec::new(), Vec::new()) };
    // What each warm execution gets of the host's inotify limits, which every template child
    // shares (`sandbox_runtime::InotifyShare`); only where the service would start templates.
    let inotify = (!templates.is_empty()).then(|| sandbox_runtime::InotifyShare::of(sandbox_engine::warm::template_children(config)));
    // The services running on this data directory, as they are now (their status sockets).
    let services = status::running(data_dir);
    if json {
        let v = serde_json::json!({
            "services": services.iter().map(|s| match s {
                Ok(s) => serde_json::to_value(s).expect("json values serialize"),
                Err(e) => serde_json::json!({"error": e}),
            }).collect::<Vec<_>>(),
            "templates": templates,
            "warmInotify": inotify,
            "pools": pools,
            "checks": report.checks,
            "selfTest": self_test,
            "runtimes": runtimes.iter().map(|(w, p, v)| serde_json::json!({"name": w, "path": p, "version": v})).collect::<Vec<_>>(),
            "bases": env::bases_json(config, &sandbox_engine::environment::Environments::for_runtime(&config.runtime, data_dir)),
            "profiles": profiles.iter().map(|(n, why)| {
                let needs = config.profiles[n].landlock_min_abi;
                serde_json::json!({
                    "name": n,
                    "runnable": why.is_none(),
                    "reason": why,
                    "landlock": {"minAbi": needs, "enforcedAbi": landlock_abi, "met": landlock_abi >= needs},
                })
            }).collect::<Vec<_>>(),
        });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json values serialize"));
    } else {
        outln!("Host features:");
        for c in &report.checks {
            outln!("  [{}] {:<16} {}", if c.ok { "ok" } else { "FAIL" }, c.name, c.detail);
        }
        if !self_test.is_empty() {
            outln!("Self-test (each step an execution takes, done once now; /readyz runs it too):");
            for s in &self_test {
                outln!("  [{}] {:<16} {}", if s.ok { "ok" } else { "FAIL" }, s.name, s.detail);
            }
        }
        outln!("Runtimes:");
        for (what, path, version) in &runtimes {
            match version {
                Some(v) => outln!("  [ok] {what:<16} {path} ({v})"),
                None => outln!("  [FAIL] {what:<14} {path} not runnable"),
            }
        }
        let envs = sandbox_engine::environment::Environments::for_runtime(&config.runtime, data_dir);
        if !envs.bases().list().is_empty() || config.environments.values().any(|e| sandbox_engine::base::base_of(e).is_some()) {
            outln!("Bases (under {}):", envs.bases().dir().display());
            env::print_bases(config, &envs);
        }
        outln!("Profiles:");
        for (name, why) in &profiles {
            let needs = config.profiles[name].landlock_min_abi;
            let landlock = if landlock_abi >= needs { "met" } else { "NOT met" };
            let landlock = format!("landlock ABI {landlock_abi} enforced, needs {needs}: {landlock}");
            match why {
                None => outln!("  [ok] {name} ({landlock})"),
                Some(w) => outln!("  [FAIL] {name}: {w} ({landlock})"),
            }
        }
        // One column for the profile names of both lists.
        let width = templates.iter().map(|t| t.profile.len()).chain(pools.iter().map(|p| p.profile.len())).max().unwrap_or(0);
        if !templates.is_empty() {
            outln!("Warm templates (started, checked and stopped now, as `sandbox serve` would start them):");
            for t in &templates {
                let ok = t.state == "ready";
                let detail = match &t.error {
                    Some(e) => format!("{}: {e}", t.state),
                    None => format!("{}, {} MiB peak memory", t.state, t.peak_memory_bytes >> 20),
                };
                outln!("  [{}] {:<width$}  {detail}", if ok { "ok" } else { "FAIL" }, t.profile);
            }
            if let Some(share) = &inotify {
                outln!("  {}", inotify_line(share));
            }
        }
        if !pools.is_empty() {
            outln!("Warm pools (filled, checked and emptied now, as `sandbox serve` would fill them):");
            for p in &pools {
                let ok = p.ready > 0 && p.error.is_none();
                let detail = match &p.error {
                    Some(e) => format!("{} of {} ready: {e}", p.ready, p.size),
                    None => format!("{} of {} ready, {} MiB peak memory", p.ready, p.size, p.memory_bytes >> 20),
                };
                let detail = if p.prefork { format!("{detail} (children forked from its template ahead)") } else { detail };
                outln!("  [{}] {:<width$}  {detail}", if ok { "ok" } else { "FAIL" }, p.profile);
            }
        }
    }
    if !json {
        print_services(&services);
    }
    if let Some(why) = &self_test_failure {
        errln!("sandbox: not ready: {why}");
    }
    let builtin = sandbox_core::Config::builtin();
    let builtin_unavailable = profiles.iter().any(|(name, why)| why.is_some() && builtin.profiles.contains_key(name));
    if host_failure.is_some() || self_test_failure.is_some() {
        ExitCode::from(3)
    } else if builtin_unavailable {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
