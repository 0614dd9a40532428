//! The sandbox's resolver at the gateway address, port 53: answers A questions for names a rule
//! allows (from the profile's `hosts`, the configured upstream server, or the host's resolver),
//! NXDOMAIN for every other name, and never passes a question for a disallowed name on. Only
//! the question's name and type leave, re-encoded in a fresh query (no client bytes are
//! forwarded), so nothing can be tunnelled through the upstream server under a disallowed name.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{rdata::A, Name, RData, Record, RecordType};
use hickory_resolver::config::ResolverConfig;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::TokioResolver;
use sandbox_core::network::BlockedAttempt;
use sandbox_runtime::tun::GATEWAY_IPV4;
use tokio::sync::Semaphore;

use super::policy::{Policy, Refusal};
use super::report::{now, Reporter};

/// TTL of the answers, in seconds.
const TTL_S: u32 = 60;
/// How long a lookup may take (the upstream server's, or the host resolver's).
const UPSTREAM_PATIENCE: Duration = Duration::from_secs(3);
/// Host-resolver look-ups in flight at once for one sandbox; a question past that gets an empty
/// answer at once (`dns_busy` in the report). A look-up ends with its patience or its sandbox
/// (its future dropped), and so does its count.
pub(crate) const HOST_LOOKUPS_PER_SANDBOX: usize = 4;
/// The same for the whole process: the questions the service has outstanding at the host's
/// name servers on the sandboxes' behalf.
pub(crate) const HOST_LOOKUPS_MAX: usize = 32;
static HOST_LOOKUPS: Semaphore = Semaphore::const_new(HOST_LOOKUPS_MAX);

/// No host-resolver look-up was free (see [`HOST_LOOKUPS_PER_SANDBOX`], [`HOST_LOOKUPS_MAX`]).
#[derive(Debug)]
pub(crate) struct Busy;

/// A look-up of a name's addresses that answers at once (the fuzz targets' stand-in for the
/// host's resolver).
pub(crate) type Lookup = fn(&str) -> io::Result<Vec<IpAddr>>;

/// Where names that are neither a profile's `hosts` nor asked of `upstream_dns` are resolved.
#[derive(Clone)]
enum Host {
    /// The host's resolver configuration (`/etc/resolv.conf`'s name servers and options, and
    /// `/etc/hosts`: [`SystemConf`]), asked by hickory-resolver on this runtime: a look-up is a
    /// future, so it ends when its patience runs out or its sandbox ends, with nothing left
    /// running (a `getaddrinfo` on a blocking thread ran on for as long as the host's resolver
    /// waited, ~10 s for a dead name server, holding its count). Each sandbox's resolver is
    /// made at its first host look-up, with a cache of its own (no answer is shared between
    /// sandboxes); `None` in the cell when the configuration cannot be read. `config`: a
    /// test's name servers instead of the host's.
    System { resolver: Arc<tokio::sync::OnceCell<Option<TokioResolver>>>, config: Option<ResolverConfig> },
    /// A stand-in.
    StandIn(Lookup),
}

/// The host's resolver configuration, read once per process and again when `/etc/resolv.conf`
/// or `/etc/hosts` changes (device, inode, size, mtime), on a blocking thread: every sandbox's
/// resolver shares it, `/etc/hosts` included (an attack review: built per sandbox on an async
/// worker, a 150,000-line hosts file took ~0.5 s of a worker and ~280 MB per sandbox).
pub(crate) struct SystemConf {
    stamp: Vec<FileStamp>,
    config: ResolverConfig,
    options: hickory_resolver::config::ResolverOpts,
    hosts: Arc<hickory_resolver::Hosts>,
}

/// A file's device, inode, size and mtime (s, ns); `None` when it cannot be read.
type FileStamp = Option<(u64, u64, u64, i64, i64)>;

/// The files [`SystemConf`] is read from.
const SYSTEM_CONF_FILES: [&str; 2] = ["/etc/resolv.conf", "/etc/hosts"];

