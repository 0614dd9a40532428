//! Allowlist networking, host side (the engine's `network`, in a crate of its own because it
//! parses hostile bytes as host root and needs nothing of the execution lifecycle: it is handed
//! a channel, an allowlist and an upstream, and returns a report). The sandbox's init sends the descriptor of a TUN device
//! (its only route out, see `sandbox_runtime::tun`); for the execution's lifetime the engine
//! reads every packet the sandbox sends and decides (`packet::classify`):
//!
//! - UDP to the gateway's port 53: the sandbox's DNS (`dns`), which answers only allowed names;
//! - TCP to an allowed address and port: into a userspace TCP stack with bounded buffers
//!   (`tcp`, smoltcp), whose connections are copied to host-side `TcpStream`s, counting bytes
//!   each way (TLS passes untouched);
//! - anything else: refused at once (TCP RST, ICMP unreachable) and reported.
//!
//! Nothing changes on the host: no firewall rule, route or sysctl. Every task of one execution
//! lives under one tokio task, whose loop runs the filter, the stack and the copying;
//! [`Network::finish`] aborts it, which closes the TUN descriptor and every host socket.

mod dns;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod packet;
mod policy;
mod report;
mod tcp;
#[cfg(test)]
mod tests;

use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use sandbox_core::network::{AllowedConnection, Allowlist, BlockedAttempt, NetworkReport};
use tokio::io::unix::AsyncFd;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use packet::Verdict;
use policy::Policy;
use report::{now, Reporter};
use tcp::{Stack, MAX_CONNECTIONS};

/// Packets read from the TUN per wake-up (the stack's input queue holds at most these).
const READ_BATCH: usize = 64;
/// How long the stack sleeps with nothing to do and no timer set.
const IDLE: Duration = Duration::from_secs(3600);
/// DNS questions answered at once; more are dropped (the client retries).
const DNS_CONCURRENCY: usize = 32;

/// One execution's network, running on the network runtime.
pub struct Network {
    task: tokio::task::JoinHandle<()>,
    reporter: Reporter,
}

/// The runtime every sandbox's network runs on: multi-threaded even under the CLI's
/// current-thread runtime, so that a sandbox's packets keep moving while the CLI's thread
/// waits on the program, and one busy sandbox does not stall another's network. Two workers,
/// started at the first allowlist execution, for the life of the process.
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
    pub fn start(channel: UnixStream, allowlist: &Allowlist, upstream: Option<SocketAddr>) -> Self {
        let reporter = Reporter::default();
        let policy = Arc::new(Policy::new(allowlist, policy::host_addresses()));
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
    pub fn finish(self) -> NetworkReport {
        self.task.abort();
        self.reporter.snapshot()
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What woke the loop.
enum Event {
    Connected(tcp::Connecting),
    Other,
}

async fn serve(fd: OwnedFd, policy: Arc<Policy>, reporter: Reporter, upstream: Option<SocketAddr>) -> io::Result<()> {
    let flags = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_GETFL)?;
    let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFL(flags))?;
    // `AsyncFd::new` is deprecated because a borrowed raw descriptor could be closed under it;
    // here it owns the `OwnedFd`, so the descriptor lives exactly as long as the registration.
    #[allow(deprecated)]
    let tun = Arc::new(AsyncFd::new(fd)?);
    let mut stack = Stack::new(tun.clone(), usize::from(sandbox_runtime::tun::MTU));
    let mut connecting = JoinSet::new();
    let mut dns_tasks = JoinSet::new();
    let dns = dns::Resolver::new(upstream);
    let dns_slots = Arc::new(Semaphore::new(DNS_CONCURRENCY));
    let mut buf = vec![0u8; tcp::PACKET_BUFFER_BYTES];
    let mut peak = 0;
    loop {
        let delay = stack.delay().unwrap_or(IDLE);
        let event = tokio::select! {
            ready = tun.readable() => {
                let mut guard = ready?;
                // Up to a batch of packets per wake-up, then let the stack run.
                for _ in 0..READ_BATCH {
                    let n = match guard.try_io(|fd| nix::unistd::read(fd, &mut buf).map_err(io::Error::from)) {
                        Ok(n) => n?,
                        Err(_would_block) => break,
                    };
                    match packet::classify(&buf[..n], &policy, &reporter) {
                        Verdict::Pass { src, dst } => {
                            let key = (src, dst);
                            if stack.is_pending(&key) {
                                // Its SYN waits for the host-side connect; nothing else is due yet.
                            } else if stack.knows(&key) {
                                // The packet's buffer goes to the stack as it is, a spare takes its place.
                                let full = std::mem::replace(&mut buf, stack.spare_buffer());
                                stack.ingress(full, n);
                            } else {
                                write_packet(&tun, &packet::reset_for(&buf[..n]));
                            }
                        }
                        Verdict::Connect { src, dst, refusal } => {
                            let key = (src, dst);
                            if stack.knows(&key) {
                                // A retransmitted SYN: the stack (or the pending connect) has it.
                                if !stack.is_pending(&key) {
                                    stack.ingress(buf[..n].to_vec(), n);
                                }
                            } else if stack.open() >= MAX_CONNECTIONS {
                                too_many(&reporter, &policy, dst);
                                write_packet(&tun, &refusal);
                            } else {
                                let report = reporter.allowed(AllowedConnection {
                                    host: policy.host_of(dst.ip(), dst.port()),
                                    address: dst.ip().to_string(),
                                    port: dst.port(),
                                    protocol: "tcp".into(),
                                    started_at: now(),
                                    ..Default::default()
                                });
                                connecting.spawn(stack.start(key, buf[..n].to_vec(), refusal, report));
                            }
                        }
                        Verdict::Reply(p) => write_packet(&tun, &p),
                        Verdict::Dns { query, client } => {
                            let Ok(permit) = dns_slots.clone().try_acquire_owned() else { continue };
                            let (tun, policy, reporter, dns) = (tun.clone(), policy.clone(), reporter.clone(), dns.clone());
                            dns_tasks.spawn(async move {
                                let _permit = permit;
                                if let Some(reply) = dns.answer(&query, &policy, &reporter).await.and_then(|a| packet::dns_reply(client, &a)) {
                                    write_packet(&tun, &reply);
                                }
                            });
                        }
                        Verdict::Drop => {}
                    }
                }
                Event::Other
            }
            Some(done) = connecting.join_next(), if !connecting.is_empty() => match done {
                Ok(c) => Event::Connected(c),
                Err(e) => return Err(io::Error::other(e)),
            },
            Some(_) = dns_tasks.join_next(), if !dns_tasks.is_empty() => Event::Other,
            () = stack.host_ready() => Event::Other,
            () = tokio::time::sleep(delay) => Event::Other,
        };
        if let Event::Connected(c) = event {
            stack.connected(c);
        }
        stack.run();
        if stack.buffered_peak() != peak {
            peak = stack.buffered_peak();
            reporter.buffer_peak(peak);
        }
    }
}

fn too_many(reporter: &Reporter, policy: &Policy, dst: SocketAddr) {
    reporter.blocked(BlockedAttempt {
        host: policy.host_of(dst.ip(), dst.port()),
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
