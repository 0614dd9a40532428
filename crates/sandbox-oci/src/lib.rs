//! Imports an OCI image from local disk into a directory holding its unpacked root
//! filesystem: the `oci` base of an environment. It parses hostile bytes as host root, so it
//! trusts nothing it reads and runs nothing it unpacks.
//!
//! # What it reads
//!
//! An OCI image layout (OCI image-spec v1.1 image-layout.md: `oci-layout`, `index.json`,
//! `blobs/sha256/<hex>`) as a directory, or an oci-archive: an uncompressed tar of such a
//! directory, as `podman save --format oci-archive` and `skopeo copy … oci-archive:` write it.
//! One image manifest is chosen from `index.json` ([`ImportOptions::reference`],
//! [`ImportOptions::platform`]), following an image index one level (image-index.md).
//!
//! # Verification
//!
//! Every blob (an image index, the manifest, the config, each layer) is hashed as it is read
//! and its length checked against its descriptor's `size` (descriptor.md, "Digests"); a blob
//! that is longer than declared is cut off at the declared size. JSON blobs are checked before
//! they are parsed. Layers are checked while they stream into a temporary directory, so the
//! unpacker does see bytes of a tampered layer, but nothing of it survives: any failure removes
//! the temporary directory, and only a fully verified tree is renamed to the destination.
//! `index.json` and `oci-layout` have no digest; they only choose which digests to trust.
//! Inside a layout directory, no symbolic link is followed and only regular files are opened
//! (a blob that is a link, a FIFO or a device counts as missing).
//!
//! # Unpacking (layer.md, "Applying Changesets")
//!
//! Layers apply in manifest order into `<dest's parent>/.<dest name>.<random>`, renamed to
//! `dest` at the end (`RENAME_NOREPLACE`: an import never replaces anything). Supported layer
//! media types: `tar`, `tar+gzip`, `tar+zstd` (and their deprecated non-distributable and Docker
//! names; zstd frames needing a window over 128 MiB are refused, as libzstd does by default);
//! others are refused ([`ImportError::MediaType`]).
//!
//! - Paths: a leading `/`, `.` and empty components are dropped; a `..` component is refused
//!   ([`ImportError::PathEscape`]), as is a path over [`ImportOptions::max_path_bytes`] bytes,
//!   [`ImportOptions::max_path_depth`] components or a 255-byte component.
//! - Every path is walked component by component from the root's directory descriptor with
//!   `O_NOFOLLOW | O_DIRECTORY`: an entry whose parent path goes through a symbolic link is
//!   refused ([`ImportError::ThroughSymlink`]), whatever the link's target; nothing is ever
//!   written, created or removed through one. Missing parent directories are made (0755).
//! - Whiteouts (layer.md, "Whiteouts"): `.wh.NAME` removes NAME as lower layers left it;
//!   `.wh..wh..opq` removes everything lower layers left in its directory. What the same layer
//!   writes is kept whatever the order of entries. Other `.wh..wh.` names are ignored, and no
//!   whiteout file is ever created.
//! - An entry replaces what lower layers left at its path (a directory over a directory merges,
//!   taking the new mode). Files are always created anew, never written in place, so a hard
//!   link of a lower layer keeps its content.
//! - Hard links must name a regular file already unpacked (this layer or a lower one) by a
//!   path inside the root, found without following symbolic links ([`ImportError::HardLink`]).
//! - Character and block devices are refused ([`ImportError::DeviceNode`]), or left out with
//!   [`ImportOptions::skip_device_nodes`]; FIFOs are made;
//!   sparse files and other tar types are refused ([`ImportError::UnsupportedEntry`]).
//! - Ownership and modes: everything is owned by the importing user (root), never chowned to
//!   the image's uids; setuid and setgid bits are dropped, the rest of the mode (sticky bit
//!   included) is kept. File modification times are kept (Python compares `.pyc` files with
//!   their source's), directory times are not. No extended attributes, ACLs or file
//!   capabilities are applied (PAX `SCHILY.xattr.*` records are ignored).
//! - Limits ([`ImportOptions`]): entries, file content bytes, and the uncompressed tar stream
//!   (content bytes plus 4096 per allowed entry), so a decompression bomb is refused
//!   ([`ImportError::TooManyBytes`]) rather than filling the disk. The tar reader holds an
//!   entry's long names and PAX records in memory: 1 MiB of them per entry at most
//!   ([`ImportError::HeaderTooLarge`]), so a bomb cannot fill memory either.
//!
//! # Symbolic links
//!
//! A symbolic link may point anywhere inside the image: its target is resolved inside the
//! sandbox, whose root is the image. An absolute target like `/usr/bin/python3` is normal and
//! accepted. A target is refused ([`ImportError::SymlinkEscape`]) when, read as a path inside
//! the image (an absolute target from the image's root, a relative one from the link's
//! directory), a `..` would climb above the root: `etc/x -> ../../etc/shadow`,
//! `a -> /../../etc`. No honest image has such a link (inside the sandbox the kernel would stop
//! at `/` anyway), and on the host it would point out of the tree. The rule is lexical; the
//! host-side guarantee is that nothing follows links in an unpacked tree on the host (this
//! unpacker never does, and the engine only mounts the tree as a sandbox's root).
//!
//! # Example
//!
//! ```no_run
//! use std::path::Path;
//! use sandbox_oci::{import, inspect, ImportOptions};
//!
//! let opts = ImportOptions { reference: Some("python-3.13".into()), ..ImportOptions::default() };
//! let source = Path::new("/srv/images/python.oci.tar");
//! // The content address first: an image already imported need not be unpacked again.
//! let image = inspect(source, &opts)?;
//! let dest = Path::new("/var/lib/sandbox/bases").join(image.manifest_digest.hex());
//! if !dest.exists() {
//!     let imported = import(source, &dest, &opts)?;
//!     println!("{} bytes unpacked, PATH={:?}", imported.unpacked_bytes, imported.image.config.env_var("PATH"));
//! }
//! # Ok::<(), sandbox_oci::ImportError>(())
//! ```

