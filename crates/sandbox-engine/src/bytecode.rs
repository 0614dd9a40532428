//! The Python harness as bytecode, compiled once per host interpreter: a cold run then loads
//! `/code/_sandbox_harness.pyc` instead of compiling the harness's source, which was ~0.5 ms of
//! a `sandbox run -c pass` on this machine kind (CPython compiles ~70 lines in ~0.4 ms here).
//!
//! Who compiles it: the host's own interpreter (`[runtime] python`, which runs every profile on
//! the host base and which the administrator installed), started as a package manager
//! byte-compiles (Debian's `py3compile` runs as root), as the service's own user: isolated
//! (`-I`: no `PYTHON*` variables, no user site, no script directory on the path), without
//! `site` (`-S`: no `.pth` file runs), with an empty environment, in a process group of its own
//! (a terminal's Ctrl-C to `sandbox run` does not reach it). It reads the harness's sources on
//! stdin and writes bytecode on stdout; nothing of a caller's is involved, and no other user
//! can touch the process (a uid shared with other daemons, such as `nobody`, could ptrace it).
//! Interpreters inside a base's root (an image's Python) are never run on the host: their
//! profiles keep compiling the source. A compile that fails for good (the interpreter exits
//! with an error, or writes something that is not bytecode) leaves `harness-<key>.failed`
//! (why) and is not retried for that key; one that could not start, was killed or timed out is
//! retried by a later run.
//!
//! Where it is kept: `<data dir>/bytecode/harness-<key>.bin`, owner only, the key a SHA-256 of
//! the harness's sources and the interpreter's resolved path and identity (device, inode, size,
//! mtime, ctime): an upgraded interpreter or service compiles anew. No sandbox sees this
//! directory; each run gets a copy of the bytes in its own read-only `/code`, so a program can
//! change nothing a later run loads. The loader in the sandbox (`BOOT`, and `code_of` in
//! `harness.py`) takes a `.pyc` only when its magic number is the running interpreter's, and
//! else compiles the source beside it.

use std::collections::HashMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use sha2::Digest as _;

/// The harness files' bytecode, in the order of [`crate::command::harness_files`] for Python:
/// each a `.pyc` (16-byte header, the first 4 bytes the interpreter's magic number, then the
/// marshalled module code).
pub(crate) type Compiled = Arc<Vec<Vec<u8>>>;

/// The Python program `python -I -S -B -c` runs to compile: stdin is a JSON list of
/// `[file name, source]`; stdout, for each, its `.pyc` length (8 bytes, little-endian) and bytes.
const COMPILE: &str = r#"import json, marshal, sys
from _frozen_importlib_external import MAGIC_NUMBER
out = sys.stdout.buffer
for name, source in json.loads(sys.stdin.buffer.read()):
    pyc = MAGIC_NUMBER + bytes(12) + marshal.dumps(compile(source, name, 'exec', dont_inherit=True))
    out.write(len(pyc).to_bytes(8, 'little') + pyc)
out.flush()
"#;

/// How long the compiling interpreter may take before it is killed (it takes ~20 ms).
const PATIENCE: Duration = Duration::from_secs(10);

