//! Applying layers to a root directory (OCI image-spec layer.md, "Applying Changesets" and
//! "Whiteouts"): every path is walked component by component from the root's descriptor with
//! `O_NOFOLLOW`, so nothing is ever written through a symbolic link, whatever earlier entries
//! planted.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;

use flate2::read::MultiGzDecoder;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timespec, Timestamps};
use rustix::io::Errno;

use crate::layout::{Descriptor, Source};
use crate::window::{Gauge, Window, HEADER_BYTES};
use crate::{Digest, ImportError, ImportOptions};

/// Layer media types (image-spec media-types.md, layer.md "Distributable Format"; the
/// non-distributable types are deprecated but have the same format).
const TAR: &[&str] = &["application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.nondistributable.v1.tar"];
const TAR_ZSTD: &[&str] = &["application/vnd.oci.image.layer.v1.tar+zstd", "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd"];
const TAR_GZIP: &[&str] = &[
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
];

/// Bytes a tar stream may spend per entry on headers, long names and padding, on top of file
/// contents: bounds the uncompressed stream (a decompression bomb of padding or of skipped
/// entries stops there).
const STREAM_BYTES_PER_ENTRY: u64 = 4096;

/// The largest component the kernel accepts (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// Applies layers in order to one root directory, keeping the import's counts.
pub(crate) struct Unpacker<'o> {
    root: OwnedFd,
    opts: &'o ImportOptions,
    /// Entries seen so far, all layers.
    pub entries: u64,
    /// File content bytes written so far, all layers.
    pub bytes: u64,
    /// Device nodes left out ([`ImportOptions::skip_device_nodes`]).
    pub devices_skipped: u64,
    /// Uncompressed tar bytes read so far, all layers.
    stream: u64,
}

/// How a layer's tar stream is compressed.
enum Compression {
    None,
    Gzip,
    Zstd,
}

/// Why a tar stream stopped: its own error or a limit of ours.
enum Stop {
    Refused(ImportError),
    Stream(io::Error),
}

impl<'o> Unpacker<'o> {
    pub(crate) fn new(root: OwnedFd, opts: &'o ImportOptions) -> Self {
        Self { root, opts, entries: 0, bytes: 0, devices_skipped: 0, stream: 0 }
    }

    fn stream_limit(&self) -> u64 {
        self.opts.max_unpacked_bytes.saturating_add(self.opts.max_entries.saturating_mul(STREAM_BYTES_PER_ENTRY))
    }

