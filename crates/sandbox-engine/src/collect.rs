//! Output collection: new or changed regular files under the workspace, read after every process
//! of the execution is dead. Symlinks are never followed (lstat, then `O_NOFOLLOW` and a check
//! that the opened file is the regular file seen), and nothing outside the workspace is read.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use base64::Engine as _;
use sandbox_core::wire::{OutputFile, SkippedFile};
use sandbox_core::Admitted;
use sha2::{Digest, Sha256};

/// Most directory entries walked, so a program that creates millions of files cannot stall collection.
const MAX_ENTRIES: usize = 100_000;

/// Walks `workspace` and returns the files to hand back, by workspace-relative name, and those
/// skipped with a reason. `inputs` holds (name, sha256) of the injected files: an input left
/// unchanged is not an output.
/// Errors: an I/O error on the workspace root itself.
pub(crate) fn collect(
    workspace: &Path,
    inputs: &[(String, [u8; 32])],
    a: &Admitted,
) -> io::Result<(BTreeMap<String, OutputFile>, Vec<SkippedFile>)> {
    let caps = &a.profile.output;
    let mut files = BTreeMap::new();
    let mut skipped = Vec::new();
    let mut total: u64 = 0;
    let mut seen = 0usize;
    let mut stack = vec![(workspace.to_owned(), String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        let mut entries: Vec<_> = fs::read_dir(&dir)?.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            seen += 1;
            if seen > MAX_ENTRIES {
                skipped.push(SkippedFile { name: prefix.clone(), reason: "entry_cap".into(), size: None });
                return Ok((files, skipped));
            }
            let raw = entry.file_name();
            let Some(name) = raw.to_str().map(|n| format!("{prefix}{n}")) else {
                skipped.push(SkippedFile { name: format!("{prefix}{}", raw.to_string_lossy()), reason: "non_utf8_name".into(), size: None });
                continue;
            };
            let meta = entry.path().symlink_metadata()?;
            let ft = meta.file_type();
            if ft.is_dir() {
                stack.push((entry.path(), format!("{name}/")));
                continue;
            }
            if ft.is_symlink() {
                skipped.push(SkippedFile { name, reason: "symlink".into(), size: None });
                continue;
            }
            if !ft.is_file() {
                skipped.push(SkippedFile { name, reason: "not_regular_file".into(), size: None });
                continue;
            }
            if let Some(globs) = &a.outputs {
                if !globs.is_match(&name) {
                    continue;
                }
            }
            let size = meta.len();
            if files.len() >= caps.files_max_count as usize {
                skipped.push(SkippedFile { name, reason: "count_cap".into(), size: Some(size) });
                continue;
            }
            if total + size > caps.files_max_bytes {
                skipped.push(SkippedFile { name, reason: "bytes_cap".into(), size: Some(size) });
                continue;
            }
            let Some(bytes) = read_regular(&entry.path(), &meta, caps.files_max_bytes - total)? else {
                skipped.push(SkippedFile { name, reason: "changed_while_reading".into(), size: Some(size) });
                continue;
            };
            let sha: [u8; 32] = Sha256::digest(&bytes).into();
            if inputs.iter().any(|(n, h)| *n == name && *h == sha) {
                continue;
            }
            total += bytes.len() as u64;
            let mime = mime_guess::from_path(&name).first_or_octet_stream().essence_str().to_owned();
            files.insert(
                name,
                OutputFile {
                    size: bytes.len() as u64,
                    sha256: hex::encode(sha),
                    mime_type: mime,
                    base64: base64::engine::general_purpose::STANDARD.encode(&bytes),
                },
            );
        }
    }
    Ok((files, skipped))
}

/// Opens `path` without following a symlink and reads at most `limit` bytes; `None` if what was
/// opened is not the regular file `meta` describes.
fn read_regular(path: &Path, meta: &fs::Metadata, limit: u64) -> io::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::MetadataExt;
    let f = fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)?;
    let now = f.metadata()?;
    if !now.is_file() || now.ino() != meta.ino() || now.dev() != meta.dev() {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(now.len().min(limit)).unwrap_or(0));
    f.take(limit).read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}
