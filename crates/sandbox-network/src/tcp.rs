//! Allowed TCP, with bounded memory: the sandbox's connections end in a userspace TCP stack
//! (smoltcp) whose sockets have fixed buffers, and each is copied to a host `TcpStream` to the
//! destination. The window the stack advertises to the sandbox is the free space of the socket's
//! receive buffer, and data moves from that buffer to the host socket only as fast as the host
//! socket takes it (and the other way round), so a destination that reads slowly or not at all
//! closes the sandbox's window instead of growing the engine's memory.
//!
//! Memory of one sandbox: at most [`MAX_CONNECTIONS`] connections, whose userspace buffers
//! together stay within [`BUFFER_BUDGET_BYTES`]: a connection gets [`WIDE_BUFFER_BYTES`] each way
//! while the budget allows it with [`NARROW_BUFFER_BYTES`] still kept for every connection that
//! may yet open, else [`NARROW_BUFFER_BYTES`]. Host sockets get kernel buffers of the same size
//! (`SO_SNDBUF`, `SO_RCVBUF`), so the kernel's share is bounded likewise.
//!
//! A SYN is held until the host-side connection is made (like passt): if the destination
//! refuses or does not answer, the sandbox gets a RST, so `connect()` fails there too; no
//! userspace buffer exists before that.

use std::collections::{HashMap, VecDeque};
use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{Checksum, ChecksumCapabilities, Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::tcp;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr, IpEndpoint};
use tokio::io::unix::AsyncFd;
use tokio::net::{TcpSocket, TcpStream};

use super::report::ConnectionHandle;

/// Allowed connections open (or being connected) at once per sandbox; past that, new ones are
/// reset and reported as `too_many_connections`.
pub(crate) const MAX_CONNECTIONS: usize = 256;
/// Userspace TCP buffers one sandbox may hold, in bytes, both directions of every connection.
pub(crate) const BUFFER_BUDGET_BYTES: usize = 16 << 20;
/// Buffer each way of a connection while the budget allows: the window that lets one connection
/// run at memory speed.
pub(crate) const WIDE_BUFFER_BYTES: usize = 1 << 20;
/// Buffer each way of a connection once the wide ones have used their share of the budget.
pub(crate) const NARROW_BUFFER_BYTES: usize = 16 << 10;
/// Size of a packet buffer: the largest packet a TUN passes.
pub(crate) const PACKET_BUFFER_BYTES: usize = 65536;
/// Spare packet buffers kept for reuse (one read batch's worth).
const SPARE_BUFFERS: usize = 64;
/// How long connecting to an allowed destination may take.
const CONNECT_PATIENCE: Duration = Duration::from_secs(10);

/// A connection's two ends: the sandbox's (source) and the destination.
pub(crate) type Key = (SocketAddr, SocketAddr);

/// What a finished host-side connect hands back to [`Stack::connected`].
pub(crate) struct Connecting {
    key: Key,
    syn: Vec<u8>,
    refusal: Vec<u8>,
    buffer_bytes: usize,
    report: ConnectionHandle,
    result: Result<TcpStream, String>,
}

/// Connects to `dst` from the host with kernel buffers of `buffer_bytes` (set before connecting,
/// so that the window scale is chosen for them).
pub(crate) async fn connect(dst: SocketAddr, buffer_bytes: usize) -> Result<TcpStream, String> {
    let attempt = async {
        let s = if dst.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        let size = u32::try_from(buffer_bytes).unwrap_or(u32::MAX);
        s.set_send_buffer_size(size)?;
        s.set_recv_buffer_size(size)?;
        let stream = s.connect(dst).await?;
        stream.set_nodelay(true)?;
        Ok::<_, io::Error>(stream)
    };
    match tokio::time::timeout(CONNECT_PATIENCE, attempt).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(format!("connecting to {dst}: {e}")),
        Err(_) => Err(format!("connecting to {dst}: no answer within {CONNECT_PATIENCE:?}")),
    }
}

/// One sandbox's TCP stack and its connections.
pub(crate) struct Stack {
    iface: Interface,
    sockets: SocketSet<'static>,
    dev: Link,
    conns: HashMap<Key, Conn>,
    /// Connections whose host side is being connected, and the buffer size reserved for each.
    pending: HashMap<Key, usize>,
    /// Userspace buffer bytes reserved (pending) or allocated (open), both directions.
    buffered: usize,
    /// The most `buffered` ever was.
    buffered_peak: usize,
}

