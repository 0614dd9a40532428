//! `sandbox audit`: list, show, export and verify the audit log of a data directory; and the
//! helpers `run` and `serve` use to open it and recover after a crash.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use sandbox_audit::{AuditLog, Caps, ListFilter};
use sandbox_core::record::{BeginError, Quota, RecordError, Recorder};
use sandbox_core::{ExecutionRequest, ExecutionResult};
use sandbox_engine::Engine;

/// Opens `<data_dir>/audit.db`, or the log at `[audit] url`, with the caps of `[audit]`.
pub fn open(data_dir: &Path, audit: &sandbox_core::AuditConfig) -> anyhow::Result<AuditLog> {
    let caps = Caps {
        code_max_bytes: usize::try_from(audit.code_max_bytes).unwrap_or(usize::MAX),
        output_max_bytes: usize::try_from(audit.output_max_bytes).unwrap_or(usize::MAX),
    };
    match audit.url.as_deref() {
        Some(url) => AuditLog::open_url(Some(url), data_dir, caps).context("cannot open the audit log ([audit] url)"),
        None => AuditLog::open(data_dir, caps).with_context(|| format!("cannot open the audit log in {}", data_dir.display())),
    }
}

/// The engine for `serve`, `mcp` and the environment commands: this binary as the helper, the
/// audit log as its recorder, and recovery from a crashed predecessor done.
/// Errors: the audit log cannot be opened (then nothing may run), or the binary cannot be found.
pub fn engine(config: sandbox_core::Config, data_dir: std::path::PathBuf) -> anyhow::Result<(Engine, std::sync::Arc<AuditLog>)> {
    engine_building(config, data_dir, Default::default())
}

/// [`engine`] whose runs bind the environments of `builds` from those directories (an
/// install's build directory; see [`sandbox_engine::EngineOptions::environment_builds`]).
pub fn engine_building(
    config: sandbox_core::Config,
    data_dir: std::path::PathBuf,
    builds: std::collections::BTreeMap<String, std::path::PathBuf>,
) -> anyhow::Result<(Engine, std::sync::Arc<AuditLog>)> {
    // The log opens (SQLite's schema and the WAL's recovery, or a PostgreSQL connection) on a
    // thread of its own while this one probes the host.
    let opening = Opening::start(&config, &data_dir);
    let probe = sandbox_engine::HostProbe::run(&config);
    if let Some(e) = opening.failure() {
        return Err(e);
    }
    let audit = opening.log()?;
    let engine = Engine::probed(engine_options(config, data_dir, builds)?, audit.clone(), probe);
    recover_host(&engine);
    // The commands that open the engine this way (serve, mcp, env, audit) are not on a cold
    // run's path: they also sweep what a killed self-test left.
    engine.recover_self_tests();
    Ok((engine, audit))
}

/// The engine of a `sandbox run`: as [`engine`], but the audit log opens on a thread of its own
/// while the engine is built and the sandbox prepared ([`Opening`]), so that only the first
/// record waits for it. A cold run writes its `begin` while its sandbox is built, and its
/// program waits for the go that follows a durable `begin`, so the open (SQLite's schema and
/// recovery, ~0.9 ms here; a PostgreSQL connection, a network round trip or more) leaves the
/// run's critical path; nothing runs unrecorded. A log that cannot be opened refuses every
/// record, and [`Opening::failure`] gives the command its error.
/// Errors: the binary cannot be found.
pub fn engine_opening(config: sandbox_core::Config, data_dir: std::path::PathBuf) -> anyhow::Result<(Engine, std::sync::Arc<Opening>)> {
    let opening = std::sync::Arc::new(Opening::start(&config, &data_dir));
    let probe = sandbox_engine::HostProbe::run(&config);
    let engine = Engine::probed(engine_options(config, data_dir, Default::default())?, opening.clone(), probe);
    recover_host(&engine);
    Ok((engine, opening))
}

