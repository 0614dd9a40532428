//! `sandbox audit`: list, show, export and verify the audit log of a data directory; and the
//! helpers `run` and `serve` use to open it and recover after a crash.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use sandbox_audit::{AuditLog, Caps, ListFilter};
use sandbox_engine::Engine;

/// Opens `<data_dir>/audit.db` with the caps of `[audit]`.
pub fn open(data_dir: &Path, config: &sandbox_core::Config) -> anyhow::Result<AuditLog> {
    let caps = Caps {
        code_max_bytes: usize::try_from(config.audit.code_max_bytes).unwrap_or(usize::MAX),
        output_max_bytes: usize::try_from(config.audit.output_max_bytes).unwrap_or(usize::MAX),
    };
    match config.audit.url.as_deref() {
        Some(url) => AuditLog::open_url(Some(url), data_dir, caps).context("cannot open the audit log ([audit] url)"),
        None => AuditLog::open(data_dir, caps).with_context(|| format!("cannot open the audit log in {}", data_dir.display())),
    }
}

/// The engine for `run` and `serve`: this binary as the helper, the audit log as its recorder,
/// and recovery from a crashed predecessor done.
/// Errors: the audit log cannot be opened (then nothing may run), or the binary cannot be found.
pub fn engine(config: sandbox_core::Config, data_dir: std::path::PathBuf) -> anyhow::Result<(Engine, std::sync::Arc<AuditLog>)> {
    let audit = std::sync::Arc::new(open(&data_dir, &config)?);
    let options = sandbox_engine::EngineOptions {
        config,
        data_dir,
        helper: std::env::current_exe().context("cannot find the sandbox binary to re-execute")?,
        cgroup_parent: "sandbox".into(),
    };
    let engine = Engine::new(options, audit.clone());
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

/// The caller name of CLI executions: `cli:<user>`.
pub fn cli_caller() -> String {
    let user = std::env::var("SUDO_USER").or_else(|_| std::env::var("USER")).unwrap_or_else(|_| format!("uid{}", nix_uid()));
    format!("cli:{user}")
}

fn nix_uid() -> u32 {
    std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap_or(0)
}

/// Subcommands of `sandbox audit`.
#[derive(clap::Subcommand, Debug)]
pub enum AuditCommand {
    /// Records, newest first.
    List {
        /// Only this profile.
        #[arg(long)]
        profile: Option<String>,
        /// Only this final status (ok, error, timeout, memory_limit, output_limit, rejected, interrupted, running).
        #[arg(long)]
        status: Option<String>,
        /// Only this language.
        #[arg(long)]
        language: Option<String>,
        /// Only this caller (e.g. `key:agent-1`, `cli:root`).
        #[arg(long)]
        caller: Option<String>,
        /// Only records received at or after this time (RFC 3339, e.g. 2026-11-30T10:00:00Z).
        #[arg(long, value_parser = humantime::parse_rfc3339_weak)]
        since: Option<std::time::SystemTime>,
        /// Only records received before this time (RFC 3339).
        #[arg(long, value_parser = humantime::parse_rfc3339_weak)]
        until: Option<std::time::SystemTime>,
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
    /// Walks the hash chain; exits 1 naming the first event changed, removed or reordered.
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
    let log = open(data_dir, config)?;
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
            let page = store.list(&ListFilter {
                profile,
                status,
                language,
                caller,
                since_ms: ms(since),
                until_ms: ms(until),
                before_seq: cursor,
                limit,
            })?;
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&page)?)?;
            } else {
                writeln!(out, "{:<38} {:<24} {:<13} {:<12} {:<20} RECEIVED", "EXECUTION", "PROFILE", "STATUS", "CALLER", "LANGUAGE")?;
                for r in &page.records {
                    let at = humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(r.received_at_ms).unwrap_or(0)));
                    writeln!(
                        out,
                        "{:<38} {:<24} {:<13} {:<12} {:<20} {at}",
                        r.execution_id,
                        r.profile,
                        r.status,
                        r.caller,
                        r.language.as_deref().unwrap_or("-")
                    )?;
                }
                if let Some(c) = page.next_cursor {
                    writeln!(out, "more: --cursor {c}")?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Show { id } => match store.get(&id)? {
            Some(r) => {
                writeln!(out, "{}", serde_json::to_string_pretty(&r)?)?;
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
                writeln!(out, "{}", serde_json::to_string(&e)?)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Prune { .. } => unreachable!("handled above"),
        AuditCommand::Verify => {
            let report = store.verify()?;
            match &report.broken {
                None => {
                    writeln!(out, "ok: {} events, chain intact", report.events)?;
                    Ok(ExitCode::SUCCESS)
                }
                Some(b) => {
                    writeln!(out, "BROKEN at event {} (execution {}): {}", b.seq, b.execution_id, b.problem)?;
                    Ok(ExitCode::from(1))
                }
            }
        }
    }
}
