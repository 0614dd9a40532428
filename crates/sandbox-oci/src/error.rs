//! The import's one error type: every refusal names what it touched (file, blob digest, layer
//! entry path).

use std::io;
use std::path::PathBuf;

use crate::Digest;

/// Why an import failed. Variants are stable; the engine maps them to its own codes.
/// Layer refusals name the layer's digest and the entry's path as written in the tar
/// (lossy UTF-8); nothing is left at the destination after any of them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The source could not be opened or read (not a layout directory, not a tar, unreadable).
    #[error("cannot read the image source {path}")]
    Source {
        /// The file or directory read.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// The layout is malformed: `oci-layout` missing or of an unknown version, `index.json`
    /// missing, an oci-archive holding one name twice.
    #[error("not an OCI image layout: {reason}")]
    Layout {
        /// What is wrong, in words.
        reason: String,
    },
    /// A digest is not `sha256:<64 lowercase hex>` (other algorithms are refused).
    #[error("unsupported or malformed digest {value:?}")]
    BadDigest {
        /// The digest as written.
        value: String,
    },
    /// A descriptor names a blob the layout does not hold (or holds as something other than a
    /// regular file).
    #[error("blob {digest} is missing from the layout")]
    MissingBlob {
        /// The blob's digest.
        digest: Digest,
    },
    /// A blob's length differs from its descriptor's `size`.
    #[error("blob {digest} does not have its declared size of {declared} bytes")]
    SizeMismatch {
        /// The blob's digest.
        digest: Digest,
        /// The descriptor's `size`, in bytes.
        declared: u64,
    },
    /// A blob's content does not hash to its digest (a tampered or corrupted blob).
    #[error("blob {digest} has content hashing to {actual}")]
    DigestMismatch {
        /// The digest the descriptor names.
        digest: Digest,
        /// What the content hashed to.
        actual: String,
    },
    /// Reading a blob failed.
    #[error("cannot read blob {digest}")]
    ReadBlob {
        /// The blob's digest.
        digest: Digest,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// A JSON document (`oci-layout`, `index.json`, an index, manifest or config blob) does not
    /// parse as its schema.
    #[error("cannot parse {what}")]
    Json {
        /// Which document (`index.json`, `manifest sha256:…`, ...).
        what: String,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A JSON document is larger than [`crate::ImportOptions::max_json_bytes`].
    #[error("{what} is {size} bytes, over the limit of {limit}")]
    JsonTooLarge {
        /// Which document.
        what: String,
        /// Its size in bytes.
        size: u64,
        /// The limit in bytes.
        limit: u64,
    },
    /// A descriptor or document has a media type this importer does not handle (foreign
    /// layer types, artifacts, an index nested more than one level).
    #[error("{what} has unsupported media type {media_type:?}")]
    MediaType {
        /// Which descriptor or document.
        what: String,
        /// The media type as written.
        media_type: String,
    },
    /// No manifest matches the selection.
    #[error("no image manifest for {wanted} in the layout")]
    NoManifest {
        /// The reference name or platform asked for.
        wanted: String,
    },
    /// Several manifests match and nothing tells them apart.
    #[error("{count} image manifests match {wanted}; name one with a reference")]
    AmbiguousManifest {
        /// The reference name or platform asked for.
        wanted: String,
        /// How many matched.
        count: usize,
    },
    /// The image's config is for another platform than the one asked for.
    #[error("the image is for {found}, not {wanted}")]
    Platform {
        /// `os/architecture` asked for.
        wanted: String,
        /// `os/architecture` of the image config.
        found: String,
    },
    /// A layer entry's path has a `..` component, or is empty after normalizing.
    #[error("layer {layer}: entry {path:?} escapes the root")]
    PathEscape {
        /// The layer's digest.
        layer: Digest,
        /// The entry's path.
        path: String,
    },
    /// A layer entry's path (or link target) is longer than
    /// [`crate::ImportOptions::max_path_bytes`] or deeper than
    /// [`crate::ImportOptions::max_path_depth`].
    #[error("layer {layer}: entry {path:?} has a path over the limits")]
    PathTooLong {
        /// The layer's digest.
        layer: Digest,
        /// The entry's path (truncated).
        path: String,
    },
    /// A layer entry's parent path goes through a symbolic link (the unpacker never writes
    /// through one: a lower layer's `etc -> /` cannot redirect `etc/passwd`).
    #[error("layer {layer}: entry {path:?} goes through the symbolic link {symlink:?}")]
    ThroughSymlink {
        /// The layer's digest.
        layer: Digest,
        /// The entry's path.
        path: String,
        /// The path of the symbolic link inside the image.
        symlink: String,
    },
    /// A layer entry's parent path goes through something that is not a directory.
    #[error("layer {layer}: entry {path:?} goes through {parent:?}, which is not a directory")]
    NotADirectory {
        /// The layer's digest.
        layer: Digest,
        /// The entry's path.
        path: String,
        /// The path of the non-directory inside the image.
        parent: String,
    },
    /// A symbolic link whose target, resolved lexically inside the image's root (an absolute
    /// target from the root, a relative one from the link's directory), climbs above the root
    /// with `..`. See the crate docs, "Symbolic links".
    #[error("layer {layer}: symbolic link {path:?} points out of the root ({target:?})")]
    SymlinkEscape {
        /// The layer's digest.
        layer: Digest,
        /// The link's path.
        path: String,
        /// The link's target.
        target: String,
    },
    /// A hard link whose target has `..`, is outside the root, or is not a regular file
    /// unpacked before it (in this layer or a lower one).
    #[error("layer {layer}: hard link {path:?} has a bad target {target:?}")]
    HardLink {
        /// The layer's digest.
        layer: Digest,
        /// The link's path.
        path: String,
        /// The link's target.
        target: String,
    },
    /// A character or block device node: an image has no business creating devices (unless
    /// [`crate::ImportOptions::skip_device_nodes`] leaves them out).
    #[error("layer {layer}: entry {path:?} is a device node")]
    DeviceNode {
        /// The layer's digest.
        layer: Digest,
        /// The entry's path.
        path: String,
    },
    /// A tar entry type the importer does not unpack (sparse files, volume labels, ...).
    #[error("layer {layer}: entry {path:?} has unsupported tar type {kind}")]
    UnsupportedEntry {
        /// The layer's digest.
        layer: Digest,
        /// The entry's path.
        path: String,
        /// The tar type flag, as a character.
        kind: char,
    },
    /// The image has more entries than [`crate::ImportOptions::max_entries`].
    #[error("layer {layer}: more than {limit} entries in the image")]
    TooManyEntries {
        /// The layer's digest.
        layer: Digest,
        /// The limit.
        limit: u64,
    },
    /// The image unpacks to more than [`crate::ImportOptions::max_unpacked_bytes`] (file
    /// contents), or a layer's uncompressed tar stream is larger than that limit allows.
    #[error("layer {layer}: entry {path:?} takes the image over {limit} unpacked bytes")]
    TooManyBytes {
        /// The layer's digest.
        layer: Digest,
        /// The entry's path (empty when the tar stream itself ran over).
        path: String,
        /// The limit in bytes.
        limit: u64,
    },
    /// One entry's tar headers (GNU long names, PAX records) are larger than the importer
    /// buffers (1 MiB): an honest image's never are.
    #[error("layer {layer}: an entry's tar headers are over {limit} bytes")]
    HeaderTooLarge {
        /// The layer's digest.
        layer: Digest,
        /// The limit in bytes.
        limit: u64,
    },
    /// A layer is not a readable (compressed) tar stream.
    #[error("layer {layer}: malformed tar stream")]
    Tar {
        /// The layer's digest.
        layer: Digest,
        /// The decoder's or tar reader's error.
        #[source]
        source: io::Error,
    },
    /// Writing the unpacked tree failed (disk full, ...).
    #[error("layer {layer}: cannot write entry {path:?}")]
    Write {
        /// The layer's digest.
        layer: Digest,
        /// The entry's path.
        path: String,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// The destination exists already (an import never replaces one).
    #[error("destination {path} exists")]
    DestinationExists {
        /// The destination.
        path: PathBuf,
    },
    /// The destination's temporary sibling could not be made, or renamed into place.
    #[error("cannot create the destination {path}")]
    Destination {
        /// The destination (or its temporary sibling).
        path: PathBuf,
        /// The system's error.
        #[source]
        source: io::Error,
    },
}