mod digest;
mod error;
mod layout;
mod unpack;
mod window;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, RenameFlags};
use serde::{Deserialize, Serialize};

pub use digest::Digest;
pub use error::ImportError;

/// What to import and the limits that bound it. Every field has a default
/// ([`ImportOptions::default`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImportOptions {
    /// Chooses the manifest whose `org.opencontainers.image.ref.name` annotation in
    /// `index.json` is exactly this (image-layout.md, "index.json file"; annotations.md). With
    /// `None`, a layout with one manifest gives that one, and several are told apart by
    /// [`ImportOptions::platform`].
    pub reference: Option<String>,
    /// The platform wanted: chooses among several manifests (image-index.md, `platform`), and
    /// the image config's `os`/`architecture` must match it ([`ImportError::Platform`]).
    /// Default: linux and this machine's architecture in Go's names (`amd64`, `arm64`).
    pub platform: Platform,
    /// Entries over all layers (whiteouts included). Default 1,000,000.
    pub max_entries: u64,
    /// Bytes of file content over all layers (before whiteouts remove any). Default 16 GiB.
    pub max_unpacked_bytes: u64,
    /// Bytes of an entry path or link target. Default 4096 (`PATH_MAX`).
    pub max_path_bytes: usize,
    /// Components of an entry path. Default 256.
    pub max_path_depth: usize,
    /// Bytes of `index.json`, `oci-layout`, an index, manifest or config. Default 4 MiB.
    pub max_json_bytes: u64,
    /// Leave out character and block devices instead of refusing the image
    /// ([`ImportError::DeviceNode`]); counted in [`Imported::devices_skipped`]. Default `false`.
    /// Images made from a root filesystem tarball (`mmdebstrap`, then `podman import`) carry
    /// `/dev/null`, `/dev/console`, ...; a sandbox mounts its own minimal `/dev` over them anyway.
    pub skip_device_nodes: bool,
}

impl Default for ImportOptions {
    fn default() -> Self {
        Self {
            reference: None,
            platform: Platform::host(),
            max_entries: 1_000_000,
            max_unpacked_bytes: 16 << 30,
            max_path_bytes: 4096,
            max_path_depth: 256,
            max_json_bytes: 4 << 20,
            skip_device_nodes: false,
        }
    }
}