    /// Verifies and applies one layer. The blob is hashed as it streams; whatever the tar
    /// held, the layer fails unless its digest and size match, and a broken stream is reported
    /// as the digest mismatch it usually is.
    pub(crate) fn apply(&mut self, source: &Source, layer: &Descriptor) -> Result<(), ImportError> {
        let media_type = layer.media_type.as_str();
        let compression = if TAR_GZIP.contains(&media_type) {
            Compression::Gzip
        } else if TAR_ZSTD.contains(&media_type) {
            Compression::Zstd
        } else if TAR.contains(&media_type) {
            Compression::None
        } else {
            return Err(ImportError::MediaType { what: format!("layer {}", layer.digest), media_type: layer.media_type.clone() });
        };
        let mut blob = source.blob(layer)?;
        let left = self.stream_limit().saturating_sub(self.stream);
        let gauge = Gauge::new(left);
        let result = {
            let decoded: Result<Box<dyn Read + '_>, _> = match compression {
                Compression::Gzip => Ok(Box::new(MultiGzDecoder::new(&mut blob))),
                // libzstd's default window limit (2^27 bytes) bounds the decoder's memory.
                Compression::Zstd => zstd::stream::read::Decoder::new(&mut blob).map(|d| Box::new(d) as Box<dyn Read>),
                Compression::None => Ok(Box::new(&mut blob)),
            };
            match decoded {
                Ok(decoded) => self.apply_tar(&layer.digest, &mut Window::new(decoded, &gauge), &gauge, left),
                Err(e) => Err(Stop::Stream(e)),
            }
        };
        self.stream += gauge.pos();
        match result {
            Ok(()) => blob.finish(),
            Err(stop) => {
                if blob.oversized() {
                    return Err(ImportError::SizeMismatch { digest: layer.digest.clone(), declared: layer.size });
                }
                blob.finish()?;
                Err(match (stop, gauge.hit()) {
                    (Stop::Refused(e), _) => e,
                    (Stop::Stream(_), Some(limit)) if limit < left => ImportError::HeaderTooLarge { layer: layer.digest.clone(), limit: HEADER_BYTES },
                    (Stop::Stream(_), Some(_)) => {
                        ImportError::TooManyBytes { layer: layer.digest.clone(), path: String::new(), limit: self.opts.max_unpacked_bytes }
                    }
                    (Stop::Stream(source), None) => ImportError::Tar { layer: layer.digest.clone(), source },
                })
            }
        }
    }

    /// Applies the entries of one uncompressed tar stream; `gauge` counts it, within `left`
    /// bytes overall and [`HEADER_BYTES`] for each entry's headers.
    fn apply_tar(&mut self, layer: &Digest, stream: &mut dyn Read, gauge: &Gauge, left: u64) -> Result<(), Stop> {
        let mut archive = tar::Archive::new(stream);
        // Paths this layer wrote, and their parents: whiteouts and opaque markers remove only
        // what lower layers left (layer.md, "Whiteouts").
        let mut written: HashSet<Vec<u8>> = HashSet::new();
        let mut entries = archive.entries().map_err(Stop::Stream)?;
        let mut previous_size = 0;
        loop {
            gauge.window_for_headers(previous_size, left);
            let next = entries.next();
            gauge.set_limit(left);
            let Some(entry) = next else { break };
            let mut entry = entry.map_err(Stop::Stream)?;
            previous_size = entry.size();
            self.entries += 1;
            if self.entries > self.opts.max_entries {
                return Err(Stop::Refused(ImportError::TooManyEntries { layer: layer.clone(), limit: self.opts.max_entries }));
            }
            let raw = entry.path_bytes().into_owned();
            let kind = entry.header().entry_type();
            if kind == tar::EntryType::XGlobalHeader {
                continue;
            }
            let at = At { layer, shown: shown(&raw) };
            let comps = at.components(&raw, self.opts)?;
            let Some((name, parent)) = comps.split_last() else {
                // The root itself ("./"): it stays as the import made it (0755, root's).
                continue;
            };
            if let Some(rest) = name.strip_prefix(b".wh.") {
                self.whiteout(&at, parent, rest, &written)?;
                continue;
            }
            let parent_fd = self.walk(&at, parent, true)?.expect("walk with create makes every directory");
            let mode = Mode::from_raw_mode(entry.header().mode().map_err(Stop::Stream)? & 0o1777);
            match kind {
                tar::EntryType::Regular | tar::EntryType::Continuous if raw.ends_with(b"/") => self.directory(&at, &parent_fd, name, mode)?,
                tar::EntryType::Regular | tar::EntryType::Continuous => self.file(&at, &parent_fd, name, mode, &mut entry)?,
                tar::EntryType::Directory => self.directory(&at, &parent_fd, name, mode)?,
                tar::EntryType::Symlink => {
                    let target = entry.link_name_bytes().map(|t| t.into_owned()).unwrap_or_default();
                    at.symlink(parent, &target, self.opts)?;
                    clear(&parent_fd, name, self.opts.max_path_depth).map_err(|e| at.write(e))?;
                    rustix::fs::symlinkat(target.as_slice(), &parent_fd, *name).map_err(|e| at.write(e.into()))?;
                }
                tar::EntryType::Link => {
                    let target = entry.link_name_bytes().map(|t| t.into_owned()).unwrap_or_default();
                    self.hard_link(&at, &parent_fd, name, &target)?;
                }
                tar::EntryType::Char | tar::EntryType::Block if self.opts.skip_device_nodes => {
                    self.devices_skipped += 1;
                    continue;
                }
                tar::EntryType::Char | tar::EntryType::Block => {
                    return Err(Stop::Refused(ImportError::DeviceNode { layer: layer.clone(), path: at.shown }));
                }
                tar::EntryType::Fifo => {
                    clear(&parent_fd, name, self.opts.max_path_depth).map_err(|e| at.write(e))?;
                    rustix::fs::mknodat(&parent_fd, *name, FileType::Fifo, mode & Mode::from_raw_mode(0o777), 0).map_err(|e| at.write(e.into()))?;
                }
                other => {
                    return Err(Stop::Refused(ImportError::UnsupportedEntry { layer: layer.clone(), path: at.shown, kind: char::from(other.as_byte()) }));
                }
            }
            let mut joined = Vec::new();
            for comp in &comps {
                if !joined.is_empty() {
                    joined.push(b'/');
                }
                joined.extend_from_slice(comp);
                written.insert(joined.clone());
            }
        }
        Ok(())
    }

    /// `.wh.NAME` removes NAME of lower layers; `.wh..wh..opq` removes every lower entry of its
    /// directory; other `.wh..wh.` names (AUFS metadata) have no effect. Nothing is created.
    fn whiteout(&self, at: &At<'_>, parent: &[&[u8]], rest: &[u8], written: &HashSet<Vec<u8>>) -> Result<(), Stop> {
        if rest.is_empty() || rest == b"." || rest == b".." {
            return Err(at.escape());
        }
        let Some(dir) = self.walk(at, parent, false)? else {
            return Ok(()); // nothing below to remove
        };
        let prefix = parent.join(&b'/');
        if rest == b".wh..opq" {
            return remove_lower(&dir, &prefix, written, self.opts.max_path_depth).map_err(|e| at.write(e));
        }
        if rest.starts_with(b".wh.") {
            return Ok(());
        }
        let path = join(&prefix, rest);
        if written.contains(&path) {
            // This layer wrote NAME too (out of the spec's order): keep its own content.
            if is_dir(&dir, rest).map_err(|e| at.write(e))? {
                let sub = open_dir(&dir, rest).map_err(|e| at.write(e))?;
                remove_lower(&sub, &path, written, self.opts.max_path_depth).map_err(|e| at.write(e))?;
            }
            return Ok(());
        }
        clear(&dir, rest, self.opts.max_path_depth).map_err(|e| at.write(e))
    }

    /// Opens the directory `comps` below the root, one component at a time, never following
    /// a symbolic link; with `create`, missing directories are made (0755). `None` when a
    /// component is missing and `create` is off.
    fn walk(&self, at: &At<'_>, comps: &[&[u8]], create: bool) -> Result<Option<OwnedFd>, Stop> {
        let mut dir = rustix::io::dup(&self.root).map_err(|e| at.write(e.into()))?;
        for (i, comp) in comps.iter().enumerate() {
            let next = match open_dir(&dir, comp) {
                Ok(fd) => fd,
                Err(e) if e.raw_os_error() == Some(Errno::NOENT.raw_os_error()) => {
                    if !create {
                        return Ok(None);
                    }
                    rustix::fs::mkdirat(&dir, *comp, Mode::from_raw_mode(0o755)).map_err(|e| at.write(e.into()))?;
                    open_dir(&dir, comp).map_err(|e| at.write(e))?
                }
                Err(e) if e.raw_os_error() == Some(Errno::LOOP.raw_os_error()) || e.raw_os_error() == Some(Errno::NOTDIR.raw_os_error()) => {
                    let here = shown(&comps[..=i].join(&b'/'));
                    let stat = rustix::fs::statat(&dir, *comp, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| at.write(e.into()))?;
                    return Err(Stop::Refused(if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink {
                        ImportError::ThroughSymlink { layer: at.layer.clone(), path: at.shown.clone(), symlink: here }
                    } else {
                        ImportError::NotADirectory { layer: at.layer.clone(), path: at.shown.clone(), parent: here }
                    }));
                }
                Err(e) => return Err(at.write(e)),
            };
            dir = next;
        }
        Ok(Some(dir))
    }

    fn directory(&self, at: &At<'_>, parent: &OwnedFd, name: &[u8], mode: Mode) -> Result<(), Stop> {
        // A directory over a directory merges (layer.md, "Changes"); over anything else, replaces.
        if !is_dir(parent, name).map_err(|e| at.write(e))? {
            clear(parent, name, self.opts.max_path_depth).map_err(|e| at.write(e))?;
            rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)).map_err(|e| at.write(e.into()))?;
        }
        let fd = open_dir(parent, name).map_err(|e| at.write(e))?;
        rustix::fs::fchmod(&fd, mode).map_err(|e| at.write(e.into()))
    }

    fn file(&mut self, at: &At<'_>, parent: &OwnedFd, name: &[u8], mode: Mode, entry: &mut tar::Entry<'_, &mut dyn Read>) -> Result<(), Stop> {
        let size = entry.size();
        if self.bytes.saturating_add(size) > self.opts.max_unpacked_bytes {
            return Err(Stop::Refused(ImportError::TooManyBytes { layer: at.layer.clone(), path: at.shown.clone(), limit: self.opts.max_unpacked_bytes }));
        }
        clear(parent, name, self.opts.max_path_depth).map_err(|e| at.write(e))?;
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut file = File::from(rustix::fs::openat(parent, name, flags, Mode::from_raw_mode(0o600)).map_err(|e| at.write(e.into()))?);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = entry.read(&mut buf).map_err(Stop::Stream)?;
            if n == 0 {
                break;
            }
            file.write_all(&buf[..n]).map_err(|e| at.write(e))?;
            self.bytes += n as u64;
        }
        // After the content, so that a read-only mode does not stop our own writes.
        rustix::fs::fchmod(&file, mode).map_err(|e| at.write(e.into()))?;
        // Keep the modification time: Python checks .pyc files against their source's.
        let mtime = Timespec { tv_sec: i64::try_from(entry.header().mtime().unwrap_or(0)).unwrap_or(0), tv_nsec: 0 };
        rustix::fs::futimens(&file, &Timestamps { last_access: mtime, last_modification: mtime }).map_err(|e| at.write(e.into()))?;
        Ok(())
    }

    /// A hard link to a regular file already unpacked (this layer or a lower one), found
    /// without following symbolic links.
    fn hard_link(&self, at: &At<'_>, parent: &OwnedFd, name: &[u8], target: &[u8]) -> Result<(), Stop> {
        let bad = || Stop::Refused(ImportError::HardLink { layer: at.layer.clone(), path: at.shown.clone(), target: shown(target) });
        let target_at = At { layer: at.layer, shown: shown(target) };
        let comps = target_at.components(target, self.opts).map_err(|_| bad())?;
        let Some((target_name, target_parent)) = comps.split_last() else { return Err(bad()) };
        let Some(target_dir) = self.walk(&target_at, target_parent, false).map_err(|_| bad())? else { return Err(bad()) };
        match rustix::fs::statat(&target_dir, *target_name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile => {}
            _ => return Err(bad()),
        }
        let same = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW).ok();
        let target_stat = rustix::fs::statat(&target_dir, *target_name, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| at.write(e.into()))?;
        if same.is_some_and(|s| s.st_ino == target_stat.st_ino && s.st_dev == target_stat.st_dev) {
            return Ok(()); // already that file
        }
        clear(parent, name, self.opts.max_path_depth).map_err(|e| at.write(e))?;
        rustix::fs::linkat(&target_dir, *target_name, parent, name, AtFlags::empty()).map_err(|e| at.write(e.into()))
    }
}

