//! Integration tests of `sandbox-oci`: layouts written by `writer.rs`, imported for real,
#![allow(missing_docs)] // test helpers
//! the merged tree walked and compared entry by entry; each refusal asserts its variant.

mod import;
mod mutate;
mod refuse;
mod umoci;
mod writer;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sandbox_oci::{import, ImportError, ImportOptions, Imported};

/// One node of an unpacked tree: type, mode bits (without the file type) and content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir(u32),
    File(u32, String),
    Symlink(String),
    Fifo(u32),
}

/// Every path below `root` (relative, `/`-separated), without following symbolic links.
pub fn tree(root: &Path) -> BTreeMap<String, Node> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Node>) {
        for entry in fs::read_dir(dir).expect("read_dir") {
            let path = entry.expect("dir entry").path();
            let meta = fs::symlink_metadata(&path).expect("lstat");
            let rel = path.strip_prefix(root).expect("below root").to_string_lossy().into_owned();
            let mode = meta.permissions().mode() & 0o7777;
            let node = if meta.file_type().is_symlink() {
                Node::Symlink(fs::read_link(&path).expect("readlink").to_string_lossy().into_owned())
            } else if meta.is_dir() {
                walk(root, &path, out);
                Node::Dir(mode)
            } else if meta.file_type().is_fifo() {
                Node::Fifo(mode)
            } else {
                assert!(meta.is_file(), "{rel}: unexpected file type");
                Node::File(mode, String::from_utf8(fs::read(&path).expect("read")).expect("utf-8 test content"))
            };
            out.insert(rel, node);
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

pub fn inode(path: &Path) -> u64 {
    fs::symlink_metadata(path).expect("lstat").ino()
}

/// A scratch directory: `layout/` for the writer, `out` as the destination.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Default for Scratch {
    fn default() -> Self {
        Self { dir: tempfile::tempdir().expect("tempdir") }
    }
}

impl Scratch {
    /// On tmpfs (`/dev/shm`) when there is one: for tests that import hundreds of times.
    pub fn in_memory() -> Self {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() };
        Self { dir: dir.expect("tempdir") }
    }
    pub fn layout(&self) -> PathBuf {
        self.dir.path().join("layout")
    }
    pub fn dest(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// Imports `source` to `dest()`; on failure, checks that nothing is left beside the layout.
    pub fn import(&self, source: &Path, opts: &ImportOptions) -> Result<Imported, ImportError> {
        let result = import(source, &self.dest(), opts);
        if result.is_err() {
            let left: Vec<_> = fs::read_dir(self.dir.path()).expect("read_dir").map(|e| e.expect("entry").file_name()).collect();
            assert!(left.iter().all(|name| !name.to_string_lossy().starts_with(".out")), "a failed import left {left:?}");
        }
        result
    }
}
