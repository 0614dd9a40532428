//! A running service's warm state, for `sandbox doctor`: every `sandbox serve` and `sandbox mcp`
//! answers on a Unix socket `DATA_DIR/services/PID-RANDOM.sock` with one JSON document
//! ([`ServiceStatus`]: its templates and pools as they are now) and closes the connection. The
//! directory is `0700` and the socket `0600`, so only the data directory's owner (root, for a
//! host service) can ask; the socket is removed when the service stops, and one left by a
//! killed service (its connection refused) is removed by the next `doctor` that finds it.
//! The same pattern as a container engine's control socket (`/run/containerd/containerd.sock`),
//! answering one read-only question.

use std::io::Write as _;
use std::os::fd::{AsFd as _, AsRawFd as _, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sandbox_engine::pool::PoolStatus;
use sandbox_engine::warm::TemplateStatus;

/// How long `doctor` waits for a service's answer (connect, then read), and a service for a
/// reader to take it.
const PATIENCE: Duration = Duration::from_secs(2);
/// The largest answer `doctor` reads, in bytes (a service with hundreds of warm profiles writes
/// a few tens of kB).
const ANSWER_MAX_BYTES: u64 = 4 << 20;

/// One running service's state, as its status socket answers it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceStatus {
    /// The service's host pid.
    pub pid: u32,
    /// `serve` or `mcp` (stdio).
    pub command: String,
    /// The HTTP address it listens on (`serve`), e.g. `127.0.0.1:8080`.
    pub listen: Option<String>,
    /// Its version (`sandbox --version`).
    pub version: String,
    /// Time since it started, in ms.
    pub uptime_ms: u64,
    /// Each warm profile's template (empty when warm starts are off).
    pub templates: Vec<TemplateStatus>,
    /// Each pool (pool profiles', and template profiles' children forked ahead).
    pub pools: Vec<PoolStatus>,
}

/// The socket of a running service; dropping it removes the socket file and ends its thread.
pub struct StatusSocket {
    dir: OwnedFd,
    name: String,
    listener: Arc<UnixListener>,
    stop: Arc<AtomicBool>,
}

/// `DATA_DIR/services`, opened (`O_NOFOLLOW`: never through a symlink) and checked: it must
/// be this user's own and writable by no one else, or the service's and doctor's creations and
/// removals in it could be steered by whoever owns it (an attack review: a data directory
/// another user owns let them plant `services` as a symlink to a directory of root's, which
/// root then chmodded). `create`: made `0700` first if missing, and its mode set `0700`.
/// Errors: `NotFound` when missing and not `create`; `PermissionDenied` naming the owner or
/// mode refused; the system calls'.
fn open_services_dir(data_dir: &Path, create: bool) -> std::io::Result<OwnedFd> {
    use nix::sys::stat::Mode;
    let dir = data_dir.join("services");
    if create {
        match nix::unistd::mkdir(&dir, Mode::from_bits_truncate(0o700)) {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let flags = nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_CLOEXEC;
    let fd = nix::fcntl::open(&dir, flags, Mode::empty())?;
    let st = nix::sys::stat::fstat(&fd)?;
    let me = nix::unistd::geteuid().as_raw();
    if st.st_uid != me || st.st_mode & 0o022 != 0 {
        let why =
            format!("{}: owned by uid {} with mode {:o}; it must be uid {me}'s and writable by no one else", dir.display(), st.st_uid, st.st_mode & 0o7777);
        return Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, why));
    }
    if create {
        nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(0o700))?;
    }
    Ok(fd)
}

/// A path to `name` in the directory `dir` short enough for a socket address whatever the
/// directory's own path (`sun_path` holds 108 bytes): `/proc/self/fd/N/NAME`.
fn short_path(dir: &OwnedFd, name: &str) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}/{name}", dir.as_raw_fd()))
}

