//! The Python harness as bytecode, compiled once per host interpreter: a cold run then loads
//! `/code/_sandbox_harness.pyc` instead of compiling the harness's source, which was ~0.5 ms of
//! a `sandbox run -c pass` on this machine kind (CPython compiles ~70 lines in ~0.4 ms here).
//!
//! Who compiles it: the host's own interpreter (`[runtime] python`, which runs every profile on
//! the host base), started as a package manager byte-compiles (Debian's `py3compile` runs as
//! root): isolated (`-I`: no `PYTHON*` variables, no user site, no script directory on the
//! path), without `site` (`-S`: no `.pth` file runs), with an empty environment, as `nobody`
//! when the service is root (as itself when nobody cannot run it). It reads the harness's
//! sources on stdin and writes bytecode on stdout; nothing of a caller's is involved.
//! Interpreters inside a base's root (an image's Python) are never run on the host: their
//! profiles keep compiling the source. A compile that fails leaves `harness-<key>.failed` (why)
//! and is not retried for that key.
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
/// the output is not bytecode): the run then compiles the source, as before. A failure is
/// logged once per interpreter and process. Blocks (a file read, or ~20 ms to compile).
pub(crate) fn harness(data_dir: &Path, python: &Path) -> Option<Compiled> {
    static MEMO: OnceLock<Mutex<HashMap<[u8; 32], Option<Compiled>>>> = OnceLock::new();
    let (real, key) = key(python)?;
    let memo = MEMO.get_or_init(Mutex::default);
    if let Some(known) = memo.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key) {
        return known.clone();
    }
    let name = format!("harness-{}", hex::encode(&key[..16]));
    let (file, failed) = (data_dir.join("bytecode").join(format!("{name}.bin")), data_dir.join("bytecode").join(format!("{name}.failed")));
    let cached = std::fs::read(&file).ok();
    let found = cached.as_deref().and_then(parse).or_else(|| {
        // A compile that failed for this interpreter is not retried by every run (nor warned
        // about): its key changes with the interpreter.
        if failed.exists() {
            return None;
        }
        match compile(&real) {
            Ok(compiled) => {
                if let Err(e) = store(&file, &compiled, cached.is_some()) {
                    tracing::debug!(file = %file.display(), error = %e, "the harness's bytecode is not cached (it is kept in memory)");
                }
                Some(compiled)
            }
            Err(e) => {
                tracing::warn!(python = %real.display(), error = %e, "the harness's bytecode could not be compiled; runs compile its source");
                let _ = store_failure(&failed, &e);
                None
            }
        }
    });
    let found = found.map(Arc::new);
    memo.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key, found.clone());
    found
}

/// `python` resolved, and the cache key of the harness's bytecode for it.
fn key(python: &Path) -> Option<(PathBuf, [u8; 32])> {
    use std::os::unix::fs::MetadataExt as _;
    let real = std::fs::canonicalize(python).ok()?;
    let m = std::fs::metadata(&real).ok()?;
    let mut h = sha2::Sha256::new();
    h.update(b"sandbox harness bytecode 1\0");
    h.update(real.as_os_str().as_encoded_bytes());
    for n in [m.dev(), m.ino(), m.size()] {
        h.update(n.to_le_bytes());
    }
    for n in [m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec()] {
        h.update(n.to_le_bytes());
    }
    for (name, source) in crate::command::harness_files(sandbox_core::Language::Python) {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(source.as_bytes());
        h.update([0]);
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
fn compile(python: &Path) -> Result<Vec<Vec<u8>>, String> {
    use std::os::unix::process::CommandExt as _;
    let sources: Vec<(String, &str)> = crate::command::harness_files(sandbox_core::Language::Python)
        .iter()
        .map(|(name, source)| (format!("{}/{name}", crate::command::CODE_DIR), *source))
        .collect();
    let input = serde_json::to_vec(&sources).map_err(|e| e.to_string())?;
    let command = || {
        let mut cmd = std::process::Command::new(python);
        cmd.args(["-I", "-S", "-B", "-c", COMPILE])
            .env_clear()
            .current_dir("/")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        cmd
    };
    // As `nobody` when the service is root, unless nobody cannot run it (one under /root).
    let spawned = if nix::unistd::geteuid().is_root() {
        match command().uid(65534).gid(65534).spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => command().spawn(),
            other => other,
        }
    } else {
        command().spawn()
    };
    let mut child = spawned.map_err(|e| format!("cannot start it: {e}"))?;
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
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("it did not finish in {} s", PATIENCE.as_secs()));
            }
            Err(e) => return Err(format!("cannot wait for it: {e}")),
        }
    };
    let _ = writer.join();
    let (out, err) = reader.join().map_err(|_| "its reader panicked".to_owned())?;
    if !status.success() {
        return Err(format!("it ended with {status}: {}", String::from_utf8_lossy(&err).trim()));
    }
    parse(&out).ok_or_else(|| format!("its output ({} bytes) is not the harness's bytecode", out.len()))
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
    let tmp = dir.join(format!(".{}.{}", std::process::id(), file.file_name().expect("named").to_string_lossy()));
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
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
