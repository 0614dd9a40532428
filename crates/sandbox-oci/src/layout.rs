//! Reading an OCI image layout (OCI image-spec image-layout.md): the directory or oci-archive
//! source, its verified blobs, `index.json`, and the choice of one image manifest
//! (image-index.md, manifest.md, config.md: only the fields the import uses; unknown fields
//! are ignored, as the spec asks).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use serde::Deserialize;

use crate::digest::Verifying;
use crate::window::{Gauge, Window, HEADER_BYTES};
use crate::{Digest, ImportError, ImportOptions};

/// Media types (image-spec media-types.md; the Docker names `skopeo` and `podman` may keep).
pub(crate) const INDEX: &[&str] = &["application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"];
pub(crate) const MANIFEST: &[&str] = &["application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json"];
const CONFIG: &[&str] = &["application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json"];
const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// A descriptor (descriptor.md, "Properties").
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: Digest,
    pub size: u64,
    #[serde(default)]
    pub platform: Option<PlatformJson>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// A descriptor's `platform` (image-index.md, "Image Index Property Descriptions").
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct PlatformJson {
    pub architecture: String,
    pub os: String,
}

/// `oci-layout` (image-layout.md, "oci-layout file").
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LayoutFile {
    image_layout_version: String,
}

/// `index.json` or an image index blob (image-index.md).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Index {
    #[serde(default)]
    media_type: Option<String>,
    manifests: Vec<Descriptor>,
}

/// An image manifest (manifest.md, "Image Manifest Property Descriptions").
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Manifest {
    #[serde(default)]
    media_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

/// An image config (config.md, "Properties"): what the import reports.
#[derive(Deserialize)]
pub(crate) struct ConfigJson {
    pub architecture: String,
    pub os: String,
    #[serde(default)]
    pub config: Option<crate::ImageConfig>,
}

/// A file of the layout, open for reading, and its length in bytes.
type Member<'a> = (Box<dyn Read + 'a>, u64);

/// Where the layout's files are: a directory (its path and descriptor), or the byte ranges of
/// an uncompressed tar.
pub(crate) enum Source {
    Dir(PathBuf, OwnedFd),
    Archive { path: PathBuf, file: File, members: HashMap<String, (u64, u64)> },
}