/// This binary as the helper, `sandbox` as the cgroup parent, this invocation's command.
/// Errors: the binary cannot be found.
fn engine_options(
    config: sandbox_core::Config,
    data_dir: std::path::PathBuf,
    builds: std::collections::BTreeMap<String, std::path::PathBuf>,
) -> anyhow::Result<sandbox_engine::EngineOptions> {
    Ok(sandbox_engine::EngineOptions {
        config,
        data_dir,
        helper: std::env::current_exe().context("cannot find the sandbox binary to re-execute")?,
        cgroup_parent: "sandbox".into(),
        command: crate::command().to_owned(),
        environment_builds: builds,
    })
}

/// After a crash, the host half: the cgroups, mounts and directories of dead executions are
/// swept (their records are marked `interrupted` as the log opens: [`Opening::start`]).
fn recover_host(engine: &Engine) {
    let swept = engine.recover();
    if !swept.is_empty() {
        tracing::warn!(swept = swept.len(), "swept the sandboxes of executions of a process that died");
    }
}

/// After a crash, the records' half: the unfinished records of this node's dead executions
/// are marked `interrupted`.
fn recover_records(audit: &AuditLog) {
    match audit.recover() {
        Ok(ids) if !ids.is_empty() => tracing::warn!(interrupted = ids.len(), "marked the records of executions of a process that died interrupted"),
        Ok(_) => {}
        Err(e) => tracing::error!(error = %e, "could not mark interrupted executions"),
    }
}

/// An audit log opening on a thread of its own ([`engine_opening`]); a
/// [`Recorder`] whose calls wait for the open to end. The open includes [`AuditLog::recover`] (the records of
/// dead executions marked `interrupted`), so no record of this process precedes it.
pub struct Opening {
    state: std::sync::Mutex<OpeningState>,
}

enum OpeningState {
    Pending(std::thread::JoinHandle<anyhow::Result<std::sync::Arc<AuditLog>>>),
    Open(std::sync::Arc<AuditLog>),
    /// Why it failed, in full (`{:#}`), and the error itself until [`Opening::failure`] takes it.
    Failed(String, Option<anyhow::Error>),
}

impl Opening {
    /// Starts opening the log of `config`'s `[audit]` in `data_dir` (as [`open`], with this
    /// node's id and lease time), on a thread named `audit-open`; opens it on this thread when
    /// no thread can be started.
    pub fn start(config: &sandbox_core::Config, data_dir: &Path) -> Self {
        // The data directory first, on this thread: the log's open creates it when missing, and
        // the engine's threads (a warm start's template and pool) create their directories in it
        // meanwhile; two threads making the same missing parent race (one of them got ENOENT,
        // and a first `sandbox run --warm` in a new data directory failed). A failure here is
        // the open's to report.
        let _ = std::fs::create_dir_all(data_dir);
        let (dir, audit, node) = (data_dir.to_owned(), config.audit.clone(), crate::config::node_id(config));
        let open_here = move || {
            let log = std::sync::Arc::new(open(&dir, &audit)?.with_node(node, audit.lease_ttl_ms));
            recover_records(&log);
            Ok(log)
        };
        let state = match std::thread::Builder::new().name("audit-open".into()).spawn(open_here.clone()) {
            Ok(thread) => OpeningState::Pending(thread),
            Err(_) => Self::settled(open_here()),
        };
        Self { state: std::sync::Mutex::new(state) }
    }

    fn settled(opened: anyhow::Result<std::sync::Arc<AuditLog>>) -> OpeningState {
        match opened {
            Ok(log) => OpeningState::Open(log),
            Err(e) => OpeningState::Failed(format!("{e:#}"), Some(e)),
        }
    }

