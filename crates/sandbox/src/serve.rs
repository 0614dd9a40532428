//! `sandbox serve`: the HTTP API on the engine, with graceful shutdown.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use sandbox_core::Config;
use sandbox_server::AppState;

/// Arguments of `sandbox serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (IP:PORT); overrides `[service] listen` (default 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<String>,
    /// Allow a non-loopback address without API keys. Anyone who can reach it can run code.
    #[arg(long)]
    insecure_no_auth: bool,
    /// A `Host` (name or name:port) every route but /healthz and /readyz accepts besides
    /// localhost, 127.0.0.1, ::1 and the listen address; others get 421 (DNS rebinding defence).
    /// Repeatable, e.g. `--allowed-host sandbox.example.com`.
    #[arg(long, value_name = "HOST", alias = "mcp-allowed-host")]
    allowed_host: Vec<String>,
    /// A browser `Origin` every route accepts (`https://app.example.com` for port 443,
    /// `http://localhost:*` for any port); repeatable. Requests with any other Origin get 403;
    /// requests without one (non-browser clients) pass.
    #[arg(long, value_name = "ORIGIN", alias = "mcp-allowed-origin")]
    allowed_origin: Vec<String>,
    /// This node's id in a cluster (it owns the leases of its executions in the shared
    /// PostgreSQL); overrides `[service] node_id`. Default: the host name.
    #[arg(long, value_name = "ID")]
    node_id: Option<String>,
    /// Start every execution cold, even of profiles whose `[warm] mode` is `template` (no
    /// templates are started).
    #[arg(long)]
    no_warm: bool,
}