/// An image platform in the OCI/Go names (image-index.md, `platform`: `os`, `architecture`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Platform {
    /// `linux`.
    pub os: String,
    /// `amd64`, `arm64`, ...
    pub architecture: String,
}

impl Platform {
    /// Linux on this machine's architecture (`x86_64` → `amd64`, `aarch64` → `arm64`, others
    /// as Rust names them).
    pub fn host() -> Self {
        let architecture = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            other => other,
        };
        Self { os: "linux".into(), architecture: architecture.into() }
    }
}

/// An image as its verified manifest and config describe it: what the engine keys, records
/// and runs it by. Nothing in it was run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// The image manifest's digest: the content address to key the base by (it pins the
    /// config and every layer).
    pub manifest_digest: Digest,
    /// The config blob's digest.
    pub config_digest: Digest,
    /// The layers' digests (compressed blobs), lowest first.
    pub layers: Vec<Digest>,
    /// The config's `os` (config.md, "Properties").
    pub os: String,
    /// The config's `architecture`.
    pub architecture: String,
    /// The config's execution parameters (config.md, `config`).
    pub config: ImageConfig,
    /// The config blob as verified (JSON text), for whoever needs more of it.
    pub config_json: String,
}

/// What [`import`] made: the image, and what unpacking it took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Imported {
    /// The image imported.
    pub image: Image,
    /// Bytes of file content written, over all layers (including files later layers removed).
    pub unpacked_bytes: u64,
    /// Tar entries read, over all layers.
    pub entries: u64,
    /// Device nodes left out ([`ImportOptions::skip_device_nodes`]).
    pub devices_skipped: u64,
}

/// The execution parameters of an image config (config.md, "Properties", `config`), as the
/// image wrote them; names are the spec's. Only data: the engine decides what to use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ImageConfig {
    /// `User`: `user`, `uid`, `user:group` or `uid:gid`.
    #[serde(rename = "User", skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// `Env`: `NAME=value` entries.
    #[serde(rename = "Env", deserialize_with = "null_as_default")]
    pub env: Vec<String>,
    /// `Entrypoint`.
    #[serde(rename = "Entrypoint", skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// `Cmd`.
    #[serde(rename = "Cmd", skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    /// `WorkingDir`.
    #[serde(rename = "WorkingDir", skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// `Labels`.
    #[serde(rename = "Labels", deserialize_with = "null_as_default")]
    pub labels: BTreeMap<String, String>,
}

impl ImageConfig {
    /// The value of `name` in [`ImageConfig::env`] (the last entry wins), e.g. `PATH`.
    pub fn env_var(&self, name: &str) -> Option<&str> {
        self.env.iter().rev().find_map(|entry| entry.strip_prefix(name)?.strip_prefix('='))
    }
}

fn null_as_default<'de, D: serde::Deserializer<'de>, T: Default + Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Reads and verifies what describes the image at `source` (a layout directory or an
/// oci-archive file): `index.json`, the chosen manifest and its config, not the layers. Cheap:
/// tells the content address ([`Image::manifest_digest`]) before anything is unpacked, so a
/// caller can find the base already imported.
///
/// Errors: [`ImportError`], as [`import`] before it unpacks.
pub fn inspect(source: &Path, opts: &ImportOptions) -> Result<Image, ImportError> {
    let source = layout::Source::open(source, opts)?;
    Ok(describe(layout::select(&source, opts)?))
}

/// Imports the image at `source` (a layout directory or an oci-archive file) into `dest`, a
/// directory that must not exist yet; its parent must. On success `dest` holds the merged
/// root filesystem (0755, owned by the caller) and the returned [`Imported`] describes it; on
/// any error nothing is left at `dest` or beside it. The tree is built in
/// `.<dest name>.<random>` beside `dest`: if the process dies mid-import, that directory is
/// what a sweep removes. Blocking (file I/O and hashing: seconds for a few hundred MB).
/// The image's modes are kept (world-writable files included): keep `dest`'s parent closed
/// to other host users.
///
/// Errors: [`ImportError`]: the variant says what was refused, naming the blob digest, or the
/// layer digest and entry path.
pub fn import(source: &Path, dest: &Path, opts: &ImportOptions) -> Result<Imported, ImportError> {
    import_with_progress(source, dest, opts, &mut |_| {})
}

/// A step of a long import, for a progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Progress<'a> {
    /// Layer `index` (0-based, of `count`) starts unpacking; `size_bytes` is its blob's
    /// (compressed) size.
    Layer {
        /// 0-based position in the manifest.
        index: usize,
        /// How many layers the image has.
        count: usize,
        /// The layer's digest.
        digest: &'a Digest,
        /// The blob's size in bytes.
        size_bytes: u64,
    },
}