    /// The open log, once the open has ended (blocks until then).
    /// Errors: why it could not be opened.
    pub fn log(&self) -> Result<std::sync::Arc<AuditLog>, RecordError> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Settled once, under the lock: a second caller waits here and finds it settled.
        *state = match std::mem::replace(&mut *state, OpeningState::Failed(String::new(), None)) {
            OpeningState::Pending(thread) => Self::settled(thread.join().unwrap_or_else(|_| Err(anyhow::anyhow!("the audit log's opening thread panicked")))),
            settled => settled,
        };
        match &*state {
            OpeningState::Open(log) => Ok(log.clone()),
            OpeningState::Failed(why, _) => Err(RecordError(why.clone().into())),
            OpeningState::Pending(_) => Err(RecordError("the audit log is still opening".into())),
        }
    }

    /// Why the log could not be opened (once: the error is handed over), after waiting for the
    /// open to end; `None` when it opened.
    pub fn failure(&self) -> Option<anyhow::Error> {
        let _ = self.log();
        match &mut *self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            OpeningState::Failed(why, e) => Some(e.take().unwrap_or_else(|| anyhow::anyhow!("{why}"))),
            _ => None,
        }
    }

    /// The log if it is open now (never blocks).
    fn open_now(&self) -> Option<std::sync::Arc<AuditLog>> {
        match &*self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            OpeningState::Open(log) => Some(log.clone()),
            _ => None,
        }
    }
}

impl Drop for Opening {
    /// Waits for an open still under way, so that the process never exits in the middle of
    /// the log's recovery.
    fn drop(&mut self) {
        let _ = self.log();
    }
}

impl Recorder for Opening {
    fn begin(&self, id: &str, caller: &str, request: &ExecutionRequest, quota: Option<&Quota>) -> Result<(), BeginError> {
        self.log()?.begin(id, caller, request, quota)
    }
    fn abandoned(&self, id: &str) {
        // Must not block; a log not open yet holds no begun execution.
        if let Some(log) = self.open_now() {
            log.abandoned(id);
        }
    }
    fn finish(&self, caller: &str, result: &ExecutionResult) -> Result<(), RecordError> {
        self.log()?.finish(caller, result)
    }
    fn rejected(&self, id: &str, caller: &str, request: Option<&ExecutionRequest>, code: &str, message: &str) -> Result<(), RecordError> {
        self.log()?.rejected(id, caller, request, code, message)
    }
    fn shares_results(&self) -> bool {
        self.log().is_ok_and(|log| log.shares_results())
    }
    fn local(&self) -> bool {
        self.log().is_ok_and(|log| log.local())
    }
    fn keep_result(&self, owner: &str, result: &ExecutionResult, bytes: u64, keep_results: u64, keep_bytes: u64) -> Result<(), RecordError> {
        self.log()?.keep_result(owner, result, bytes, keep_results, keep_bytes)
    }
    fn kept_result(&self, owner: &str, id: &str) -> Result<Option<ExecutionResult>, RecordError> {
        self.log()?.kept_result(owner, id)
    }
    fn kept_results(&self, owner: &str) -> Result<Vec<ExecutionResult>, RecordError> {
        self.log()?.kept_results(owner)
    }
}

/// The caller name of CLI executions: `cli:<user>`, the user behind `sudo` if any, else `$USER`,
/// else the account name of this process's real uid (`cli:root` where `$USER` is unset, as in a
/// container), else `cli:uid<N>` (a uid with no account).
pub fn cli_caller() -> String {
    let uid = nix::unistd::getuid();
    let user = std::env::var("SUDO_USER")
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .or_else(|| nix::unistd::User::from_uid(uid).ok().flatten().map(|u| u.name))
        .unwrap_or_else(|| format!("uid{uid}"));
    format!("cli:{user}")
}

