//! Allowlist networking, host side. The sandbox's init sends the descriptor of a TUN device
//! (its only route out, see `sandbox_runtime::tun`); for the execution's lifetime the engine
//! reads every packet the sandbox sends and decides ([`packet::classify`]):
//!
//! - UDP to the gateway's port 53: the sandbox's DNS ([`dns`]), which answers only allowed names;
//! - TCP to an allowed address and port: into a userspace TCP stack (ipstack), whose streams
//!   are spliced to host-side `TcpStream`s, counting bytes each way (TLS passes untouched);
//! - anything else: refused at once (TCP RST, ICMP unreachable) and reported.
//!
//! Nothing changes on the host: no firewall rule, route or sysctl. Every task of one execution
//! lives under one tokio task; [`Network::finish`] aborts it, which closes the TUN descriptor.

mod dns;
mod packet;
mod policy;
mod report;
#[cfg(test)]
mod tests;

use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ipstack::{IpStack, IpStackConfig, IpStackStream, IpStackTcpStream, TcpConfig};
use sandbox_core::network::{AllowedConnection, Allowlist, BlockedAttempt, NetworkReport};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;

use packet::Verdict;
use policy::Policy;
use report::{now, Reporter};

/// How long connecting to an allowed destination may take.
const CONNECT_PATIENCE: Duration = Duration::from_secs(10);
/// Packets read from the TUN per wake-up.
const READ_BATCH: usize = 64;
/// How often a quiet stream is polled again (see `copy_counting`).
const REPOLL: Duration = Duration::from_millis(250);
/// How long passing an end of stream on may take.
const SHUTDOWN_PATIENCE: Duration = Duration::from_secs(1);
/// Allowed connections open at once per sandbox (each holds a host socket); past that, new ones
/// are reset and reported as `too_many_connections`.
const MAX_CONNECTIONS: usize = 256;
/// DNS questions answered at once; more are dropped (the client retries).
const DNS_CONCURRENCY: usize = 32;
/// Packets queued for the TCP stack; past that they are dropped (TCP retransmits).
const STACK_QUEUE: usize = 4096;

/// One execution's network, running on the engine's runtime.
pub(crate) struct Network {
    task: tokio::task::JoinHandle<()>,
    reporter: Reporter,
}

/// The runtime every sandbox's network runs on: multi-threaded even under the CLI's
/// current-thread runtime, because ipstack 1.0.1 drops a stream with `block_in_place`, which
/// panics anywhere else. Two workers, started at the first allowlist execution, for the life of
/// the process.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("sandbox-network")
            .enable_all()
            .build()
            .expect("a tokio runtime can be built (threads and an epoll instance)")
    })
}

impl Network {
    /// Starts serving the sandbox whose init sends its TUN descriptor on `channel` (see
    /// `sandbox_runtime::tun::NET_FD`), under `allowlist`; allowed names are resolved with
    /// `upstream` (UDP `IP:PORT`) or, when `None`, the host's resolver.
    pub(crate) fn start(channel: UnixStream, allowlist: &Allowlist, upstream: Option<SocketAddr>) -> Self {
        let reporter = Reporter::default();
        let policy = Arc::new(Policy::new(allowlist));
        let r = reporter.clone();
        let task = runtime().spawn(async move {
            // EOF (no descriptor) means init failed before its network was up; it reports why.
            let fd = match tokio::task::spawn_blocking(move || sandbox_runtime::recv_fd(&channel)).await {
                Ok(Ok(Some(fd))) => fd,
                Ok(Ok(None)) => return,
                Ok(Err(e)) => return tracing::error!(error = %e, "receiving the sandbox's TUN failed"),
                Err(e) => return tracing::error!(error = %e, "receiving the sandbox's TUN failed"),
            };
            if let Err(e) = serve(fd, policy, r, upstream).await {
                tracing::error!(error = %e, "the sandbox's network failed");
            }
        });
        Self { task, reporter }
    }