struct Conn {
    handle: SocketHandle,
    host: TcpStream,
    report: ConnectionHandle,
    buffer_bytes: usize,
    /// The destination sent its FIN (the sandbox's side is being closed after the data).
    host_eof: bool,
    /// The sandbox's FIN was passed on (the host socket's write side is shut down).
    host_write_shut: bool,
    error: Option<String>,
}

impl Stack {
    /// A stack writing to `tun`, with the sandbox's link MTU `mtu`.
    pub(crate) fn new(tun: Arc<AsyncFd<OwnedFd>>, mtu: usize) -> Self {
        let mut dev = Link { rx: VecDeque::new(), tun, mtu, out: vec![0; mtu], spare: Arc::new(Mutex::new(Vec::new())) };
        let mut config = Config::new(HardwareAddress::Ip);
        config.random_seed = {
            use std::hash::{BuildHasher, Hasher};
            std::collections::hash_map::RandomState::new().build_hasher().finish()
        };
        let mut iface = Interface::new(config, &mut dev, smoltcp::time::Instant::now());
        // Every destination is "local": the stack answers for whatever address the sandbox
        // connects to (the filter decided which), and the sandbox's own addresses are on-link.
        iface.set_any_ip(true);
        iface.update_ip_addrs(|a| {
            let _ = a.push(IpCidr::new(IpAddress::from(sandbox_runtime::tun::GATEWAY_IPV4), 30));
            let _ = a.push(IpCidr::new(IpAddress::from(std::net::Ipv6Addr::new(0xfd00, 0x5b, 0, 0, 0, 0, 0, 1)), 64));
        });
        Self { iface, sockets: SocketSet::new(Vec::new()), dev, conns: HashMap::new(), pending: HashMap::new(), buffered: 0, buffered_peak: 0 }
    }

    /// Connections open or being connected.
    pub(crate) fn open(&self) -> usize {
        self.conns.len() + self.pending.len()
    }

    /// The most userspace buffer memory this sandbox's connections held at once, in bytes.
    pub(crate) fn buffered_peak(&self) -> usize {
        self.buffered_peak
    }

    /// Whether `key` is a connection this stack knows (open or being connected).
    pub(crate) fn knows(&self, key: &Key) -> bool {
        self.conns.contains_key(key) || self.pending.contains_key(key)
    }

    /// Whether `key` is being connected (its packets are ignored until then).
    pub(crate) fn is_pending(&self, key: &Key) -> bool {
        self.pending.contains_key(key)
    }

