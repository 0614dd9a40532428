//! The chain's head, anchored outside the database: a small file naming the newest event this
//! host appended (`seq`, `hash`, execution id), rewritten after every append.
//!
//! The file has two slots of [`SLOT`] bytes, each one JSON line padded with spaces: a mark and
//! a check (the first 16 hex digits of the SHA-256 of `"<seq> <hash> <execution id>"`). An
//! append overwrites the slot that does not hold the current mark, in place: no new file, rename
//! or directory entry (replacing the file through a rename, as before, cost two journal commits
//! per append). The write is not synced: it follows a commit that is durable already, so the
//! disk never holds a mark newer than the database, and the kernel's writeback stores it within
//! its expiry (`vm.dirty_expire_centisecs`, 30 s by default). A power loss in that window leaves
//! an older mark, which is what a crash between the commit and the head write leaves too: the
//! newer events are unanchored until the next append, none is reported missing (also when a
//! prune removed the event that older mark names: see [`HeadFile::advance`]). An
//! `fdatasync` here cost ~0.15-0.3 ms of every append, twice on every execution's path (the
//! `begin` before its program's go, the `finish` before `sandbox run` returns). Other processes
//! read the page cache, so they see the new mark at once. The writes that make the file longer
//! (its first two) are synced, so a crash never leaves it shorter than its slots. Each slot is
//! one 512-byte sector: a slot torn by a crash mid-write (a device without atomic sector
//! writes) fails its check and is passed over, and the other holds the previous mark; with
//! both slots written back at once, a device that tears sectors could tear both, and the log
//! then refuses appends until the file is removed. The window is the writeback's: without
//! periodic writeback (`vm.dirty_writeback_centisecs` 0) it lasts until the next sync. The mark
//! is the valid slot with the higher `seq`. A file of the earlier format (one JSON mark line, no
//! check) reads as its slot 0.
//!
//! A hash chain cannot see its own tail cut off: deleting the newest events leaves a shorter
//! chain that still verifies. The head file remembers how far the chain reached, so `verify`
//! reports `truncated` when that event is gone and `rewritten` when another event took its
//! place. The file is advanced only while the database still holds the event it names, so an
//! append after a truncation does not cover the truncation up.
//!
//! What it does not stop (see the README, "Audit log"): someone who can write the head file
//! too (root on this host) can rewrite both; the events appended after the last head write (a
//! crash between the commit and the head write) are not anchored; on PostgreSQL each node anchors
//! only the events it appended itself.

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
            // Created and not yet written: a power loss after the file's creation reached the
            // disk and before its first write did (its deletion reads the same).
            Ok(bytes) if bytes.is_empty() => Ok(None),
            Ok(bytes) => parse(&bytes).map(|(mark, _)| Some(mark)).map_err(|e| AuditError::HeadCorrupt(self.path.clone(), e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(AuditError::Head(self.path.clone(), e)),
        }
    }

    /// Writes `mark` into the slot that does not hold the current mark (which the other keeps):
    /// one write in place, left to the kernel's writeback (module docs: the commit it follows is
    /// durable already), except a write that makes the file longer (the first two of a data
    /// directory, or the first on an earlier format's file), which is synced: a file system
    /// with delayed allocation commits a new file's size before its data, so a power loss
    /// could leave a head of zeros or none; the first also syncs the directory, for the file's
    /// entry. The caller holds the [`HeadLock`].
    /// Errors: [`AuditError::Head`] naming the file (also for a mark longer than a slot, which
    /// service-made execution ids never give).
    pub fn write(&self, _lock: &HeadLock, mark: &HeadMark) -> Result<(), AuditError> {
        let (f, current) = self.open_for_write()?;
        self.write_slot(&f, &current, mark)
    }

    /// The file opened for reading and writing (created if missing), and its slots' bytes.
    fn open_for_write(&self) -> Result<(std::fs::File, Vec<u8>), AuditError> {
        use std::os::unix::fs::FileExt as _;
        let io = |e| AuditError::Head(self.path.clone(), e);
        let f = std::fs::OpenOptions::new().create(true).truncate(false).read(true).write(true).mode_private().open(&self.path).map_err(io)?;
        let mut current = vec![0; 2 * SLOT];
        let n = f.read_at(&mut current, 0).map_err(io)?;
        current.truncate(n);
        Ok((f, current))
    }

    /// [`HeadFile::write`] on the file `f` holding `current`.
    fn write_slot(&self, f: &std::fs::File, current: &[u8], mark: &HeadMark) -> Result<(), AuditError> {
        use std::os::unix::fs::FileExt as _;
        let io = |e| AuditError::Head(self.path.clone(), e);
        let mut line = serde_json::to_string(&Slot::of(mark)).expect("a mark serializes").into_bytes();
        if line.len() >= SLOT {
            return Err(io(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("a head mark of {} bytes does not fit a slot", line.len()))));
        }
        line.resize(SLOT - 1, b' ');
        line.push(b'\n');
        let n = current.len();
        let slot = match parse(current) {
            Ok((_, 0)) => 1u64,
            _ => 0,
        };
        f.write_all_at(&line, slot * SLOT as u64).map_err(io)?;
        if (slot + 1) * SLOT as u64 > n as u64 {
            f.sync_data().map_err(io)?;
            // An empty file is new (or was): its directory entry too, once per data directory
            // (SQLite's own directory syncs, which did it in passing, are off: `SqliteStore::open`).
            if n == 0 {
                crate::sync_parent_dir(&self.path).map_err(io)?;
            }
        }
        Ok(())
    }

    /// After an append committed `new`: replaces the mark with it, unless the database no
    /// longer holds the event the current mark names (`still_there(seq, hash)` says whether
    /// it does). Then the old mark stays, so `verify` keeps reporting what was removed.
    /// `still_there` also answers yes for an event before the first one stored: removed with
    /// a prefix by retention, whose checkpoint `verify` checks, not cut from the end (a mark a
    /// power loss set back past a prune, or a node's mark on PostgreSQL that another node's
    /// prune passed, would otherwise never move again, and a later cut of the newest events
    /// would go unreported).
    /// Returns whether the mark moved.
    /// Errors: [`AuditError::Head`], [`AuditError::HeadCorrupt`], or `still_there`'s.
    pub fn advance(&self, _lock: &HeadLock, new: &HeadMark, still_there: impl FnOnce(&HeadMark) -> Result<bool, AuditError>) -> Result<bool, AuditError> {
        // One open and one read serve the check and the write (each read and parsed the file
        // on its own before: ~0.05 ms more of every append, after its commit).
        let (f, current) = self.open_for_write()?;
        if !current.is_empty() {
            let (old, _) = parse(&current).map_err(|e| AuditError::HeadCorrupt(self.path.clone(), e))?;
            if old.seq >= new.seq || !still_there(&old)? {
                return Ok(false);
            }
        }
        self.write_slot(&f, &current, new)?;
        Ok(true)
    }

    fn lock_path(&self) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(".lock");
        PathBuf::from(p)
    }
}

