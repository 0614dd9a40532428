//! `sandbox mcp`: the MCP server over stdin/stdout, for agents that spawn their tools.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use sandbox_core::Config;
use sandbox_engine::{Caller, NoHooks, Service};
use sandbox_mcp::McpServer;

/// How long a SIGTERM or SIGINT waits for the executions it ended to be torn down and answered
/// before the server stops anyway (a dropped execution still tears its sandbox down).
const ABORTED_EXECUTIONS_WAIT: Duration = Duration::from_secs(5);

/// Serves one MCP client on stdin/stdout until it closes stdin, or until SIGTERM or SIGINT.
/// Executions are recorded as `mcp:cli:<user>/<client>@<version>` and get the slots and queue
/// `sandbox serve` would have. Either ends the running executions at once (killed, torn down,
/// recorded and answered as `internal_error`: a client that closes stdin (MCP's stdio shutdown)
/// or sends SIGTERM wants the server gone, so there is no grace period), then stops the warm templates and pools, leaving no
/// process, cgroup, mount or directory of them; the exit code is 0, as `sandbox serve`'s.
/// Errors: the audit log cannot be opened, or the transport failed.
pub fn stdio(config: Config, data_dir: PathBuf) -> anyhow::Result<ExitCode> {
    let max_message_bytes = usize::try_from(config.service.body_max_bytes).unwrap_or(usize::MAX);
    let (engine, _audit) = crate::audit::engine(config, data_dir.clone())?;
    if let Some(why) = engine.data_dir_unreachable() {
        anyhow::bail!("{why}");
    }
    let engine = Arc::new(engine);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    // The signal handlers exist before anything is started that a signal must stop.
    let mut signals = crate::run::signal_streams(&rt);
    engine.keep_spare_helper();
    if let Err(why) = engine.enable_warm() {
        tracing::warn!(reason = %why, "warm starts are off: every execution starts cold");
    }
    // `sandbox doctor` asks a running service for its templates and pools here; kept until the
    // templates are stopped, below.
    let status = crate::status::StatusSocket::start(engine.clone(), &data_dir, "mcp", None)
        .inspect_err(|e| tracing::warn!(error = %e, "no status socket: `sandbox doctor` will not see this service"))
        .ok();
    // The slots and queue `sandbox serve` would have; no metrics are served here.
    let service = Arc::new(Service::for_config(engine.clone(), Arc::new(NoHooks)));
    let server = McpServer::new(service.clone());
    let principal = Caller::local(crate::audit::cli_caller());
    let input_closed = Arc::new(tokio::sync::Notify::new());
    let stop = rt.block_on(async {
        let serving = server.serve_stdio(principal, max_message_bytes, input_closed.clone());
        tokio::pin!(serving);
        let sig = tokio::select! {
            served = &mut serving => return Stop::Closed(served),
            () = input_closed.notified() => {
                // The client closed stdin: its shutdown. The running executions end at once and
                // are recorded; rmcp writes their answers (stdout may still be read) as it
                // drains the calls in flight, then stops.
                tracing::info!("stdin closed: ending the running executions");
                engine.abort_all();
                let served = tokio::select! {
                    served = &mut serving => served,
                    _ = crate::run::interruption(&mut signals) => Ok(()),
                };
                return Stop::Closed(served);
            }
            sig = crate::run::interruption(&mut signals) => sig,
        };
        tracing::info!(signal = sig, "shutting down: ending the running executions");
        engine.abort_all();
        // The transport still serves while the ended executions are torn down and recorded (a
        // slot is held until then), so that their answers reach the client; a second signal, or
        // the client closing stdin, stops it now.
        let ended = async {
            while service.in_flight() > 0 || service.queued() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // The last answers are written.
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        tokio::select! {
            served = &mut serving => Stop::Closed(served),
            waited = tokio::time::timeout(ABORTED_EXECUTIONS_WAIT, ended) => Stop::Signal { ended: waited.is_ok() },
            _ = crate::run::interruption(&mut signals) => Stop::Signal { ended: false },
        }
    });
    match stop {
        // Executions ended at stdin's close were answered; any still running (a transport
        // failure, a second signal) are dropped with the runtime and tear their sandboxes down.
        Stop::Closed(_) => drop(rt),
        // Nothing of an execution is left. The runtime is not waited for: its blocking thread
        // still reads stdin, which the client may keep open.
        Stop::Signal { ended: true } => rt.shutdown_background(),
        // The executions still running are dropped, and tear their sandboxes down meanwhile.
        Stop::Signal { ended: false } => rt.shutdown_timeout(ABORTED_EXECUTIONS_WAIT),
    }
    // Then the templates and pools go.
    engine.stop_warm();
    drop(status);
    if let Stop::Closed(served) = stop {
        served?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Why [`stdio`] stopped serving.
enum Stop {
    /// The client closed stdin (or the transport failed).
    Closed(std::io::Result<()>),
    /// SIGTERM or SIGINT; `ended`: every execution was torn down and answered.
    Signal { ended: bool },
}
