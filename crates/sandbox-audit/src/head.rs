//! The chain's head, anchored outside the database: a small file naming the newest event this
//! host appended (`seq`, `hash`, execution id), replaced atomically after every append.
//!
//! A hash chain cannot see its own tail cut off: deleting the newest events leaves a shorter
//! chain that still verifies. The head file remembers how far the chain reached, so `verify`
//! reports `truncated` when that event is gone and `rewritten` when another event took its
//! place. The file is advanced only while the database still holds the event it names, so an
//! append after a truncation does not cover the truncation up.
//!
//! What it does not stop (see the README, "Audit log"): someone who can write the head file
//! too (root on this host) can rewrite both; the events appended after the last head write (a
//! crash between the commit and the rename) are not anchored; on PostgreSQL each node anchors
//! only the events it appended itself.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::AuditError;

/// The newest event a head file vouches for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeadMark {
    /// Sequence number of the event.
    pub seq: i64,
    /// Its hash (SHA-256, hex), as stored in the chain.
    pub hash: String,
    /// Its execution id (so that a report can name what went missing).
    pub execution_id: String,
}

/// A head file at `path`, with its lock file `<path>.lock` (appends from several processes
/// sharing one log take it in turn, so the file is only ever replaced by a newer event).
#[derive(Debug, Clone)]
pub struct HeadFile {
    path: PathBuf,
}

/// The held lock of a [`HeadFile`]; released on drop.
pub struct HeadLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl HeadFile {
    /// The head file at `path` (nothing is created until the first [`HeadFile::lock`]).
    pub fn new(path: PathBuf) -> Self {
        Self { path }
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes the lock that serializes appends of every process on this host that shares the
    /// log (blocking). Hold it from before the database transaction until after
    /// [`HeadFile::advance`].
    /// Errors: [`AuditError::Head`] naming the lock file.
    pub fn lock(&self) -> Result<HeadLock, AuditError> {
        let lock_path = self.lock_path();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode_private()
            .open(&lock_path)
            .map_err(|e| AuditError::Head(lock_path.clone(), e))?;
        let lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, errno)| AuditError::Head(lock_path, std::io::Error::from(errno)))?;
        Ok(HeadLock { _lock: lock })
    }

    /// The mark the file holds; `None` when there is no file yet.
    /// Errors: [`AuditError::Head`] when it cannot be read, [`AuditError::HeadCorrupt`] when
    /// it is not a mark.
    pub fn read(&self) -> Result<Option<HeadMark>, AuditError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| AuditError::HeadCorrupt(self.path.clone(), e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(AuditError::Head(self.path.clone(), e)),
        }
    }

    /// Replaces the file with `mark` durably: a temporary file written and fsynced, renamed
    /// over the old one, then the directory fsynced. The caller holds the [`HeadLock`].
    /// Errors: [`AuditError::Head`] naming the file.
    pub fn write(&self, _lock: &HeadLock, mark: &HeadMark) -> Result<(), AuditError> {
        let tmp = self.path.with_extension("head.tmp");
        let io = |e| AuditError::Head(self.path.clone(), e);
        let mut f = std::fs::OpenOptions::new().create(true).truncate(true).write(true).mode_private().open(&tmp).map_err(io)?;
        f.write_all(serde_json::to_string(mark).expect("a mark serializes").as_bytes()).map_err(io)?;
        f.write_all(b"\n").map_err(io)?;
        f.sync_all().map_err(io)?;
        drop(f);
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        let dir = self.path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)
    }

    /// After an append committed `new`: replaces the mark with it, unless the database no
    /// longer holds the event the current mark names (`still_there(seq, hash)` says whether
    /// it does). Then the old mark stays, so `verify` keeps reporting what was removed.
    /// Returns whether the mark moved.
    /// Errors: [`AuditError::Head`], [`AuditError::HeadCorrupt`], or `still_there`'s.
    pub fn advance(&self, lock: &HeadLock, new: &HeadMark, still_there: impl FnOnce(&HeadMark) -> Result<bool, AuditError>) -> Result<bool, AuditError> {
        if let Some(old) = self.read()? {
            if old.seq >= new.seq || !still_there(&old)? {
                return Ok(false);
            }
        }
        self.write(lock, new)?;
        Ok(true)
    }

    fn lock_path(&self) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(".lock");
        PathBuf::from(p)
    }
}

/// Files holding the log's secrets are created owner-only (mode 0600).
trait PrivateMode {
    fn mode_private(&mut self) -> &mut Self;
}

impl PrivateMode for std::fs::OpenOptions {
    fn mode_private(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::mode(self, 0o600)
    }
}

/// Adds the head check to `report`, the chain walk's (which wins when it found a break):
/// the event `mark.seq` must still be stored with `mark.hash`; `stored_hash(seq)` gives an
/// event's stored hash, `None` when there is no such row. `first_seq` is the first event kept
/// (after retention); a mark older than it cannot be checked and passes.
/// The problem is `truncated` (the event is gone: the newest events were removed) or
/// `rewritten` (another event holds its place). Without a mark, `report` is returned as is.
pub fn checked(
    mut report: crate::VerifyReport,
    mark: Option<HeadMark>,
    first_seq: Option<i64>,
    stored_hash: impl FnOnce(i64) -> Option<String>,
) -> crate::VerifyReport {
    let Some(mark) = mark else { return report };
    if report.broken.is_none() && first_seq.is_none_or(|f| mark.seq >= f) {
        let problem = match stored_hash(mark.seq) {
            None => Some("truncated"),
            Some(h) if h != mark.hash => Some("rewritten"),
            Some(_) => None,
        };
        report.broken = problem.map(|p| crate::Broken { seq: mark.seq, execution_id: mark.execution_id.clone(), problem: p.into() });
    }
    report.head = Some(mark);
    report
}