/// Bytes per slot of the head file.
pub const SLOT: usize = 512;

/// One slot's line: a mark and its check.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Slot {
    seq: i64,
    hash: String,
    execution_id: String,
    check: String,
}

impl Slot {
    fn of(mark: &HeadMark) -> Self {
        Slot { seq: mark.seq, hash: mark.hash.clone(), execution_id: mark.execution_id.clone(), check: check(mark) }
    }
}

/// The first 16 hex digits of the SHA-256 of `"<seq> <hash> <execution id>"`.
fn check(mark: &HeadMark) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(format!("{} {} {}", mark.seq, mark.hash, mark.execution_id).as_bytes());
    hex::encode(&digest[..8])
}

/// The mark a head file's bytes hold, and its slot: the valid slot with the higher `seq` (a
/// slot whose check fails, torn by a crash mid-write, is passed over), or a file of the earlier
/// format's one mark (slot 0). Errors: no slot holds a valid mark (the first slot's error).
fn parse(bytes: &[u8]) -> Result<(HeadMark, usize), serde_json::Error> {
    let mut first_error = None;
    let mut best: Option<(HeadMark, usize)> = None;
    for (slot, chunk) in bytes.chunks(SLOT).take(2).enumerate() {
        let line = chunk.split(|b| *b == b'\n').next().unwrap_or_default();
        let mark = serde_json::from_slice::<Slot>(line).and_then(|s| {
            let mark = HeadMark { seq: s.seq, hash: s.hash, execution_id: s.execution_id };
            if check(&mark) == s.check {
                Ok(mark)
            } else {
                Err(serde::de::Error::custom("the slot's check does not match its mark"))
            }
        });
        // The earlier format: one mark, no check, the whole file.
        let mark = mark.or_else(|e| if bytes.len() < SLOT { serde_json::from_slice::<HeadMark>(bytes).map_err(|_| e) } else { Err(e) });
        match mark {
            Ok(m) if best.as_ref().is_none_or(|(b, _)| m.seq > b.seq) => best = Some((m, slot)),
            Ok(_) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match (best, first_error) {
        (Some(m), _) => Ok(m),
        (None, Some(e)) => Err(e),
        (None, None) => Err(serde::de::Error::custom("an empty head file")),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(seq: i64) -> HeadMark {
        use sha2::Digest as _;
        HeadMark { seq, hash: hex::encode(sha2::Sha256::digest(seq.to_string())), execution_id: format!("01a23b00-0000-7000-8000-{seq:012}") }
    }

    fn file() -> (tempfile::TempDir, HeadFile) {
        let dir = tempfile::tempdir().unwrap();
        let head = HeadFile::new(dir.path().join("audit.db.head"));
        (dir, head)
    }

    #[test]
    fn an_empty_head_file_reads_as_none_and_takes_a_mark() {
        // A power loss after the file's creation reached the disk and before its data did.
        let (_dir, head) = file();
        std::fs::write(head.path(), b"").unwrap();
        assert_eq!(head.read().unwrap(), None);
        let lock = head.lock().unwrap();
        assert!(head.advance(&lock, &mark(5), |_| Ok(false)).unwrap());
        assert_eq!(head.read().unwrap(), Some(mark(5)));
    }

    #[test]
    fn each_write_fills_the_slot_the_current_mark_is_not_in_and_the_newest_mark_reads_back() {
        let (_dir, head) = file();
        assert_eq!(head.read().unwrap(), None);
        let lock = head.lock().unwrap();
        for seq in [3, 4, 7, 9] {
            head.write(&lock, &mark(seq)).unwrap();
            assert_eq!(head.read().unwrap(), Some(mark(seq)));
        }
        let bytes = std::fs::read(head.path()).unwrap();
        assert_eq!(bytes.len(), 2 * SLOT, "two slots, written in place");
        // Alternating slots: the one not written last still holds the mark before.
        let (older, newer) = (parse(&bytes[..SLOT]).unwrap().0, parse(&bytes[SLOT..]).unwrap().0);
        assert_eq!((older.seq, newer.seq), (7, 9));
    }

    #[test]
    fn a_slot_torn_by_a_crash_is_passed_over_for_the_mark_before() {
        let (_dir, head) = file();
        let lock = head.lock().unwrap();
        head.write(&lock, &mark(5)).unwrap();
        head.write(&lock, &mark(6)).unwrap();
        let mut bytes = std::fs::read(head.path()).unwrap();
        // Seq 6 went into slot 1; part of its hash is what slot 0 holds there, as a torn write
        // can leave it: still a well-formed line naming seq 6, that only its check refuses.
        let slot0 = bytes[..SLOT].to_vec();
        bytes[SLOT + 30..SLOT + 60].copy_from_slice(&slot0[30..60]);
        let torn = bytes[SLOT..].split(|b| *b == b'\n').next().unwrap();
        assert_eq!(serde_json::from_slice::<Slot>(torn).unwrap().seq, 6);
        std::fs::write(head.path(), &bytes).unwrap();
        assert_eq!(head.read().unwrap(), Some(mark(5)));
        // The next write goes to the torn slot, keeping the valid one.
        head.write(&lock, &mark(7)).unwrap();
        assert_eq!(head.read().unwrap(), Some(mark(7)));
        assert_eq!(parse(&std::fs::read(head.path()).unwrap()[..SLOT]).unwrap().0, mark(5));
        // Both slots unreadable: the file is not a mark.
        std::fs::write(head.path(), vec![b'x'; 2 * SLOT]).unwrap();
        assert!(matches!(head.read(), Err(AuditError::HeadCorrupt(..))));
    }

    #[test]
    fn a_head_file_of_the_earlier_format_reads_and_is_then_written_in_slots() {
        let (_dir, head) = file();
        std::fs::write(head.path(), format!("{}\n", serde_json::to_string(&mark(41)).unwrap())).unwrap();
        assert_eq!(head.read().unwrap(), Some(mark(41)));
        let lock = head.lock().unwrap();
        head.write(&lock, &mark(42)).unwrap();
        assert_eq!(head.read().unwrap(), Some(mark(42)));
        head.write(&lock, &mark(43)).unwrap();
        assert_eq!(head.read().unwrap(), Some(mark(43)));
        assert_eq!(std::fs::read(head.path()).unwrap().len(), 2 * SLOT);
    }
}