/// The harness's bytecode for host interpreter `python` (the path the sandbox runs, bound from
/// the host at the same place), from this process's memory, else `data_dir`'s cache, else
/// compiled now (and cached). `None` when it cannot be had (the interpreter is missing or fails,
/// the output is not bytecode): the run then compiles the source, as before. A failure for good
/// is logged once per interpreter and process, one that may pass next time each time it
/// happens. Blocks (a file read, or ~20 ms to compile).
pub(crate) fn harness(data_dir: &Path, python: &Path) -> Option<Compiled> {
    let (real, key) = key(python)?;
    if let Some(known) = lock(memo()).get(&key) {
        return known.clone();
    }
    // One compile at a time in this process: concurrent first runs of `sandbox serve` wait for
    // it instead of each starting an interpreter.
    static COMPILING: Mutex<()> = Mutex::new(());
    let _one = lock(&COMPILING);
    if let Some(known) = lock(memo()).get(&key) {
        return known.clone();
    }
    let (file, failed) = paths(data_dir, &key);
    let cached = std::fs::read(&file).ok();
    let found = match cached.as_deref().and_then(parse) {
        Some(found) => Some(found),
        // A compile that failed for good for this interpreter is not retried by every run (nor
        // warned about): its key changes with the interpreter.
        None if failed.exists() => None,
        None => match compile(&real) {
            Ok(compiled) => {
                if let Err(e) = store(&file, &compiled, cached.is_some()) {
                    tracing::debug!(file = %file.display(), error = %e, "the harness's bytecode is not cached (it is kept in memory)");
                }
                Some(compiled)
            }
            Err(Failure { why, lasting }) => {
                tracing::warn!(python = %real.display(), error = %why, "the harness's bytecode could not be compiled; runs compile its source");
                if lasting {
                    let _ = store_failure(&failed, &why);
                } else {
                    // Not remembered: the next execution (of another process too) tries again.
                    return None;
                }
                None
            }
        },
    };
    let found = found.map(Arc::new);
    lock(memo()).insert(key, found.clone());
    found
}

/// Whether [`harness`] for `python` would answer without compiling (from memory or a cache
/// file, bytecode or a failure's note): nothing waits on an interpreter then.
pub(crate) fn ready(data_dir: &Path, python: &Path) -> bool {
    let Some((_, key)) = key(python) else { return true };
    if lock(memo()).contains_key(&key) {
        return true;
    }
    let (file, failed) = paths(data_dir, &key);
    file.exists() || failed.exists()
}

/// This process's answers of [`harness`], by key.
fn memo() -> &'static Mutex<HashMap<[u8; 32], Option<Compiled>>> {
    static MEMO: OnceLock<Mutex<HashMap<[u8; 32], Option<Compiled>>>> = OnceLock::new();
    MEMO.get_or_init(Mutex::default)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The cache file of `key` in `data_dir`, and its failure note.
fn paths(data_dir: &Path, key: &[u8; 32]) -> (PathBuf, PathBuf) {
    let name = format!("harness-{}", hex::encode(&key[..16]));
    let dir = data_dir.join("bytecode");
    (dir.join(format!("{name}.bin")), dir.join(format!("{name}.failed")))
}

/// Why a compile failed; `lasting`: it would fail again (the interpreter's error exit, output
/// that is not bytecode), not a start, a kill or a timeout.
#[derive(Debug)]
struct Failure {
    why: String,
    lasting: bool,
}

/// `python` resolved, and the cache key of the harness's bytecode for it. Every execution asks
/// (twice: [`ready`], then [`harness`]): the interpreter is looked at each time (an upgrade
/// changes the key), the harness's ~21 kB of sources are hashed once per process.
fn key(python: &Path) -> Option<(PathBuf, [u8; 32])> {
    use std::os::unix::fs::MetadataExt as _;
    static SOURCES: OnceLock<[u8; 32]> = OnceLock::new();
    let sources = SOURCES.get_or_init(|| {
        let mut h = sha2::Sha256::new();
        for (name, source) in crate::command::harness_files(sandbox_core::Language::Python) {
            h.update(name.as_bytes());
            h.update([0]);
            h.update(source.as_bytes());
            h.update([0]);
        }
        h.finalize().into()
    });
    let real = std::fs::canonicalize(python).ok()?;
    let m = std::fs::metadata(&real).ok()?;
    let mut h = sha2::Sha256::new();
    h.update(b"sandbox harness bytecode 2\0");
    h.update(sources);
    h.update(real.as_os_str().as_encoded_bytes());
    for n in [m.dev(), m.ino(), m.size()] {
        h.update(n.to_le_bytes());
    }
    for n in [m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec()] {
        h.update(n.to_le_bytes());
    }
    Some((real, h.finalize().into()))
}