/// Reads a time of `--since`/`--until`: RFC 3339 (`2026-12-01T10:00:00Z`, `...+01:00`), a UTC date
/// (`2026-12-01`, its midnight), or a duration back from now (`1h`, `30min`, `2days`); in ms since
/// the Unix epoch.
fn parse_time(s: &str) -> Result<i64, String> {
    if let Ok(ms) = sandbox_audit::time::parse_rfc3339_ms(s) {
        return Ok(ms);
    }
    let is_date = s.len() == 10 && s.bytes().enumerate().all(|(i, b)| if i == 4 || i == 7 { b == b'-' } else { b.is_ascii_digit() });
    if is_date {
        return sandbox_audit::time::parse_rfc3339_ms(&format!("{s}T00:00:00Z"));
    }
    if let Ok(d) = humantime::parse_duration(s) {
        let now = ms(Some(std::time::SystemTime::now())).unwrap_or(0);
        return Ok(now - i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    }
    Err("expected an RFC 3339 time (2026-12-01T10:00:00Z), a date (2026-12-01) or a duration ago (1h, 30min)".into())
}

fn parse_status(s: &str) -> Result<String, String> {
    if sandbox_audit::STATUSES.contains(&s) {
        Ok(s.to_owned())
    } else {
        Err(format!("one of {}", sandbox_audit::STATUSES.join(", ")))
    }
}

/// Adds, next to every time in ms (`receivedAtMs`, `atMs`), the same time in the format of
/// `audit list` (`receivedAt`, `at`: RFC 3339 UTC with ms), so every audit command shows one format.
fn with_times(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            let times: Vec<(String, i64)> = map
                .iter()
                .filter_map(|(k, x)| Some((k.strip_suffix("AtMs").map(|p| format!("{p}At")).or_else(|| (k == "atMs").then(|| "at".to_owned()))?, x.as_i64()?)))
                .collect();
            for x in map.values_mut() {
                with_times(x);
            }
            for (k, ms) in times {
                map.entry(k).or_insert_with(|| sandbox_audit::time::format_ms(ms).into());
            }
        }
        serde_json::Value::Array(xs) => xs.iter_mut().for_each(with_times),
        _ => {}
    }
}

fn json_with_times(x: &impl serde::Serialize) -> anyhow::Result<serde_json::Value> {
    let mut v = serde_json::to_value(x)?;
    with_times(&mut v);
    Ok(v)
}

/// Subcommands of `sandbox audit`.
#[derive(clap::Subcommand, Debug)]
pub enum AuditCommand {
    /// Records, newest first.
    List {
        /// Only this profile.
        #[arg(long)]
        profile: Option<String>,
        /// Only this final status (ok, error, timeout, memory_limit, output_limit, rejected, internal_error, interrupted, running).
        #[arg(long, value_parser = parse_status)]
        status: Option<String>,
        /// Only this language.
        #[arg(long)]
        language: Option<String>,
        /// Only this caller (e.g. `key:agent-1`, `cli:root`); a trailing `*` makes it a prefix (`key:*`).
        #[arg(long)]
        caller: Option<String>,
        /// Only records received at or after this time: RFC 3339 (2026-11-30T10:00:00Z), a UTC date
        /// (2026-11-30) or a duration ago (1h, 30min).
        #[arg(long, value_parser = parse_time)]
        since: Option<i64>,
        /// Only records received before this time (same forms as --since).
        #[arg(long, value_parser = parse_time)]
        until: Option<i64>,
        /// Page size.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Continue after this cursor (printed at the end of a full page).
        #[arg(long)]
        cursor: Option<i64>,
        /// JSON (one page object) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One record in full, as JSON.
    Show {
        /// Execution id.
        id: String,
    },
    /// Every event, in chain order.
    Export {
        /// Output format.
        #[arg(long, default_value = "jsonl")]
        format: String,
    },
    /// Walks the hash chain, then checks the head file (`audit.db.head`, rewritten on every
    /// append) so that removing the newest events is seen too; exits 1 naming the first event
    /// changed, removed, reordered, truncated (gone from the end) or rewritten.
    Verify,
    /// Applies retention now: `[audit] retention_days` / `retention_max_events`, or these flags.
    Prune {
        /// Remove events older than this (e.g. `30days`).
        #[arg(long, value_parser = humantime::parse_duration)]
        older_than: Option<std::time::Duration>,
        /// Keep at most this many events.
        #[arg(long)]
        keep_last: Option<u64>,
    },
}

fn ms(t: Option<std::time::SystemTime>) -> Option<i64> {
    t.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).and_then(|d| i64::try_from(d.as_millis()).ok())
}

