//! A test-only writer of OCI image layouts (image-layout.md): tar layers built entry by entry
//! (raw names, so hostile paths can be written), gzip, blobs under their sha256, manifests,
//! configs and `index.json`, and the oci-archive of a layout.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

pub const LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
pub const LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const CONFIG: &str = "application/vnd.oci.image.config.v1+json";

/// One tar entry, its path written as is.
pub enum E<'a> {
    Dir(&'a str, u32),
    File(&'a str, u32, &'a [u8]),
    Symlink(&'a str, &'a str),
    Link(&'a str, &'a str),
    Char(&'a str),
    Block(&'a str),
    Fifo(&'a str),
}

/// A layer blob and its media type.
pub struct Layer {
    pub media_type: &'static str,
    pub bytes: Vec<u8>,
    pub diff_id: String,
}

impl Layer {
    pub fn tar(entries: &[E<'_>]) -> Self {
        let bytes = tar_of(entries);
        Self { media_type: LAYER_TAR, diff_id: digest(&bytes), bytes }
    }

    /// This layer's tar stream.
    pub fn tar_bytes(&self) -> Vec<u8> {
        match self.media_type {
            LAYER_TAR => self.bytes.clone(),
            LAYER_ZSTD => zstd::decode_all(&self.bytes[..]).expect("unzstd"),
            _ => {
                let mut out = Vec::new();
                std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&self.bytes[..]), &mut out).expect("gunzip");
                out
            }
        }
    }

    /// The same tar stream, zstd-compressed.
    pub fn to_zstd(&self) -> Self {
        let tar = self.tar_bytes();
        Self { media_type: LAYER_ZSTD, diff_id: digest(&tar), bytes: zstd::encode_all(&tar[..], 3).expect("zstd") }
    }

    /// An uncompressed layer of a tar stream built by hand.
    pub fn raw_tar(bytes: Vec<u8>) -> Self {
        Self { media_type: LAYER_TAR, diff_id: digest(&bytes), bytes }
    }

    pub fn gzip(entries: &[E<'_>]) -> Self {
        Self::gzip_tar(tar_of(entries))
    }

    /// A gzip layer of a tar stream built by hand.
    pub fn gzip_tar(tar: Vec<u8>) -> Self {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&tar).expect("gzip into memory");
        Self { media_type: LAYER_GZIP, diff_id: digest(&tar), bytes: gz.finish().expect("gzip into memory") }
    }
}

pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn raw(field: &mut [u8], value: &str) {
    assert!(value.len() < field.len(), "{value:?} does not fit a plain tar header");
    field[..value.len()].copy_from_slice(value.as_bytes());
}

fn tar_of(entries: &[E<'_>]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        let mut header = tar::Header::new_gnu();
        header.set_mtime(1_700_000_000);
        header.set_uid(1000);
        header.set_gid(1000);
        let (path, kind, mode, data, link): (&str, tar::EntryType, u32, &[u8], Option<&str>) = match *entry {
            E::Dir(path, mode) => (path, tar::EntryType::Directory, mode, b"", None),
            E::File(path, mode, data) => (path, tar::EntryType::Regular, mode, data, None),
            E::Symlink(path, target) => (path, tar::EntryType::Symlink, 0o777, b"", Some(target)),
            E::Link(path, target) => (path, tar::EntryType::Link, 0o644, b"", Some(target)),
            E::Char(path) => (path, tar::EntryType::Char, 0o666, b"", None),
            E::Block(path) => (path, tar::EntryType::Block, 0o660, b"", None),
            E::Fifo(path) => (path, tar::EntryType::Fifo, 0o644, b"", None),
        };
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(data.len() as u64);
        let gnu = header.as_gnu_mut().expect("a GNU header");
        raw(&mut gnu.name, path);
        if let Some(link) = link {
            raw(&mut gnu.linkname, link);
        }
        header.set_cksum();
        builder.append(&header, data).expect("tar into memory");
    }
    builder.into_inner().expect("tar into memory")
}

/// Writes blobs and `index.json` into a layout directory.
pub struct Writer {
    pub dir: PathBuf,
}

impl Writer {
    pub fn new(dir: &Path) -> Self {
        fs::create_dir_all(dir.join("blobs/sha256")).expect("layout directory");
        fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).expect("oci-layout");
        Self { dir: dir.to_owned() }
    }

    /// Stores `bytes` as a blob; its descriptor.
    pub fn blob(&self, media_type: &str, bytes: &[u8]) -> Value {
        let digest = digest(bytes);
        fs::write(self.blob_path(&digest), bytes).expect("blob");
        json!({ "mediaType": media_type, "digest": digest, "size": bytes.len() })
    }

    pub fn blob_path(&self, digest: &str) -> PathBuf {
        self.dir.join("blobs/sha256").join(digest.trim_start_matches("sha256:"))
    }

    /// Stores an image (config for `architecture`, its layers, the manifest, `edit`ed before it
    /// is stored); the manifest's descriptor.
    pub fn image(&self, architecture: &str, layers: &[Layer], edit: impl FnOnce(&mut Value)) -> Value {
        let config = json!({
            "architecture": architecture,
            "os": "linux",
            "config": {
                "User": "1000:1000",
                "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"],
                "Entrypoint": null,
                "Cmd": ["python3"],
                "WorkingDir": "/app",
                "Labels": null
            },
            "rootfs": { "type": "layers", "diff_ids": layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>() },
            "history": []
        });
        let config = self.blob(CONFIG, &serde_json::to_vec(&config).expect("json"));
        let layers: Vec<Value> = layers.iter().map(|l| self.blob(l.media_type, &l.bytes)).collect();
        let mut manifest = json!({ "schemaVersion": 2, "mediaType": MANIFEST, "config": config, "layers": layers });
        edit(&mut manifest);
        self.blob(MANIFEST, &serde_json::to_vec(&manifest).expect("json"))
    }

    /// Writes `index.json` listing `manifests`.
    pub fn index(&self, manifests: Vec<Value>) {
        let index = json!({ "schemaVersion": 2, "mediaType": INDEX, "manifests": manifests });
        fs::write(self.dir.join("index.json"), serde_json::to_vec(&index).expect("json")).expect("index.json");
    }

    /// A layout of one image: its manifest digest.
    pub fn single(dir: &Path, layers: &[Layer]) -> (Self, String) {
        let writer = Self::new(dir);
        let manifest = writer.image(host_arch(), layers, |_| {});
        writer.index(vec![manifest.clone()]);
        (writer, manifest["digest"].as_str().expect("digest").to_owned())
    }
}

/// The architecture `ImportOptions::default()` wants.
pub fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The oci-archive of a layout directory: an uncompressed tar with `./`-prefixed names, as
/// `tar -C dir -cf out .` writes it.
pub fn archive(dir: &Path, out: &Path) {
    let mut builder = tar::Builder::new(fs::File::create(out).expect("archive"));
    builder.append_dir_all(".", dir).expect("archive the layout");
    builder.finish().expect("archive");
}