/// The entry being applied: its layer and path, for errors.
struct At<'a> {
    layer: &'a Digest,
    shown: String,
}

impl At<'_> {
    fn write(&self, source: io::Error) -> Stop {
        Stop::Refused(ImportError::Write { layer: self.layer.clone(), path: self.shown.clone(), source })
    }

    fn escape(&self) -> Stop {
        Stop::Refused(ImportError::PathEscape { layer: self.layer.clone(), path: self.shown.clone() })
    }

    /// The components of an entry path below the root: a leading `/`, empty and `.`
    /// components are dropped (tar writers differ in these); a `..` is refused.
    fn components<'p>(&self, raw: &'p [u8], opts: &ImportOptions) -> Result<Vec<&'p [u8]>, Stop> {
        let too_long = || Stop::Refused(ImportError::PathTooLong { layer: self.layer.clone(), path: self.shown.chars().take(200).collect() });
        if raw.len() > opts.max_path_bytes {
            return Err(too_long());
        }
        let mut comps = Vec::new();
        for comp in raw.split(|&b| b == b'/') {
            match comp {
                b"" | b"." => {}
                b".." => return Err(self.escape()),
                _ if comp.len() > NAME_MAX => return Err(too_long()),
                _ => comps.push(comp),
            }
        }
        if comps.len() > opts.max_path_depth {
            return Err(too_long());
        }
        Ok(comps)
    }

    /// Refuses a symbolic link at `parent/…` whose `target` climbs above the root (crate
    /// docs, "Symbolic links").
    fn symlink(&self, parent: &[&[u8]], target: &[u8], opts: &ImportOptions) -> Result<(), Stop> {
        if target.len() > opts.max_path_bytes {
            return Err(Stop::Refused(ImportError::PathTooLong { layer: self.layer.clone(), path: self.shown.clone() }));
        }
        if symlink_escapes(parent.len(), target) {
            return Err(Stop::Refused(ImportError::SymlinkEscape { layer: self.layer.clone(), path: self.shown.clone(), target: shown(target) }));
        }
        Ok(())
    }
}