static SYSTEM_CONF: tokio::sync::Mutex<Option<Arc<SystemConf>>> = tokio::sync::Mutex::const_new(None);

/// The files' identities now (`None` for one that cannot be read).
fn system_conf_stamp() -> Vec<FileStamp> {
    use std::os::unix::fs::MetadataExt as _;
    SYSTEM_CONF_FILES.iter().map(|f| std::fs::metadata(f).ok().map(|m| (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))).collect()
}

/// [`SystemConf`] as the files are now; `None` when resolv.conf cannot be read or parsed.
pub(crate) async fn system_conf() -> Option<Arc<SystemConf>> {
    let mut current = SYSTEM_CONF.lock().await;
    let stamp = system_conf_stamp();
    if let Some(c) = current.as_ref().filter(|c| c.stamp == stamp) {
        return Some(c.clone());
    }
    let read = tokio::task::spawn_blocking(move || {
        use nix::errno::Errno::{self, EACCES, EISDIR, ELOOP, ENOENT, ENOTDIR, EPERM};
        let data = match std::fs::read(SYSTEM_CONF_FILES[0]) {
            Ok(d) => Some(d),
            // What glibc's `__resolv_conf_load` ignores: the defaults apply.
            Err(e) if matches!(Errno::from_raw(e.raw_os_error().unwrap_or(0)), ENOENT | EACCES | EPERM | EISDIR | ENOTDIR | ELOOP) => None,
            Err(e) => {
                tracing::warn!(error = %e, "the host's resolver configuration cannot be read: names resolve to nothing");
                return None;
            }
        };
        let (config, options) = parse_resolv_conf(data.as_deref())?;
        let hosts = Arc::new(hickory_resolver::Hosts::from_system().unwrap_or_default());
        Some(Arc::new(SystemConf { stamp, config, options, hosts }))
    })
    .await
    .ok()
    .flatten();
    current.clone_from(&read);
    read
}

/// The name server asked when resolv.conf names none or is missing: "the name server on the
/// local machine" (resolv.conf(5); glibc's `res_init` uses `INADDR_LOOPBACK`).
const LOCAL_NAME_SERVER: &str = "nameserver 127.0.0.1";

/// `/etc/resolv.conf`'s name servers and options as glibc reads them: a missing file (`None`)
/// or one that names no `nameserver` asks the name server on the local machine
/// ([`LOCAL_NAME_SERVER`]), its other lines kept (hickory-resolver refuses such a file, so a
/// host relying on the default resolved no name at all). `None` when it cannot be parsed.
pub(crate) fn parse_resolv_conf(data: Option<&[u8]>) -> Option<(ResolverConfig, hickory_resolver::config::ResolverOpts)> {
    use hickory_resolver::system_conf::parse_resolv_conf as parse;
    let data = data.unwrap_or_default();
    parse(data)
        .or_else(|first| {
            // The only error a local name server's line can mend is there being no name server.
            let mut with_local = data.to_vec();
            with_local.extend_from_slice(format!("\n{LOCAL_NAME_SERVER}\n").as_bytes());
            parse(&with_local).map_err(|_| first)
        })
        .inspect_err(|e| tracing::warn!(error = %e, "the host's resolver configuration cannot be parsed: names resolve to nothing"))
        .ok()
}

/// One sandbox's way to resolve allowed names.
#[derive(Clone)]
pub(crate) struct Resolver {
    upstream: Option<SocketAddr>,
    host: Host,
    slots: Arc<Semaphore>,
}

impl Resolver {
    /// Asks `upstream` (UDP `IP:PORT`) or, when `None`, the host's resolver configuration.
    pub(crate) fn new(upstream: Option<SocketAddr>) -> Self {
        Self::with_host(upstream, Host::System { resolver: Arc::default(), config: None })
    }

    /// Like [`Resolver::new`], with `lookup` standing in for the host's resolver.
    #[cfg_attr(not(feature = "fuzzing"), allow(dead_code))]
    pub(crate) fn with_lookup(upstream: Option<SocketAddr>, lookup: Lookup) -> Self {
        Self::with_host(upstream, Host::StandIn(lookup))
    }