impl Source {
    /// Opens `path`: a layout directory, or an oci-archive (an uncompressed tar of one).
    pub(crate) fn open(path: &Path, opts: &ImportOptions) -> Result<Self, ImportError> {
        let source = |source| ImportError::Source { path: path.to_owned(), source };
        let meta = std::fs::metadata(path).map_err(source)?;
        if meta.is_dir() {
            let dir = rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).map_err(|e| source(e.into()))?;
            return Ok(Self::Dir(path.to_owned(), dir));
        }
        let file = open_regular(path).map_err(source)?.ok_or_else(|| source(io::Error::other("neither a directory nor a regular file")))?;
        let mut members = HashMap::new();
        let gauge = Gauge::new(u64::MAX);
        let mut archive = tar::Archive::new(Window::new(&file, &gauge));
        let mut entries = archive.entries_with_seek().map_err(source)?;
        let (mut count, mut previous_size) = (0, 0);
        loop {
            // An entry's headers are read into memory: HEADER_BYTES each at most.
            gauge.window_for_headers(previous_size, u64::MAX);
            let next = entries.next();
            gauge.set_limit(u64::MAX);
            let Some(entry) = next else { break };
            let entry = entry.map_err(|e| match gauge.hit() {
                Some(_) => ImportError::Layout { reason: format!("an archive entry's tar headers are over {HEADER_BYTES} bytes") },
                None => source(e),
            })?;
            previous_size = entry.size();
            count += 1;
            if count > opts.max_entries {
                return Err(ImportError::Layout { reason: format!("the archive has more than {} entries", opts.max_entries) });
            }
            let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            let name = name.trim_start_matches("./").to_owned();
            let wanted = name == "oci-layout"
                || name == "index.json"
                || name.strip_prefix("blobs/sha256/").is_some_and(|hex| Digest::parse(&format!("sha256:{hex}")).is_ok());
            if !wanted {
                continue;
            }
            if entry.header().entry_type() != tar::EntryType::Regular {
                return Err(ImportError::Layout { reason: format!("archive member {name:?} is not a regular file") });
            }
            let range = (entry.raw_file_position(), entry.size());
            if members.insert(name.clone(), range).is_some() {
                return Err(ImportError::Layout { reason: format!("the archive holds {name:?} twice") });
            }
        }
        Ok(Self::Archive { path: path.to_owned(), file, members })
    }

    /// A file of the layout by its relative name (`index.json`, `blobs/sha256/<hex>`), and its
    /// length; `None` if absent or not a regular file.
    fn member(&self, name: &str) -> Result<Option<Member<'_>>, ImportError> {
        match self {
            Self::Dir(path, dir) => match open_member(dir, name) {
                Ok(Some(file)) => {
                    let len = file.metadata().map_err(|source| ImportError::Source { path: path.join(name), source })?.len();
                    Ok(Some((Box::new(file), len)))
                }
                Ok(None) => Ok(None),
                Err(source) => Err(ImportError::Source { path: path.join(name), source }),
            },
            Self::Archive { file, members, .. } => {
                Ok(members.get(name).map(|&(start, len)| (Box::new(RangeReader { file, pos: start, end: start + len }) as Box<dyn Read>, len)))
            }
        }
    }

    fn describe(&self) -> &Path {
        match self {
            Self::Dir(path, _) | Self::Archive { path, .. } => path,
        }
    }

    /// Opens the blob `descriptor` names, checking the stored length against its size; the
    /// content is checked as it is read ([`Verifying::finish`]).
    pub(crate) fn blob(&self, descriptor: &Descriptor) -> Result<Verifying<Box<dyn Read + '_>>, ImportError> {
        let digest = &descriptor.digest;
        let (reader, len) = self.member(&format!("blobs/sha256/{}", digest.hex()))?.ok_or_else(|| ImportError::MissingBlob { digest: digest.clone() })?;
        if len != descriptor.size {
            return Err(ImportError::SizeMismatch { digest: digest.clone(), declared: descriptor.size });
        }
        Ok(Verifying::new(reader, digest, descriptor.size))
    }

    /// Reads and verifies a JSON blob of at most `max_json_bytes`, then parses it.
    fn json_blob<T: for<'de> Deserialize<'de>>(&self, descriptor: &Descriptor, what: &str, opts: &ImportOptions) -> Result<(T, Vec<u8>), ImportError> {
        let what = format!("{what} {}", descriptor.digest);
        if descriptor.size > opts.max_json_bytes {
            return Err(ImportError::JsonTooLarge { what, size: descriptor.size, limit: opts.max_json_bytes });
        }
        let mut blob = self.blob(descriptor)?;
        let mut bytes = Vec::new();
        let read = blob.read_to_end(&mut bytes);
        if blob.oversized() {
            return Err(ImportError::SizeMismatch { digest: descriptor.digest.clone(), declared: descriptor.size });
        }
        read.map_err(|source| ImportError::ReadBlob { digest: descriptor.digest.clone(), source })?;
        blob.finish()?;
        let parsed = serde_json::from_slice(&bytes).map_err(|source| ImportError::Json { what, source })?;
        Ok((parsed, bytes))
    }

    /// Reads a small file of the layout that has no digest (`oci-layout`, `index.json`).
    fn json_file<T: for<'de> Deserialize<'de>>(&self, name: &str, opts: &ImportOptions) -> Result<T, ImportError> {
        let (reader, len) =
            self.member(name)?.ok_or_else(|| ImportError::Layout { reason: format!("{name} is missing from {}", self.describe().display()) })?;
        if len > opts.max_json_bytes {
            return Err(ImportError::JsonTooLarge { what: name.to_owned(), size: len, limit: opts.max_json_bytes });
        }
        let mut bytes = Vec::new();
        reader.take(opts.max_json_bytes).read_to_end(&mut bytes).map_err(|source| ImportError::Source { path: self.describe().join(name), source })?;
        serde_json::from_slice(&bytes).map_err(|source| ImportError::Json { what: name.to_owned(), source })
    }
}

/// The manifest chosen, verified, with its verified config.
pub(crate) struct Selected {
    pub manifest_digest: Digest,
    pub manifest: Manifest,
    pub config_digest: Digest,
    pub config: ConfigJson,
    pub config_json: String,
}