/// Whether `target`, read as a path inside the root (absolute from the root, relative from
/// the link's directory, `depth` components below the root), ever climbs above the root.
pub(crate) fn symlink_escapes(depth: usize, target: &[u8]) -> bool {
    let mut depth = if target.starts_with(b"/") { 0 } else { depth };
    for comp in target.split(|&b| b == b'/') {
        match comp {
            b"" | b"." => {}
            b".." if depth == 0 => return true,
            b".." => depth -= 1,
            _ => depth += 1,
        }
    }
    false
}

fn shown(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw).into_owned()
}

fn join(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    if prefix.is_empty() {
        return name.to_vec();
    }
    [prefix, b"/", name].concat()
}

fn open_dir(dir: &OwnedFd, name: &[u8]) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?)
}

fn is_dir(dir: &OwnedFd, name: &[u8]) -> io::Result<bool> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(FileType::from_raw_mode(stat.st_mode) == FileType::Directory),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Removes `name` in `dir` whatever it is (a directory with its content); absent is fine.
fn clear(dir: &OwnedFd, name: &[u8], depth_left: usize) -> io::Result<()> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
        Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Directory => {
            let sub = open_dir(dir, name)?;
            for child in children(&sub)? {
                clear(&sub, &child, depth_left.checked_sub(1).ok_or_else(|| io::Error::other("directory tree too deep"))?)?;
            }
            Ok(rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?)
        }
        Ok(_) => Ok(rustix::fs::unlinkat(dir, name, AtFlags::empty())?),
    }
}

/// Removes what lower layers left in `dir` (at `prefix` in the image): every child this
/// layer did not write, and, in the directories it did write, their lower content.
fn remove_lower(dir: &OwnedFd, prefix: &[u8], written: &HashSet<Vec<u8>>, depth_left: usize) -> io::Result<()> {
    let depth_left = depth_left.checked_sub(1).ok_or_else(|| io::Error::other("directory tree too deep"))?;
    for child in children(dir)? {
        let path = join(prefix, &child);
        if !written.contains(&path) {
            clear(dir, &child, depth_left)?;
        } else if is_dir(dir, &child)? {
            remove_lower(&open_dir(dir, &child)?, &path, written, depth_left)?;
        }
    }
    Ok(())
}

/// The names in a directory, without `.` and `..`.
fn children(dir: &OwnedFd) -> io::Result<Vec<Vec<u8>>> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(name);
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests;