    /// Like [`Resolver::new`], with `config`'s name servers in place of the host's.
    #[cfg(test)]
    pub(crate) fn with_host_config(config: ResolverConfig) -> Self {
        Self::with_host(None, Host::System { resolver: Arc::default(), config: Some(config) })
    }

    fn with_host(upstream: Option<SocketAddr>, host: Host) -> Self {
        Self { upstream, host, slots: Arc::new(Semaphore::new(HOST_LOOKUPS_PER_SANDBOX)) }
    }

    /// Answers one DNS message `query` from the sandbox; `None` for something that is not a
    /// well-formed question (dropped, like a real server would).
    pub(crate) async fn answer(&self, query: &[u8], policy: &Policy, report: &Reporter) -> Option<Vec<u8>> {
        answer(query, policy, report, self).await
    }

    /// Look-ups of this sandbox's in flight now.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        HOST_LOOKUPS_PER_SANDBOX - self.slots.available_permits()
    }

    /// IPv4 addresses of `name`: from the upstream server (UDP) if set, else the host's resolver.
    /// Failures and time-outs give no addresses (an empty answer); so does a full look-up pool,
    /// told apart (`Err(Busy)`) for the report.
    async fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, Busy> {
        let found = match self.upstream {
            Some(server) => tokio::time::timeout(UPSTREAM_PATIENCE, ask(name, server)).await.ok().flatten(),
            None => self.host_lookup(name).await?,
        };
        let mut v: Vec<IpAddr> = found.unwrap_or_default().into_iter().filter(IpAddr::is_ipv4).collect();
        v.dedup();
        Ok(v)
    }

    async fn host_lookup(&self, name: &str) -> Result<Option<Vec<IpAddr>>, Busy> {
        let (resolver, config) = match &self.host {
            Host::StandIn(lookup) => return Ok(lookup(name).ok()),
            Host::System { resolver, config } => (resolver, config),
        };
        // Held while the look-up runs: released when it ends, times out or is dropped.
        let _global = HOST_LOOKUPS.try_acquire().map_err(|_| Busy)?;
        let _mine = self.slots.try_acquire().map_err(|_| Busy)?;
        let resolver = resolver
            .get_or_init(|| async {
                let (conf, options, hosts) = match config {
                    Some(c) => (c.clone(), hickory_resolver::config::ResolverOpts::default(), None),
                    None => {
                        let system = system_conf().await?;
                        (system.config.clone(), system.options.clone(), Some(system.hosts.clone()))
                    }
                };
                let mut builder = TokioResolver::builder_with_config(conf, TokioRuntimeProvider::default()).with_options(options);
                // The hosts file comes shared ([`SystemConf`]); answers are the sandbox's own, its
                // cache goes with it.
                builder.options_mut().use_hosts_file = hickory_resolver::config::ResolveHosts::Never;
                builder.options_mut().cache_size = 64;
                let mut resolver =
                    builder.build().inspect_err(|e| tracing::warn!(error = %e, "the host's resolver cannot be made: names resolve to nothing")).ok()?;
                if let Some(hosts) = hosts {
                    resolver.set_hosts(hosts);
                }
                Some(resolver)
            })
            .await;
        let Some(resolver) = resolver else { return Ok(None) };
        // Fully qualified: only the name a rule allowed is asked, never the search list's
        // expansions of it (`x.cdn.test.corp.example`, whose answer would have come back as
        // `x.cdn.test`'s: an attack review).
        let found = tokio::time::timeout(UPSTREAM_PATIENCE, resolver.ipv4_lookup(format!("{name}."))).await;
        Ok(found.ok().and_then(Result::ok).map(|l| {
            l.answers()
                .iter()
                .filter_map(|r| match &r.data {
                    RData::A(a) => Some(IpAddr::V4(a.0)),
                    _ => None,
                })
                .collect()
        }))
    }
}