/// Checks `oci-layout`, reads `index.json`, picks one manifest (following an image index one
/// level), and reads its config.
pub(crate) fn select(source: &Source, opts: &ImportOptions) -> Result<Selected, ImportError> {
    let layout: LayoutFile = source.json_file("oci-layout", opts)?;
    if !layout.image_layout_version.starts_with("1.") {
        return Err(ImportError::Layout { reason: format!("unsupported imageLayoutVersion {:?}", layout.image_layout_version) });
    }
    let index: Index = source.json_file("index.json", opts)?;
    check_media_type("index.json", index.media_type.as_deref(), INDEX)?;

    let wanted_platform = format!("{}/{}", opts.platform.os, opts.platform.architecture);
    let mut candidates: Vec<&Descriptor> = index.manifests.iter().collect();
    if let Some(name) = &opts.reference {
        candidates.retain(|d| d.annotations.get(REF_NAME) == Some(name));
    }
    let wanted = opts.reference.as_ref().map_or_else(|| wanted_platform.clone(), |name| format!("reference {name:?}"));
    let nested;
    let chosen = match candidates.as_slice() {
        [] => return Err(ImportError::NoManifest { wanted }),
        [one] if INDEX.contains(&one.media_type.as_str()) => {
            let (inner, _): (Index, _) = source.json_blob(one, "image index", opts)?;
            check_media_type(&format!("image index {}", one.digest), inner.media_type.as_deref(), INDEX)?;
            nested = inner.manifests;
            by_platform(nested.iter().collect(), opts, &wanted_platform)?
        }
        [one] => *one,
        several => by_platform(several.to_vec(), opts, &wanted)?,
    };
    if !MANIFEST.contains(&chosen.media_type.as_str()) {
        return Err(ImportError::MediaType { what: format!("manifest descriptor {}", chosen.digest), media_type: chosen.media_type.clone() });
    }
    let (manifest, _): (Manifest, _) = source.json_blob(chosen, "manifest", opts)?;
    check_media_type(&format!("manifest {}", chosen.digest), manifest.media_type.as_deref(), MANIFEST)?;
    if !CONFIG.contains(&manifest.config.media_type.as_str()) {
        return Err(ImportError::MediaType { what: format!("config {}", manifest.config.digest), media_type: manifest.config.media_type.clone() });
    }
    let (config, config_bytes): (ConfigJson, _) = source.json_blob(&manifest.config, "config", opts)?;
    // It parsed, so it is UTF-8 (JSON text is, and serde_json checks its strings).
    let config_json = String::from_utf8(config_bytes).map_err(|_| ImportError::Layout { reason: format!("config {} is not UTF-8", manifest.config.digest) })?;
    let found = format!("{}/{}", config.os, config.architecture);
    if found != wanted_platform {
        return Err(ImportError::Platform { wanted: wanted_platform, found });
    }
    Ok(Selected { manifest_digest: chosen.digest.clone(), config_digest: manifest.config.digest.clone(), manifest, config, config_json })
}

/// The one manifest descriptor of `candidates` whose platform is the one asked for.
fn by_platform<'a>(mut candidates: Vec<&'a Descriptor>, opts: &ImportOptions, wanted: &str) -> Result<&'a Descriptor, ImportError> {
    candidates.retain(|d| {
        MANIFEST.contains(&d.media_type.as_str())
            && d.platform.as_ref().is_some_and(|p| p.os == opts.platform.os && p.architecture == opts.platform.architecture)
    });
    match candidates.as_slice() {
        [] => Err(ImportError::NoManifest { wanted: wanted.to_owned() }),
        [one] => Ok(one),
        several => Err(ImportError::AmbiguousManifest { wanted: wanted.to_owned(), count: several.len() }),
    }
}

/// A document's own `mediaType`, when present, must be one of `allowed`.
fn check_media_type(what: &str, found: Option<&str>, allowed: &[&str]) -> Result<(), ImportError> {
    match found {
        Some(media_type) if !allowed.contains(&media_type) => Err(ImportError::MediaType { what: what.to_owned(), media_type: media_type.to_owned() }),
        _ => Ok(()),
    }
}

/// Opens the archive at `path` (the caller's path: links followed) if it is a regular file
/// (`O_NONBLOCK`, so a FIFO cannot hang the import); `None` if it is something else.
fn open_regular(path: &Path) -> io::Result<Option<File>> {
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY, Mode::empty())?;
    if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != FileType::RegularFile {
        return Ok(None);
    }
    Ok(Some(File::from(fd)))
}

/// Opens `name` (`/`-separated) below the layout directory `dir` without following a
/// symbolic link anywhere, if it is a regular file; `None` if it is absent or anything else
/// (a link to `/dev/watchdog` planted as a blob is never opened).
fn open_member(dir: &OwnedFd, name: &str) -> io::Result<Option<File>> {
    let absent = |e: rustix::io::Errno| matches!(e, rustix::io::Errno::NOENT | rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR);
    let (parents, file) = name.rsplit_once('/').map_or(("", name), |(p, f)| (p, f));
    let mut here = rustix::io::dup(dir)?;
    for comp in parents.split('/').filter(|c| !c.is_empty()) {
        here = match rustix::fs::openat(&here, comp, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) if absent(e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
    }
    match rustix::fs::statat(&here, file, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile => {}
        Ok(_) => return Ok(None),
        Err(e) if absent(e) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let fd = match rustix::fs::openat(&here, file, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(e) if absent(e) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != FileType::RegularFile {
        return Ok(None);
    }
    Ok(Some(File::from(fd)))
}

/// One member of an oci-archive: positional reads, so members never share a file offset.
struct RangeReader<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for RangeReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = usize::try_from(self.end - self.pos).unwrap_or(usize::MAX);
        let want = left.min(buf.len());
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "oci-archive member is truncated"));
        }
        self.pos += n as u64;
        Ok(n)
    }
}