/// The `.pyc` files in `bytes` (the compiler's output, or a cache file): one per harness file,
/// each with a pyc header whose magic number ends in `\r\n`, all of one magic; `None` else.
fn parse(mut bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let (len, rest) = bytes.split_first_chunk::<8>()?;
        let len = usize::try_from(u64::from_le_bytes(*len)).ok()?;
        let (pyc, rest) = (rest.get(..len)?, rest.get(len..)?);
        if pyc.len() <= 16 || pyc[2..4] != *b"\r\n" || out.first().is_some_and(|first: &Vec<u8>| first[..4] != pyc[..4]) {
            return None;
        }
        out.push(pyc.to_vec());
        bytes = rest;
    }
    (out.len() == crate::command::harness_files(sandbox_core::Language::Python).len()).then_some(out)
}

/// Compiles the harness with interpreter `python` (see the module's documentation).
fn compile(python: &Path) -> Result<Vec<Vec<u8>>, Failure> {
    use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
    let passing = |why: String| Failure { why, lasting: false };
    let sources: Vec<(String, &str)> = crate::command::harness_files(sandbox_core::Language::Python)
        .iter()
        .map(|(name, source)| (format!("{}/{name}", crate::command::CODE_DIR), *source))
        .collect();
    let input = serde_json::to_vec(&sources).map_err(|e| passing(e.to_string()))?;
    let mut child = std::process::Command::new(python)
        .args(["-I", "-S", "-B", "-c", COMPILE])
        .env_clear()
        .current_dir("/")
        .process_group(0)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| passing(format!("cannot start it: {e}")))?;
    let (mut stdin, mut stdout, mut stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let writer = std::thread::spawn(move || stdin.as_mut().map(|s| s.write_all(&input)));
    let reader = std::thread::spawn(move || {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let _ = stdout.as_mut().map(|s| s.read_to_end(&mut out));
        let _ = stderr.as_mut().map(|s| s.read_to_end(&mut err));
        (out, err)
    });
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            Ok(None) => {
                // Its whole group: nothing it started keeps the pipes open.
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX)), nix::sys::signal::Signal::SIGKILL);
                let _ = child.wait();
                return Err(passing(format!("it did not finish in {} s", PATIENCE.as_secs())));
            }
            Err(e) => return Err(passing(format!("cannot wait for it: {e}"))),
        }
    };
    let _ = writer.join();
    let (out, err) = reader.join().map_err(|_| passing("its reader panicked".to_owned()))?;
    if let Some(signal) = status.signal() {
        return Err(passing(format!("it was killed by signal {signal}")));
    }
    if !status.success() {
        return Err(Failure { why: format!("it ended with {status}: {}", String::from_utf8_lossy(&err).trim()), lasting: true });
    }
    parse(&out).ok_or_else(|| Failure { why: format!("its output ({} bytes) is not the harness's bytecode", out.len()), lasting: true })
}

/// Records why the compile for a key failed, in `file` (`harness-<key>.failed`).
fn store_failure(file: &Path, why: &str) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(file.parent().expect("a file in a directory"))?;
    std::fs::write(file, format!("{why}\n"))
}

/// Writes `compiled` to `file` (its directory made owner-only), beside it first and then linked
/// into place, so that a concurrent reader never sees half a file and the first of concurrent
/// compiles stays (another is equivalent, not always the same bytes); `replace`: `file` exists
/// and is not bytecode, and is replaced.
fn store(file: &Path, compiled: &[Vec<u8>], replace: bool) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    let dir = file.parent().expect("a file in a directory");
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{}.{seq}.{}", std::process::id(), file.file_name().expect("named").to_string_lossy()));
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    for pyc in compiled {
        f.write_all(&(pyc.len() as u64).to_le_bytes())?;
        f.write_all(pyc)?;
    }
    drop(f);
    if replace {
        return std::fs::rename(&tmp, file);
    }
    let linked = std::fs::hard_link(&tmp, file);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