/// Serves until SIGTERM or SIGINT; then `/readyz` answers 503 `shutting_down` for
/// `[service] drain_delay_ms` while requests are still served (a load balancer takes the node out
/// of rotation), then it stops accepting, lets in-flight executions run up to
/// `[service] shutdown_grace_ms`, and ends the rest (their sandboxes are torn down).
pub fn serve(mut config: Config, data_dir: PathBuf, args: ServeArgs) -> anyhow::Result<ExitCode> {
    if let Some(l) = args.listen {
        config.service.listen = l;
    }
    if let Some(id) = args.node_id {
        config.service.node_id = Some(id);
    }
    let drain_delay = Duration::from_millis(config.service.drain_delay_ms);
    let addr: SocketAddr = config.service.listen.parse().with_context(|| format!("--listen {:?} is not IP:PORT", config.service.listen))?;
    if !addr.ip().is_loopback() && config.service.api_keys.is_empty() && !args.insecure_no_auth {
        anyhow::bail!("refusing to listen on {addr} without API keys: add [[service.api_keys]] to the config, or pass --insecure-no-auth");
    }
    // Issue 12, finding 5: a local user delegated the sandboxes' host ids could own their
    // processes and workspaces.
    crate::subid::check(config.runtime.uid_base).map_err(|e| anyhow::anyhow!(e))?;
    let grace = Duration::from_millis(config.service.shutdown_grace_ms);
    let retention = (config.audit.retention_days, config.audit.retention_max_events);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    // The signal handlers exist before anything is started that a signal must stop. They used
    // to be made only when the server first polled its shutdown future: a SIGTERM before that
    // killed the process with its default action, leaving the warm templates and pooled
    // sandboxes being started (cgroups, mounts, directories) for the next start to sweep.
    let mut signals = crate::run::signal_streams(&rt);
    let (engine, audit) = crate::audit::engine(config, data_dir.clone())?;
    if let Some(why) = engine.host().first_failure() {
        tracing::warn!(reason = %why, "this host cannot run sandboxes; /readyz will say so");
    } else {
        // The readiness self-test at start: each step logged; a failure makes /readyz say which.
        for s in engine.self_test() {
            if s.ok {
                tracing::info!(step = %s.name, detail = %s.detail, "self-test");
            } else {
                tracing::warn!(step = %s.name, detail = %s.detail, "self-test failed: /readyz will say so");
            }
        }
    }
    if let Some(why) = engine.data_dir_unreachable() {
        anyhow::bail!("{why}");
    }
    // A signal while the audit log opened and the self-test ran (which may take seconds): stop
    // here, before anything is started or bound.
    if let Some(sig) = rt.block_on(crate::run::pending_interruption(&mut signals)) {
        tracing::info!(signal = sig, "shutting down before the start completed");
        return Ok(ExitCode::SUCCESS);
    }
    let engine = Arc::new(engine);
    // Every cold start takes a helper started ahead (its exec off the critical path).
    engine.keep_spare_helper();
    if !args.no_warm {
        // Templates start in the background; their profiles run cold until they are ready.
        if let Err(why) = engine.enable_warm() {
            tracing::warn!(reason = %why, "warm starts are off: every execution starts cold");
        }
    }
    let warm_engine = engine.clone();
    let retention_audit = audit.clone();
    let mut state = AppState::new(engine.clone(), Some(audit));
    if !addr.ip().is_loopback() && !addr.ip().is_unspecified() {
        state.hosts.allowed_hosts.push(match addr.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        });
    }
    state.hosts.allowed_hosts.extend(args.allowed_host);
    state.hosts.allowed_origins.extend(args.allowed_origin);
    let mcp_shutdown = state.mcp.shutdown.clone();
    let draining = state.draining.clone();
    tracing::info!(node_id = %retention_audit.node_id(), "node");
    let slots = state.service.slots();
    let status_engine = engine.clone();
    // Kept until the templates are stopped, below.
    let mut status = None;
    let served = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
        let local = listener.local_addr()?;
        // `sandbox doctor` asks a running service for its templates and pools here.
        match crate::status::StatusSocket::start(status_engine, &data_dir, "serve", Some(local.to_string())) {
            Ok(s) => status = Some(s),
            Err(e) => tracing::warn!(error = %e, "no status socket: `sandbox doctor` will not see this service"),
        }
        // One line on stdout, so scripts (and tests) can learn the port of `--listen 127.0.0.1:0`.
        // The address line is for whoever started the server; one that stopped reading is no error.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on http://{local} ({slots} execution slots)").and_then(|()| out.flush());
        // Retention at start and hourly.
        let retention_log = retention_audit.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(3600));
            loop {
                tick.tick().await;
                let log = retention_log.clone();
                match tokio::task::spawn_blocking(move || log.apply_retention(retention.0, retention.1)).await {
                    Ok(Ok(r)) if r.events > 0 => tracing::info!(events = r.events, through = r.through_seq, "audit retention applied"),
                    Ok(Err(e)) => tracing::error!(error = %e, "audit retention failed"),
                    _ => {}
                }
            }
        });
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        // The peer address counts refusals per client.
        let app = sandbox_server::app(state).into_make_service_with_connect_info::<SocketAddr>();
        let server = axum::serve(listener, app).with_graceful_shutdown(async move {
            crate::run::interruption(&mut signals).await;
            // Readiness goes first, so a balancer stops sending before the listener closes.
            draining.store(true, std::sync::atomic::Ordering::SeqCst);
            tracing::info!(drain_delay_ms = drain_delay.as_millis(), "shutting down: not ready");
            tokio::time::sleep(drain_delay).await;
            tracing::info!("shutting down: no new connections");
            let _ = stop_tx.send(true);
        });
        let mut stop = stop_rx.clone();
        let deadline = async move {
            let _ = stop.wait_for(|s| *s).await;
            tokio::time::sleep(grace).await;
            tracing::warn!("shutdown grace period over: ending the remaining executions");
            // Each remaining execution is killed, torn down and answered as internal_error;
            // the graceful shutdown then completes once those responses are out.
            engine.abort_all();
            // MCP sessions and their streams end too, so the drain can complete.
            mcp_shutdown.cancel();
            std::future::pending::<()>().await;
        };
        tokio::select! {
            r = server => r.context("server failed")?,
            () = deadline => {}
        }
        anyhow::Ok(())
    });
    // Dropping the runtime drops the remaining executions; each tears its sandbox down.
    // Templates go last, with nothing of theirs left behind (also when serving failed: the
    // listener could not be bound, or the server broke).
    warm_engine.stop_warm();
    drop(status);
    served.map(|()| ExitCode::SUCCESS)
}
