//! A running service's warm state, for `sandbox doctor`: every `sandbox serve` and `sandbox mcp`
//! answers on a Unix socket `DATA_DIR/services/PID.sock` with one JSON document
//! ([`ServiceStatus`]: its templates and pools as they are now) and closes the connection. The
//! directory is `0700` and the socket `0600`, so only the data directory's owner (root, for a
//! host service) can ask; the socket is removed when the service stops, and one left by a
//! killed service (its connection refused) is removed by the next `doctor` that finds it.
//! The same pattern as a container engine's control socket (`/run/containerd/containerd.sock`),
//! answering one read-only question.

use std::io::{Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
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
    path: PathBuf,
    listener: Arc<UnixListener>,
}

/// `DATA_DIR/services`: where the services of a data directory put their sockets.
fn services_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("services")
}

/// A path to `name` in `dir` short enough for a socket address whatever `dir`'s length
/// (`sun_path` holds 108 bytes): `/proc/self/fd/N/NAME`, through a descriptor of `dir` that
/// the returned file holds open.
fn short_path(dir: &Path, name: &str) -> std::io::Result<(std::fs::File, PathBuf)> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let d = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC).open(dir)?;
    let path = PathBuf::from(format!("/proc/self/fd/{}/{name}", d.as_raw_fd()));
    Ok((d, path))
}

impl StatusSocket {
    /// Starts answering on `DATA_DIR/services/PID.sock` on a thread of its own. `command`:
    /// `serve` or `mcp`; `listen`: the HTTP address. Errors: the directory or socket cannot be
    /// made (the service runs on without one: `doctor` then does not see it).
    pub fn start(engine: Arc<sandbox_engine::Engine>, data_dir: &Path, command: &'static str, listen: Option<String>) -> std::io::Result<Self> {
        let dir = services_dir(data_dir);
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        let pid = std::process::id();
        let name = format!("{pid}.sock");
        // A file of this name was left by a killed service that had this pid.
        let _ = std::fs::remove_file(dir.join(&name));
        let (_dir_fd, short) = short_path(&dir, &name)?;
        let listener = Arc::new(UnixListener::bind(&short)?);
        std::fs::set_permissions(dir.join(&name), std::fs::Permissions::from_mode(0o600))?;
        let started = std::time::Instant::now();
        let version = env!("CARGO_PKG_VERSION").to_owned();
        let serving = listener.clone();
        std::thread::Builder::new().name("status".into()).spawn(move || {
            // Ends when the socket is shut down (`Drop`): accept then fails.
            for conn in serving.incoming() {
                let Ok(mut conn) = conn else { break };
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
            }
        })?;
        Ok(Self { path: dir.join(name), listener })
    }
}

impl Drop for StatusSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        // Wakes the thread's accept with an error (Linux: a listening socket shut down).
        let _ = nix::sys::socket::shutdown(self.listener.as_raw_fd(), nix::sys::socket::Shutdown::Both);
    }
}

/// The services running on `data_dir` now, by pid, each as it answered. A socket whose
/// connection is refused (its service was killed) is removed; one that answers nothing
/// parseable within [`PATIENCE`] is an `Err` naming its file and why, and so is a directory
/// that cannot be listed (another user's).
pub fn running(data_dir: &Path) -> Vec<Result<ServiceStatus, String>> {
    let dir = services_dir(data_dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        // No service ever ran on this data directory.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        // Another user's (a root service's, doctor run unprivileged): say so, not "none".
        Err(e) => return vec![Err(format!("{}: {e}", dir.display()))],
    };
    let mut names: Vec<String> =
        entries.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".sock")).collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        match ask(&dir, &name) {
            Ok(status) => out.push(Ok(status)),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                let _ = std::fs::remove_file(dir.join(&name));
            }
            Err(e) => out.push(Err(format!("{}: no answer: {e}", dir.join(&name).display()))),
        }
    }
    out.sort_by_key(|s| s.as_ref().map_or(0, |s| s.pid));
    out
}

fn ask(dir: &Path, name: &str) -> std::io::Result<ServiceStatus> {
    let (_dir_fd, short) = short_path(dir, name)?;
    let conn = UnixStream::connect(&short)?;
    conn.set_read_timeout(Some(PATIENCE))?;
    let mut text = Vec::new();
    conn.take(ANSWER_MAX_BYTES).read_to_end(&mut text)?;
    serde_json::from_slice(&text).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not a status answer: {e}")))
}