/// Runs one `sandbox audit` subcommand on the log in `data_dir`.
pub fn run(data_dir: &Path, config: &sandbox_core::Config, command: AuditCommand) -> anyhow::Result<ExitCode> {
    let log = open(data_dir, &config.audit)?;
    if let AuditCommand::Prune { older_than, keep_last } = command {
        let report = match (older_than, keep_last) {
            (None, None) => log.apply_retention(config.audit.retention_days, config.audit.retention_max_events)?,
            _ => {
                let now = ms(Some(std::time::SystemTime::now())).unwrap_or(0);
                let before = older_than.map(|d| now - i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
                log.store().prune(before, keep_last, now)?
            }
        };
        outln!("pruned {} event{} (through #{})", report.events, if report.events == 1 { "" } else { "s" }, report.through_seq);
        return Ok(ExitCode::SUCCESS);
    }
    let mut store = log.store();
    let mut out = std::io::stdout().lock();
    match command {
        AuditCommand::List { profile, status, language, caller, since, until, limit, cursor, json } => {
            let (caller, caller_prefix) = match caller {
                Some(c) => match c.strip_suffix('*') {
                    Some(p) => (None, Some(p.to_owned())),
                    None => (Some(c), None),
                },
                None => (None, None),
            };
            let page =
                store.list(&ListFilter { profile, status, language, caller, caller_prefix, since_ms: since, until_ms: until, before_seq: cursor, limit })?;
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&json_with_times(&page)?)?)?;
            } else {
                let mut t = crate::table::new(&["EXECUTION", "PROFILE", "STATUS", "CALLER", "LANGUAGE", "RECEIVED"]);
                for r in &page.records {
                    t.add_row(vec![
                        r.execution_id.clone(),
                        r.profile.clone(),
                        r.status.clone(),
                        r.caller.clone(),
                        r.language.clone().unwrap_or_else(|| "-".into()),
                        sandbox_audit::time::format_ms(r.received_at_ms),
                    ]);
                }
                crate::table::print(t);
                if let Some(c) = page.next_cursor {
                    writeln!(out, "more: --cursor {c}")?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Show { id } => match store.get(&id)? {
            Some(r) => {
                writeln!(out, "{}", serde_json::to_string_pretty(&json_with_times(&r)?)?)?;
                Ok(ExitCode::SUCCESS)
            }
            None => {
                errln!("sandbox: error[not_found]: no audit record for execution {id:?}");
                Ok(ExitCode::from(2))
            }
        },
        AuditCommand::Export { format } => {
            anyhow::ensure!(format == "jsonl", "--format {format:?}: only jsonl is supported");
            for e in store.events()? {
                writeln!(out, "{}", serde_json::to_string(&json_with_times(&e)?)?)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Prune { .. } => unreachable!("handled above"),
        AuditCommand::Verify => {
            let report = store.verify()?;
            match &report.broken {
                None => {
                    match &report.head {
                        Some(h) => writeln!(out, "ok: {} events, chain intact, head event {} present as the head file recorded it", report.events, h.seq)?,
                        None => writeln!(out, "ok: {} events, chain intact (no head file yet: the end of the log is not anchored)", report.events)?,
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Some(b) => {
                    let why = match b.problem.as_str() {
                        "truncated" => ": the head file names this event, which is gone (the newest events were removed)",
                        "rewritten" => ": the head file names this event, but another event holds its place (the end of the log was replaced)",
                        _ => "",
                    };
                    writeln!(out, "BROKEN at event {} (execution {}): {}{why}", b.seq, b.execution_id, b.problem)?;
                    Ok(ExitCode::from(1))
                }
            }
        }
    }
}
