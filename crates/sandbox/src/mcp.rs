//! `sandbox mcp`: the MCP server over stdin/stdout, for agents that spawn their tools.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use sandbox_core::Config;
use sandbox_engine::{Caller, NoHooks, Service};
use sandbox_mcp::McpServer;

/// Serves one MCP client on stdin/stdout until it closes stdin. Executions are recorded as
/// `mcp:cli:<user>/<client>@<version>` and get the slots and queue `sandbox serve` would have.
/// Errors: the audit log cannot be opened, or the transport failed.
pub fn stdio(config: Config, data_dir: PathBuf) -> anyhow::Result<ExitCode> {
    let max_message_bytes = usize::try_from(config.service.body_max_bytes).unwrap_or(usize::MAX);
    let (engine, _audit) = crate::audit::engine(config, data_dir)?;
    if let Some(why) = engine.data_dir_unreachable() {
        anyhow::bail!("{why}");
    }
    let engine = Arc::new(engine);
    engine.keep_spare_helper();
    if let Err(why) = engine.enable_warm() {
        tracing::warn!(reason = %why, "warm starts are off: every execution starts cold");
    }
    // The slots and queue `sandbox serve` would have; no metrics are served here.
    let server = McpServer::new(Arc::new(Service::for_config(engine.clone(), Arc::new(NoHooks))));
    let principal = Caller::local(crate::audit::cli_caller());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let served = rt.block_on(server.serve_stdio(principal, max_message_bytes));
    // Executions still running (the client closed stdin mid-call) are dropped with the runtime
    // and tear their sandboxes down; then the templates go.
    drop(rt);
    engine.stop_warm();
    served?;
    Ok(ExitCode::SUCCESS)
}