/// [`import`], calling `progress` before each layer.
///
/// Errors: as [`import`].
pub fn import_with_progress(source: &Path, dest: &Path, opts: &ImportOptions, progress: &mut dyn FnMut(Progress<'_>)) -> Result<Imported, ImportError> {
    let exists = |path: &Path| path.symlink_metadata().is_ok();
    if exists(dest) {
        return Err(ImportError::DestinationExists { path: dest.to_owned() });
    }
    let (parent, name) = split_dest(dest)?;
    let source = layout::Source::open(source, opts)?;
    let selected = layout::select(&source, opts)?;

    let mut prefix = OsString::from(".");
    prefix.push(&name);
    prefix.push(".");
    let temp = tempfile::Builder::new().prefix(&prefix).tempdir_in(&parent).map_err(|source| ImportError::Destination { path: parent.clone(), source })?;
    let dest_error = |source: std::io::Error| ImportError::Destination { path: temp.path().to_owned(), source };
    // The tree stays 0700 (tempfile's mode) until it is complete.
    let root = rustix::fs::open(temp.path(), OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| dest_error(e.into()))?;
    let mut unpacker = unpack::Unpacker::new(rustix::io::dup(&root).map_err(|e| dest_error(e.into()))?, opts);
    let count = selected.manifest.layers.len();
    for (index, layer) in selected.manifest.layers.iter().enumerate() {
        progress(Progress::Layer { index, count, digest: &layer.digest, size_bytes: layer.size });
        unpacker.apply(&source, layer)?;
    }
    let (unpacked_bytes, entries, devices_skipped) = (unpacker.bytes, unpacker.entries, unpacker.devices_skipped);
    drop(unpacker);
    rustix::fs::fchmod(&root, Mode::from_raw_mode(0o755)).map_err(|e| dest_error(e.into()))?;

    let parent_fd = rustix::fs::open(&parent, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).map_err(|e| dest_error(e.into()))?;
    let temp_name = temp.path().file_name().expect("a temporary directory has a name").to_owned();
    rustix::fs::renameat_with(&parent_fd, &temp_name, &parent_fd, &name, RenameFlags::NOREPLACE).map_err(|e| match e {
        rustix::io::Errno::EXIST => ImportError::DestinationExists { path: dest.to_owned() },
        e => ImportError::Destination { path: dest.to_owned(), source: e.into() },
    })?;
    // Renamed: the directory is `dest` now; nothing is left to clean up.
    let _ = temp.keep();
    Ok(Imported { image: describe(selected), unpacked_bytes, entries, devices_skipped })
}

fn describe(selected: layout::Selected) -> Image {
    Image {
        layers: selected.manifest.layers.iter().map(|l| l.digest.clone()).collect(),
        manifest_digest: selected.manifest_digest,
        config_digest: selected.config_digest,
        os: selected.config.os,
        architecture: selected.config.architecture,
        config: selected.config.config.unwrap_or_default(),
        config_json: selected.config_json,
    }
}

/// `dest`'s parent directory (which must exist) and last component.
fn split_dest(dest: &Path) -> Result<(PathBuf, OsString), ImportError> {
    let bad = |reason: &str| ImportError::Destination { path: dest.to_owned(), source: std::io::Error::other(reason.to_owned()) };
    let name = dest.file_name().ok_or_else(|| bad("the destination has no final name"))?.to_owned();
    let parent = match dest.parent() {
        Some(p) if p.as_os_str().is_empty() => PathBuf::from("."),
        Some(p) => p.to_owned(),
        None => return Err(bad("the destination has no parent")),
    };
    if !parent.is_dir() {
        return Err(bad("the destination's parent is not a directory"));
    }
    Ok((parent, name))
}