impl StatusSocket {
    /// Starts answering on `DATA_DIR/services/PID-RANDOM.sock` (the random part: two services
    /// in different pid namespaces may share a pid) on a thread of its own. `command`: `serve`
    /// or `mcp`; `listen`: the HTTP address. Errors: the directory cannot be made or is refused
    /// ([`open_services_dir`]), or the socket cannot be made (the service runs on without one:
    /// `doctor` then does not see it).
    pub fn start(engine: Arc<sandbox_engine::Engine>, data_dir: &Path, command: &'static str, listen: Option<String>) -> std::io::Result<Self> {
        let dir = open_services_dir(data_dir, true)?;
        let pid = std::process::id();
        let mut random = [0u8; 8];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut random)?;
        let name = format!("{pid}-{:016x}.sock", u64::from_ne_bytes(random));
        let listener = Arc::new(UnixListener::bind(short_path(&dir, &name))?);
        // The directory is this user's alone (checked above): nobody can swap the name.
        nix::sys::stat::fchmodat(&dir, name.as_str(), nix::sys::stat::Mode::from_bits_truncate(0o600), nix::sys::stat::FchmodatFlags::FollowSymlink)?;
        let started = std::time::Instant::now();
        let version = env!("CARGO_PKG_VERSION").to_owned();
        let (serving, stop) = (listener.clone(), Arc::new(AtomicBool::new(false)));
        let stopping = stop.clone();
        std::thread::Builder::new().name("status".into()).spawn(move || loop {
            let mut conn = match serving.accept() {
                Ok((conn, _)) => conn,
                // Shut down by `Drop`.
                Err(_) if stopping.load(Ordering::SeqCst) => return,
                // Out of descriptors, a connection reset before it was taken: the next one may
                // be served (an attack review: the thread ended at the first error).
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            let status = ServiceStatus {
                pid,
                command: command.into(),
                listen: listen.clone(),
                version: version.clone(),
                uptime_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                templates: engine.templates().map(|t| t.status()).unwrap_or_default(),
                pools: engine.pools().map(|p| p.status()).unwrap_or_default(),
            };
            // A reader that stops reading is not waited for.
            let _ = conn.set_write_timeout(Some(PATIENCE));
            let _ = serde_json::to_writer(&mut conn, &status).map_err(std::io::Error::from).and_then(|()| conn.flush());
        })?;
        Ok(Self { dir, name, listener, stop })
    }
}

impl Drop for StatusSocket {
    fn drop(&mut self) {
        let _ = nix::unistd::unlinkat(&self.dir, self.name.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the thread's accept with an error (Linux: a listening socket shut down).
        let _ = nix::sys::socket::shutdown(self.listener.as_raw_fd(), nix::sys::socket::Shutdown::Both);
    }
}

/// The services running on `data_dir` now, by pid, each as it answered. Only sockets are
/// asked (other entries are left alone); one whose connection is refused (its service was
/// killed) is removed; one that answers nothing parseable within [`PATIENCE`] (connect and
/// read together) is an `Err` naming it and why, and so is a directory that cannot be listed
/// or is refused ([`open_services_dir`]).
pub fn running(data_dir: &Path) -> Vec<Result<ServiceStatus, String>> {
    let shown = data_dir.join("services");
    let dir = match open_services_dir(data_dir, false) {
        Ok(dir) => dir,
        // No service ever ran on this data directory.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => return vec![Err(format!("{}: {e}", shown.display()))],
    };
    let entries = match std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())) {
        Ok(entries) => entries,
        Err(e) => return vec![Err(format!("{}: {e}", shown.display()))],
    };
    let mut names: Vec<String> =
        entries.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".sock")).collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let is_socket =
            nix::sys::stat::fstatat(&dir, name.as_str(), nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFSOCK);
        if !is_socket {
            continue;
        }
        match ask(&dir, &name) {
            Ok(status) => out.push(Ok(status)),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                let _ = nix::unistd::unlinkat(&dir, name.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
            }
            Err(e) => out.push(Err(format!("{}: no answer: {e}", shown.join(&name).display()))),
        }
    }
    out.sort_by_key(|s| s.as_ref().map_or(0, |s| s.pid));
    out
}

/// Connects to `name` in `dir` and reads its answer, all within [`PATIENCE`]: the connect
/// does not wait (a full backlog is `WouldBlock`), the reads share one deadline.
fn ask(dir: &OwnedFd, name: &str) -> std::io::Result<ServiceStatus> {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let deadline = std::time::Instant::now() + PATIENCE;
    let sock = socket(AddressFamily::Unix, SockType::Stream, SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC, None)?;
    connect(sock.as_raw_fd(), &UnixAddr::new(&short_path(dir, name))?)?;
    let mut text = Vec::new();
    let mut buf = [0u8; 16 << 10];
    loop {
        match nix::unistd::read(&sock, &mut buf) {
            Ok(0) => break,
            Ok(n) => {
                text.extend_from_slice(&buf[..n]);
                if text.len() as u64 > ANSWER_MAX_BYTES {
                    return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "answer too large"));
                }
            }
            Err(nix::errno::Errno::EAGAIN) => {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no complete answer in time"));
                }
                let mut fds = [nix::poll::PollFd::new(sock.as_fd(), nix::poll::PollFlags::POLLIN)];
                let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
                nix::poll::poll(&mut fds, ms)?;
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    serde_json::from_slice(&text).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not a status answer: {e}")))
}
