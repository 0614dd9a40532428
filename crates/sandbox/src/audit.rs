//! `sandbox audit`: list, show, export and verify the audit log of a data directory; and the
//! helpers `run` and `serve` use to open it and recover after a crash.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use sandbox_audit::{AuditLog, Caps, ListFilter};
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

/// The engine for `run` and `serve`: this binary as the helper, the audit log as its recorder,
/// and recovery from a crashed predecessor done.
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
    let node = crate::config::node_id(&config);
    // The log opens (SQLite's schema and the WAL's recovery, or a PostgreSQL connection) on a
    // thread of its own while this one probes the host: both come before a `sandbox run`'s
    // `begin`, and the CLI would otherwise do one after the other.
    let opening = {
        let (dir, audit) = (data_dir.clone(), config.audit.clone());
        std::thread::Builder::new().name("audit-open".into()).spawn(move || open(&dir, &audit))
    };
    let probe = sandbox_engine::HostProbe::run(&config);
    let opened = match opening {
        Ok(thread) => thread.join().unwrap_or_else(|_| Err(anyhow::anyhow!("the audit log's opening thread panicked"))),
        Err(_) => open(&data_dir, &config.audit),
    };
    let audit = std::sync::Arc::new(opened?.with_node(node, config.audit.lease_ttl_ms));
    let options = sandbox_engine::EngineOptions {
        config,
        data_dir,
        helper: std::env::current_exe().context("cannot find the sandbox binary to re-execute")?,
        cgroup_parent: "sandbox".into(),
        command: crate::command().to_owned(),
        environment_builds: builds,
    };
    let engine = Engine::probed(options, audit.clone(), probe);
    recover(&engine, &audit);
    Ok((engine, audit))
}

/// After a crash: sweeps the host state of dead executions and marks their records `interrupted`.
pub fn recover(engine: &Engine, audit: &AuditLog) {
    let swept = engine.recover();
    match audit.recover() {
        Ok(ids) if !ids.is_empty() || !swept.is_empty() => {
            tracing::warn!(interrupted = ids.len(), swept = swept.len(), "recovered executions of a service that died");
        }
        Ok(_) => {}
        Err(e) => tracing::error!(error = %e, "could not mark interrupted executions"),
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
        outln!("pruned {} events (through #{})", report.events, report.through_seq);
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
