//! Output collection: new or changed regular files under the workspace, read after every process
//! of the execution is dead. The walk goes through directory file descriptors only
//! (`openat` with `O_NOFOLLOW | O_DIRECTORY`, `fstatat` with `AT_SYMLINK_NOFOLLOW`), so no
//! symlink is ever followed, at any depth, and a path renamed under the walk cannot lead it out
//! of the workspace; a file is read only if the descriptor opened is the regular file listed.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use base64::Engine as _;
use nix::dir::Dir;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, Mode, SFlag};
use sandbox_core::path::MAX_PATH_BYTES;
use sandbox_core::wire::{OutputFile, SkipReason, SkippedFile};
use sandbox_core::Admitted;
use sha2::{Digest, Sha256};

/// Most directory entries walked, so a program that creates millions of files cannot stall collection.
const MAX_ENTRIES: usize = 100_000;
/// Most directory levels walked.
const MAX_DEPTH: usize = 64;
/// Most entries listed in `skippedFiles`; the last one then says how many more there were.
const MAX_SKIPPED: usize = 1_000;

struct Walk<'a> {
    a: &'a Admitted,
    inputs: &'a [(String, [u8; 32])],
    files: BTreeMap<String, OutputFile>,
    skipped: Vec<SkippedFile>,
    skipped_more: u64,
    total: u64,
    seen: usize,
}

/// Walks `workspace` and returns the files to hand back, by workspace-relative name, and those
/// skipped with a reason (`symlink`, `not_regular_file`, `non_utf8_name`, `name_too_long`,
/// `too_deep`, `count_cap`, `bytes_cap`, `entry_cap`, `unreadable`). `inputs` holds (name,
/// sha256) of the injected files: an input left unchanged is not an output.
/// Errors: an I/O error opening the workspace root itself.
pub(crate) fn collect(workspace: &Path, inputs: &[(String, [u8; 32])], a: &Admitted) -> io::Result<(BTreeMap<String, OutputFile>, Vec<SkippedFile>)> {
    let root =
        nix::fcntl::open(workspace, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty()).map_err(io::Error::from)?;
    let mut w = Walk { a, inputs, files: BTreeMap::new(), skipped: Vec::new(), skipped_more: 0, total: 0, seen: 0 };
    w.dir(root, "", 0);
    if w.skipped_more > 0 {
        let name = format!("… and {} more", w.skipped_more);
        w.skipped.push(SkippedFile { name, reason: SkipReason::ListCap, size: None, count: Some(w.skipped_more) });
    }
    Ok((w.files, w.skipped))
}

impl Walk<'_> {
    fn skip(&mut self, name: String, reason: SkipReason, size: Option<u64>) {
        if self.skipped.len() < MAX_SKIPPED {
            self.skipped.push(SkippedFile { name, reason, size, count: None });
        } else {
            self.skipped_more += 1;
        }
    }

    fn dir(&mut self, fd: OwnedFd, prefix: &str, depth: usize) {
        let names: Vec<std::ffi::OsString> = match Dir::from_fd(fd.try_clone().expect("dup of an open directory")) {
            Ok(mut d) => {
                let mut v: Vec<_> = d
                    .iter()
                    .filter_map(Result::ok)
                    .map(|e| std::ffi::OsStr::from_bytes(e.file_name().to_bytes()).to_owned())
                    .filter(|n| n != "." && n != "..")
                    .collect();
                v.sort();
                v
            }
            Err(_) => {
                self.skip(prefix.trim_end_matches('/').to_owned(), SkipReason::Unreadable, None);
                return;
            }
        };
        for raw in names {
            self.seen += 1;
            if self.seen > MAX_ENTRIES {
                self.skip(prefix.to_owned(), SkipReason::EntryCap, None);
                return;
            }
            let Some(name) = raw.to_str().map(|n| format!("{prefix}{n}")) else {
                self.skip(format!("{prefix}{}", raw.to_string_lossy()), SkipReason::NonUtf8Name, None);
                continue;
            };
            if name.len() > MAX_PATH_BYTES {
                self.skip(name.chars().take(200).collect::<String>() + "…", SkipReason::NameTooLong, None);
                continue;
            }
            let Ok(st) = fstatat(fd.as_fd(), raw.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
                self.skip(name, SkipReason::Unreadable, None);
                continue;
            };
            let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
            if kind == SFlag::S_IFDIR {
                if depth + 1 >= MAX_DEPTH {
                    self.skip(name, SkipReason::TooDeep, None);
                    continue;
                }
                match openat(fd.as_fd(), raw.as_os_str(), OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty()) {
                    Ok(sub) => self.dir(sub, &format!("{name}/"), depth + 1),
                    Err(_) => self.skip(name, SkipReason::Unreadable, None),
                }
                continue;
            }
            if kind == SFlag::S_IFLNK {
                self.skip(name, SkipReason::Symlink, None);
                continue;
            }
            if kind != SFlag::S_IFREG {
                self.skip(name, SkipReason::NotRegularFile, None);
                continue;
            }
            if let Some(globs) = &self.a.outputs {
                if !globs.is_match(&name) {
                    continue;
                }
            }
            self.file(&fd, &raw, name, &st);
        }
    }

    fn file(&mut self, dir: &OwnedFd, raw: &std::ffi::OsStr, name: String, listed: &nix::sys::stat::FileStat) {
        let caps = &self.a.profile.output;
        let size = u64::try_from(listed.st_size).unwrap_or(0);
        if self.files.len() >= caps.files_max_count as usize {
            return self.skip(name, SkipReason::CountCap, Some(size));
        }
        if self.total + size > caps.files_max_bytes {
            return self.skip(name, SkipReason::BytesCap, Some(size));
        }
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let Ok(fd) = openat(dir.as_fd(), raw, flags, Mode::empty()) else {
            return self.skip(name, SkipReason::Unreadable, Some(size));
        };
        match fstat(fd.as_fd()) {
            Ok(now)
                if now.st_ino == listed.st_ino && now.st_dev == listed.st_dev && SFlag::from_bits_truncate(now.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG => {}
            _ => return self.skip(name, SkipReason::ChangedWhileReading, Some(size)),
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        if std::fs::File::from(fd).take(caps.files_max_bytes - self.total).read_to_end(&mut bytes).is_err() {
            return self.skip(name, SkipReason::Unreadable, Some(size));
        }
        let sha: [u8; 32] = Sha256::digest(&bytes).into();
        if self.inputs.iter().any(|(n, h)| *n == name && *h == sha) {
            return;
        }
        self.total += bytes.len() as u64;
        let mime = mime_guess::from_path(&name).first_or_octet_stream().essence_str().to_owned();
        self.files.insert(
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