    /// Starts connecting `key` for the SYN `syn` (refused with `refusal` if that fails); the
    /// future resolves to what [`Stack::connected`] takes. The caller checked [`Stack::open`].
    pub(crate) fn start(&mut self, key: Key, syn: Vec<u8>, refusal: Vec<u8>, report: ConnectionHandle) -> impl Future<Output = Connecting> + Send + 'static {
        let buffer_bytes = self.buffer_size();
        self.pending.insert(key, buffer_bytes);
        self.reserve(2 * buffer_bytes);
        async move {
            let result = connect(key.1, buffer_bytes).await;
            Connecting { key, syn, refusal, buffer_bytes, report, result }
        }
    }

    /// The buffer size (each way) for a new connection: wide while the budget keeps the narrow
    /// size for every connection that may still open after it, else narrow.
    fn buffer_size(&self) -> usize {
        let later = MAX_CONNECTIONS.saturating_sub(self.open() + 1);
        if self.buffered + 2 * WIDE_BUFFER_BYTES + later * 2 * NARROW_BUFFER_BYTES <= BUFFER_BUDGET_BYTES {
            WIDE_BUFFER_BYTES
        } else {
            NARROW_BUFFER_BYTES
        }
    }

    fn reserve(&mut self, bytes: usize) {
        self.buffered += bytes;
        self.buffered_peak = self.buffered_peak.max(self.buffered);
        debug_assert!(self.buffered <= BUFFER_BUDGET_BYTES);
    }

    /// Finishes a connect: on success the held SYN enters the stack, answered by a socket made
    /// for exactly this connection; on failure the sandbox gets the RST.
    pub(crate) fn connected(&mut self, c: Connecting) {
        self.pending.remove(&c.key);
        let host = match c.result {
            Ok(host) => host,
            Err(e) => {
                self.buffered -= 2 * c.buffer_bytes;
                self.dev.write(&c.refusal);
                return c.report.end(Some(e));
            }
        };
        let mut socket = tcp::Socket::new(tcp::SocketBuffer::new(vec![0; c.buffer_bytes]), tcp::SocketBuffer::new(vec![0; c.buffer_bytes]));
        // Data is passed on as it comes; the sandbox's link is lossless and fast, so an ACK at
        // once costs less than the wait (a 1 ms delayed ACK measured no faster).
        socket.set_nagle_enabled(false);
        socket.set_ack_delay(None);
        let (src, dst) = c.key;
        let listening = socket.listen(IpEndpoint::new(IpAddress::from(dst.ip()), dst.port()));
        let handle = self.sockets.add(socket);
        // Only this socket listens while its SYN is processed, so the SYN can only reach it.
        let len = c.syn.len();
        self.dev.rx.push_front((c.syn, len));
        self.poll();
        let socket = self.sockets.get_mut::<tcp::Socket>(handle);
        let remote = socket.remote_endpoint().map(|e| SocketAddr::new(e.addr.into(), e.port));
        if listening.is_err() || remote != Some(src) {
            socket.abort();
            self.poll();
            self.sockets.remove(handle);
            self.buffered -= 2 * c.buffer_bytes;
            self.dev.write(&c.refusal);
            return c.report.end(Some("the sandbox's connection did not start".into()));
        }
        self.conns.insert(c.key, Conn { handle, host, report: c.report, buffer_bytes: c.buffer_bytes, host_eof: false, host_write_shut: false, error: None });
    }

    /// Queues the packet in the first `len` bytes of `buffer` (of an open connection) for the
    /// stack; the buffer is reused once the stack has read it.
    pub(crate) fn ingress(&mut self, buffer: Vec<u8>, len: usize) {
        self.dev.rx.push_back((buffer, len));
    }

    /// A packet buffer of [`PACKET_BUFFER_BYTES`] to read into: a reused one if there is one
    /// (no allocation or copy per packet on the way in), else a new one.
    pub(crate) fn spare_buffer(&mut self) -> Vec<u8> {
        self.dev.spare.lock().expect("spare buffers lock").pop().unwrap_or_else(|| vec![0; PACKET_BUFFER_BYTES])
    }

    /// Runs the stack: takes the queued packets, moves data between every connection's socket
    /// and its host socket as far as both sides have room, sends what that produced (data,
    /// ACKs, window updates), and drops finished connections.
    pub(crate) fn run(&mut self) {
        self.poll();
        self.pump();
        self.poll();
        self.reap();
    }

    /// How long until the stack has timers to run (retransmissions, ...), if it has any.
    pub(crate) fn delay(&mut self) -> Option<Duration> {
        self.iface.poll_delay(smoltcp::time::Instant::now(), &self.sockets).map(|d| Duration::from_micros(d.total_micros()))
    }

    /// Resolves when some host socket is ready for what its connection waits for: readable
    /// when the sandbox's side has room for more, writable when data from the sandbox waits.
    pub(crate) fn host_ready(&self) -> impl Future<Output = ()> + '_ {
        poll_fn(move |cx| {
            for c in self.conns.values() {
                let s = self.sockets.get::<tcp::Socket>(c.handle);
                if c.wants_read(s) && c.host.poll_read_ready(cx).is_ready() {
                    return Poll::Ready(());
                }
                if c.wants_write(s) && c.host.poll_write_ready(cx).is_ready() {
                    return Poll::Ready(());
                }
            }
            Poll::Pending
        })
    }

    fn poll(&mut self) {
        self.iface.poll(smoltcp::time::Instant::now(), &mut self.dev, &mut self.sockets);
    }

    fn pump(&mut self) {
        for c in self.conns.values_mut() {
            let s = self.sockets.get_mut::<tcp::Socket>(c.handle);
            c.pump(s);
        }
    }

    fn reap(&mut self) {
        let sockets = &mut self.sockets;
        let mut freed = 0;
        self.conns.retain(|_, c| {
            let s = sockets.get_mut::<tcp::Socket>(c.handle);
            let sandbox_done = matches!(s.state(), tcp::State::Closed | tcp::State::TimeWait);
            if !sandbox_done || (s.recv_queue() > 0 && c.error.is_none()) {
                return true;
            }
            c.report.end(c.error.take());
            sockets.remove(c.handle);
            freed += 2 * c.buffer_bytes;
            false
        });
        self.buffered -= freed;
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        for c in self.conns.values_mut() {
            c.report.end(c.error.take());
        }
    }
}

impl Conn {
    /// Room on the sandbox's side and the destination may still send.
    fn wants_read(&self, s: &tcp::Socket) -> bool {
        !self.host_eof && self.error.is_none() && s.may_send() && s.send_queue() < s.send_capacity()
    }