async fn answer(query: &[u8], policy: &Policy, report: &Reporter, resolver: &Resolver) -> Option<Vec<u8>> {
    let q = Message::from_vec(query).ok()?;
    if q.metadata.message_type != MessageType::Query || q.metadata.op_code != OpCode::Query {
        return None;
    }
    let mut reply = Message::response(q.metadata.id, OpCode::Query);
    reply.metadata.recursion_desired = q.metadata.recursion_desired;
    reply.metadata.recursion_available = true;
    let [question] = q.queries.as_slice() else {
        reply.metadata.response_code = ResponseCode::FormErr;
        return reply.to_vec().ok();
    };
    reply.add_query(question.clone());
    let name = question.name().to_ascii().trim_end_matches('.').to_ascii_lowercase();
    // Rules match the name's labels, so a label must be one a host name has (letters, digits,
    // `-`, `_`): one holding a dot renders escaped ("a\.b.test"), and that text ends like a
    // name below `b.test` while the name itself is one level above it (an attack review).
    let plain = question.name().iter().all(|l| !l.is_empty() && l.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_'));
    if !plain || !policy.name_allowed(&name) {
        refused(report, &name, GATEWAY_IPV4.to_string(), Some(53), Refusal::NameNotAllowed);
        reply.metadata.response_code = ResponseCode::NXDomain;
        return reply.to_vec().ok();
    }
    // Only A: IPv6 is not routed out, and other types carry nothing a client needs to connect.
    if question.query_type() != RecordType::A {
        return reply.to_vec().ok();
    }
    let (found, trusted) = match policy.static_host(&name) {
        Some(ip) => (vec![ip], true),
        None => match resolver.resolve(&name).await {
            Ok(found) => (found, false),
            Err(Busy) => {
                refused(report, &name, GATEWAY_IPV4.to_string(), Some(53), Refusal::DnsBusy);
                return reply.to_vec().ok();
            }
        },
    };
    let addrs = policy.screen(found.clone(), trusted);
    if addrs.is_empty() && !found.is_empty() {
        refused(report, &name, found.iter().map(ToString::to_string).collect::<Vec<_>>().join(","), None, Refusal::InternalAddress);
    }
    for ip in addrs {
        if let IpAddr::V4(v4) = ip {
            if !policy.hand_out(&name, ip, trusted) {
                refused(report, &name, ip.to_string(), None, Refusal::TooManyAddresses);
                continue;
            }
            reply.add_answer(Record::from_rdata(question.name().clone(), TTL_S, RData::A(A(v4))));
        }
    }
    reply.to_vec().ok()
}

/// Reports a DNS question about `name` refused for `reason` (`address`: what it was asked of,
/// or what the answer held).
fn refused(report: &Reporter, name: &str, address: String, port: Option<u16>, reason: Refusal) {
    report.blocked(BlockedAttempt { host: Some(name.to_owned()), address, port, protocol: "dns".into(), at: now(), reason: reason.as_str().into() });
}

async fn ask(name: &str, server: SocketAddr) -> Option<Vec<IpAddr>> {
    let bind: SocketAddr = if server.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { (std::net::Ipv6Addr::UNSPECIFIED, 0).into() };
    let sock = tokio::net::UdpSocket::bind(bind).await.ok()?;
    sock.connect(server).await.ok()?;
    let mut m = Message::query();
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).ok()?, RecordType::A));
    sock.send(&m.to_vec().ok()?).await.ok()?;
    let mut buf = vec![0u8; 4096];
    loop {
        let n = sock.recv(&mut buf).await.ok()?;
        let Ok(r) = Message::from_vec(&buf[..n]) else { continue };
        if r.metadata.id != m.metadata.id {
            continue;
        }
        return Some(
            r.answers
                .iter()
                .filter_map(|rec| match &rec.data {
                    RData::A(a) => Some(IpAddr::V4(a.0)),
                    _ => None,
                })
                .collect(),
        );
    }
}