    /// Stops everything (the TUN descriptor closes, open connections end) and returns the report.
    pub(crate) fn finish(self) -> NetworkReport {
        self.task.abort();
        self.reporter.snapshot()
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(fd: OwnedFd, policy: Arc<Policy>, reporter: Reporter, upstream: Option<SocketAddr>) -> io::Result<()> {
    let flags = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_GETFL)?;
    let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFL(flags))?;
    // `AsyncFd::new` is deprecated because a borrowed raw descriptor could be closed under it;
    // here it owns the `OwnedFd`, so the descriptor lives exactly as long as the registration.
    #[allow(deprecated)]
    let tun = Arc::new(AsyncFd::new(fd)?);
    let (to_stack, from_filter) = mpsc::channel(STACK_QUEUE);
    let mut config = IpStackConfig::default();
    config.mtu(sandbox_runtime::tun::MTU).map_err(io::Error::other)?;
    let mut tcp = TcpConfig::default();
    // The defaults (16 KiB in flight, 16 KiB receive buffer) cap throughput far below the
    // window TCP without scaling allows (64 KiB); and an idle allowed connection (a long poll)
    // must not be reset after 60 s: the execution's own timeout ends it.
    tcp.max_unacked_bytes = 64 << 10;
    tcp.read_buffer_size = 64 << 10;
    tcp.timeout = Duration::from_secs(24 * 3600);
    config.with_tcp_config(tcp);
    let mut stack = IpStack::new(config, Device { tun: tun.clone(), rx: from_filter });
    let mut tasks = JoinSet::new();
    let dns_slots = Arc::new(Semaphore::new(DNS_CONCURRENCY));
    let connection_slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut buf = vec![0u8; 65536];
    loop {
        tokio::select! {
            ready = tun.readable() => {
                let mut guard = ready?;
                // Up to a batch of packets per wake-up, then let the stack and the splices run.
                for _ in 0..READ_BATCH {
                    let n = match guard.try_io(|fd| nix::unistd::read(fd, &mut buf).map_err(io::Error::from)) {
                        Ok(n) => n?,
                        Err(_would_block) => break,
                    };
                    match packet::classify(&buf[..n], &policy, &reporter) {
                        Verdict::Pass => {
                            let _ = to_stack.try_send(buf[..n].to_vec());
                        }
                        Verdict::Connect { dst, refusal } => {
                            if connection_slots.available_permits() == 0 {
                                too_many(&reporter, &policy, dst);
                                write_packet(&tun, &refusal);
                            } else {
                                let _ = to_stack.try_send(buf[..n].to_vec());
                            }
                        }
                        Verdict::Reply(p) => write_packet(&tun, &p),
                        Verdict::Dns { query, client } => {
                            let Ok(permit) = dns_slots.clone().try_acquire_owned() else { continue };
                            let (tun, policy, reporter) = (tun.clone(), policy.clone(), reporter.clone());
                            tasks.spawn(async move {
                                let _permit = permit;
                                if let Some(reply) = dns::answer(&query, &policy, &reporter, upstream).await.and_then(|a| packet::dns_reply(client, &a)) {
                                    write_packet(&tun, &reply);
                                }
                            });
                        }
                        Verdict::Drop => {}
                    }
                }
            }
            accepted = stack.accept() => match accepted {
                Ok(IpStackStream::Tcp(stream)) => match connection_slots.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let (policy, reporter) = (policy.clone(), reporter.clone());
                        tasks.spawn(async move {
                            let _permit = permit;
                            splice(stream, policy, reporter).await;
                        });
                    }
                    // Rare: SYNs raced past the filter's check (the stack answers a SYN before
                    // the stream is accepted). The connection is closed at once.
                    Err(_) => {
                        too_many(&reporter, &policy, stream.peer_addr());
                        tasks.spawn(async move {
                            let mut stream = stream;
                            let _ = tokio::time::timeout(SHUTDOWN_PATIENCE, stream.shutdown()).await;
                        });
                    }
                },
                Ok(_) => {}
                Err(e) => return Err(io::Error::other(e)),
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
}

fn too_many(reporter: &Reporter, policy: &Policy, dst: SocketAddr) {
    reporter.blocked(BlockedAttempt {
        host: policy.host_of(dst.ip()),
        address: dst.ip().to_string(),
        port: Some(dst.port()),
        protocol: "tcp".into(),
        at: now(),
        reason: "too_many_connections".into(),
    });
}

/// Writes one packet to the sandbox; a full queue drops it (TCP retransmits, DNS retries).
fn write_packet(tun: &AsyncFd<OwnedFd>, p: &[u8]) {
    if p.is_empty() {
        return;
    }
    if let Err(e) = nix::unistd::write(tun.get_ref(), p) {
        tracing::debug!(error = %e, "packet to the sandbox dropped");
    }
}

/// Connects an allowed stream from the sandbox to its destination and copies both ways.
async fn splice(stream: IpStackTcpStream, policy: Arc<Policy>, reporter: Reporter) {
    let dst = stream.peer_addr();
    let conn = reporter.allowed(AllowedConnection {
        host: policy.host_of(dst.ip()),
        address: dst.ip().to_string(),
        port: dst.port(),
        protocol: "tcp".into(),
        started_at: now(),
        ..Default::default()
    });
    let upstream = match tokio::time::timeout(CONNECT_PATIENCE, tokio::net::TcpStream::connect(dst)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return conn.end(Some(format!("connecting to {dst}: {e}"))),
        Err(_) => return conn.end(Some(format!("connecting to {dst}: no answer within {CONNECT_PATIENCE:?}"))),
    };
    let _ = upstream.set_nodelay(true);
    let counters = conn.counters().clone();
    let (mut sandbox_read, mut sandbox_write) = tokio::io::split(stream);
    let (mut up_read, mut up_write) = upstream.into_split();
    let (a, b) = tokio::join!(
        copy_counting(&mut sandbox_read, &mut up_write, &counters.sent),
        copy_counting(&mut up_read, &mut sandbox_write, &counters.received),
    );
    conn.end(a.err().or(b.err()).map(|e| e.to_string()));
}

/// Copies `from` to `to` until EOF or an error, then shuts `to` down (so the other side sees
/// the end either way), adding each chunk to `count`.
async fn copy_counting(from: &mut (impl AsyncRead + Unpin), to: &mut (impl AsyncWrite + Unpin), count: &AtomicU64) -> io::Result<()> {
    let mut buf = vec![0u8; 64 << 10];
    let result = loop {
        // Re-polled: ipstack 1.0.1 does not wake a pending read when the sandbox closes the
        // connection; polling again sees the closed state (reads are cancel-safe).
        let n = match tokio::time::timeout(REPOLL, from.read(&mut buf)).await {
            Err(_elapsed) => continue,
            Ok(read) => read,
        };
        let n = match n {
            Ok(0) => break Ok(()),
            Ok(n) => n,
            Err(e) => break Err(e),
        };
        if let Err(e) = to.write_all(&buf[..n]).await {
            break Err(e);
        }
        count.fetch_add(n as u64, Ordering::Relaxed);
    };
    tracing::debug!(?result, "splice: one direction ended");
    // Bounded: ipstack's shutdown can wait on a session the sandbox already closed.
    let _ = tokio::time::timeout(SHUTDOWN_PATIENCE, to.shutdown()).await;
    result
}

/// The TCP stack's view of the TUN: it reads only the packets the filter passed, and writes
/// straight to the device.
struct Device {
    tun: Arc<AsyncFd<OwnedFd>>,
    rx: mpsc::Receiver<Vec<u8>>,
}

impl AsyncRead for Device {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(p)) => {
                let n = p.len().min(buf.remaining());
                buf.put_slice(&p[..n]);
                Poll::Ready(Ok(()))
            }
            // The filter is gone (the execution is ending): nothing more will come.
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for Device {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = match self.tun.poll_write_ready(cx) {
                Poll::Ready(g) => g?,
                Poll::Pending => return Poll::Pending,
            };
            match guard.try_io(|fd| nix::unistd::write(fd.get_ref(), buf).map_err(io::Error::from)) {
                Ok(r) => return Poll::Ready(r),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