    /// Data from the sandbox waits for the destination.
    fn wants_write(&self, s: &tcp::Socket) -> bool {
        !self.host_write_shut && self.error.is_none() && s.recv_queue() > 0
    }

    fn pump(&mut self, s: &mut tcp::Socket) {
        if self.error.is_some() {
            return;
        }
        let counters = self.report.counters().clone();
        // Sandbox -> destination, as far as the host socket takes it.
        while self.wants_write(s) {
            match s.recv(|buf| match self.host.try_write(buf) {
                Ok(n) => (n, Ok(n)),
                Err(e) => (0, Err(e)),
            }) {
                Ok(Ok(n)) => {
                    counters.sent.fetch_add(n as u64, Ordering::Relaxed);
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
                Ok(Err(e)) => return self.fail(s, e),
                Err(_) => break,
            }
        }
        // The sandbox's FIN, once its data is through, becomes the host socket's.
        if !self.host_write_shut && s.recv_queue() == 0 && !s.may_recv() && !matches!(s.state(), tcp::State::SynReceived | tcp::State::Listen) {
            self.host_write_shut = true;
            if s.state() != tcp::State::Closed {
                let _ = nix::sys::socket::shutdown(self.host.as_raw_fd(), nix::sys::socket::Shutdown::Write);
            }
        }
        // Destination -> sandbox, as far as the socket's send buffer has room.
        while self.wants_read(s) {
            match s.send(|buf| match self.host.try_read(buf) {
                Ok(n) => (n, Ok(n)),
                Err(e) => (0, Err(e)),
            }) {
                Ok(Ok(0)) => {
                    self.host_eof = true;
                    s.close();
                }
                Ok(Ok(n)) => {
                    counters.received.fetch_add(n as u64, Ordering::Relaxed);
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
                Ok(Err(e)) => return self.fail(s, e),
                Err(_) => break,
            }
        }
    }

    /// The host side failed: the sandbox's side is reset, and the report says why.
    fn fail(&mut self, s: &mut tcp::Socket, e: io::Error) {
        tracing::debug!(error = %e, "allowed connection failed on the host side");
        self.error = Some(e.to_string());
        s.abort();
    }
}

/// The stack's view of the TUN: packets the filter passed come in through `rx`; what the stack
/// sends is written straight to the device (a full device queue drops it: TCP retransmits).
struct Link {
    /// Packets for the stack: a buffer and the length of the packet in it.
    rx: VecDeque<(Vec<u8>, usize)>,
    /// Buffers the stack has read, for [`Stack::spare_buffer`].
    spare: Arc<Mutex<Vec<Vec<u8>>>>,
    tun: Arc<AsyncFd<OwnedFd>>,
    mtu: usize,
    /// Where each outgoing packet is built (one MTU, reused: no allocation or zeroing per packet).
    out: Vec<u8>,
}

impl Link {
    fn write(&self, p: &[u8]) {
        super::write_packet(&self.tun, p);
    }
}

impl Device for Link {
    type RxToken<'a> = Rx;
    type TxToken<'a> = Tx<'a>;

    fn receive(&mut self, _: smoltcp::time::Instant) -> Option<(Rx, Tx<'_>)> {
        let (buffer, len) = self.rx.pop_front()?;
        Some((Rx { buffer, len, spare: self.spare.clone() }, Tx(self)))
    }

    fn transmit(&mut self, _: smoltcp::time::Instant) -> Option<Tx<'_>> {
        Some(Tx(self))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ip;
        caps.max_transmission_unit = self.mtu;
        // Checksums are computed for the sandbox's kernel, which checks them; the sandbox's own
        // are not checked (a bad one could only hurt its own connection).
        let mut checksum = ChecksumCapabilities::default();
        checksum.ipv4 = Checksum::Tx;
        checksum.tcp = Checksum::Tx;
        caps.checksum = checksum;
        caps
    }
}

struct Rx {
    buffer: Vec<u8>,
    len: usize,
    spare: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl RxToken for Rx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let r = f(&self.buffer[..self.len]);
        let mut spare = self.spare.lock().expect("spare buffers lock");
        if spare.len() < SPARE_BUFFERS && self.buffer.len() == PACKET_BUFFER_BYTES {
            spare.push(self.buffer);
        }
        r
    }
}

struct Tx<'a>(&'a mut Link);

impl TxToken for Tx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let link = self.0;
        if link.out.len() < len {
            link.out.resize(len, 0);
        }
        let r = f(&mut link.out[..len]);
        super::write_packet(&link.tun, &link.out[..len]);
        r
    }
}
