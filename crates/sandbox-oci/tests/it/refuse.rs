//! Layouts that must be refused, each with the variant that says why; nothing is left behind
//! (checked by `Scratch::import`), and nothing outside the destination is touched.

use std::fs;

use sandbox_oci::{ImportError, ImportOptions};
use serde_json::json;

use crate::writer::{archive, Layer, Writer, E};
use crate::Scratch;

/// Imports a one-image layout of `layers` with `opts`, expecting a refusal.
#[track_caller]
fn refused_with(layers: &[Layer], opts: &ImportOptions) -> ImportError {
    let scratch = Scratch::default();
    Writer::single(&scratch.layout(), layers);
    let err = scratch.import(&scratch.layout(), opts).expect_err("the import must be refused");
    assert!(!scratch.dest().exists());
    err
}

#[track_caller]
fn refused(layers: &[Layer]) -> ImportError {
    refused_with(layers, &ImportOptions::default())
}

/// The accepted twin: the same shape of layout imports.
#[track_caller]
fn accepted(layers: &[Layer]) {
    let scratch = Scratch::default();
    Writer::single(&scratch.layout(), layers);
    scratch.import(&scratch.layout(), &ImportOptions::default()).expect("the import must succeed");
}

fn small() -> Vec<Layer> {
    vec![Layer::gzip(&[E::File("etc/hostname", 0o644, b"box\n")]), Layer::gzip(&[E::File("etc/motd", 0o644, b"hi\n")])]
}

#[test]
fn a_tampered_layer_is_refused_naming_its_digest() {
    let scratch = Scratch::default();
    let layers = small();
    let (writer, _) = Writer::single(&scratch.layout(), &layers);
    let digest = crate::writer::digest(&layers[1].bytes);
    let path = writer.blob_path(&digest);
    let mut bytes = fs::read(&path).expect("blob");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    fs::write(&path, bytes).expect("tamper");
    let err = scratch.import(&scratch.layout(), &ImportOptions::default()).expect_err("tampered");
    assert!(matches!(&err, ImportError::DigestMismatch { digest: d, .. } if d.as_str() == digest), "{err:?}");
    assert!(err.to_string().contains(&digest), "{err}");
}

#[test]
fn a_tampered_layer_that_still_unpacks_is_refused() {
    // Another valid layer of the same length stored under the first one's name: it unpacks
    // fine, and only the digest tells.
    let scratch = Scratch::default();
    let layers = vec![Layer::tar(&[E::File("a", 0o644, b"good")])];
    let (writer, _) = Writer::single(&scratch.layout(), &layers);
    let evil = Layer::tar(&[E::File("a", 0o644, b"evil")]);
    assert_eq!(evil.bytes.len(), layers[0].bytes.len());
    fs::write(writer.blob_path(&crate::writer::digest(&layers[0].bytes)), &evil.bytes).expect("swap");
    let err = scratch.import(&scratch.layout(), &ImportOptions::default()).expect_err("swapped");
    assert!(matches!(err, ImportError::DigestMismatch { .. }), "{err:?}");
}

#[test]
fn a_tampered_manifest_is_refused() {
    let scratch = Scratch::default();
    let (writer, manifest) = Writer::single(&scratch.layout(), &small());
    let path = writer.blob_path(&manifest);
    let text = fs::read_to_string(&path).expect("manifest").replace("\"schemaVersion\":2", "\"schemaVersion\":3");
    fs::write(&path, text).expect("tamper");
    let err = scratch.import(&scratch.layout(), &ImportOptions::default()).expect_err("tampered");
    assert!(matches!(&err, ImportError::DigestMismatch { digest, .. } if digest.as_str() == manifest), "{err:?}");
}

#[test]
fn a_size_that_does_not_match_the_descriptor_is_refused() {
    // The manifest declares one byte more than the layer has.
    let scratch = Scratch::default();
    let writer = Writer::new(&scratch.layout());
    let manifest = writer.image(crate::writer::host_arch(), &small(), |m| {
        let size = m["layers"][0]["size"].as_u64().expect("size");
        m["layers"][0]["size"] = json!(size + 1);
    });
    writer.index(vec![manifest]);
    let err = scratch.import(&scratch.layout(), &ImportOptions::default()).expect_err("size");
    assert!(matches!(err, ImportError::SizeMismatch { .. }), "{err:?}");

    // The blob has grown by a byte.
    let scratch = Scratch::default();
    let layers = small();
    let (writer, _) = Writer::single(&scratch.layout(), &layers);
    let path = writer.blob_path(&crate::writer::digest(&layers[0].bytes));
    let mut bytes = fs::read(&path).expect("blob");
    bytes.push(0);
    fs::write(&path, bytes).expect("grow");
    let err = scratch.import(&scratch.layout(), &ImportOptions::default()).expect_err("size");
    assert!(matches!(err, ImportError::SizeMismatch { declared, .. } if declared == layers[0].bytes.len() as u64), "{err:?}");
}

#[test]
fn a_missing_blob_is_refused() {
    let scratch = Scratch::default();
    let layers = small();
    let (writer, _) = Writer::single(&scratch.layout(), &layers);
    let digest = crate::writer::digest(&layers[1].bytes);
    let path = writer.blob_path(&digest);
    let stored = scratch.dir.path().join("stored-blob");
    fs::rename(&path, &stored).expect("move the blob away");
    let err = scratch.import(&scratch.layout(), &ImportOptions::default()).expect_err("missing");
    assert!(matches!(&err, ImportError::MissingBlob { digest: d } if d.as_str() == digest), "{err:?}");
    // A symbolic link to the right content is not followed either (a link could as well name
    // a device whose opening has effects), nor a link on the way to it.
    std::os::unix::fs::symlink(&stored, &path).expect("symlink");
    let err = scratch.import(&scratch.layout(), &ImportOptions::default()).expect_err("a link");
    assert!(matches!(&err, ImportError::MissingBlob { .. }), "{err:?}");
    fs::remove_file(&path).expect("rm link");
    fs::copy(&stored, &path).expect("the blob back");
    let blobs = writer.dir.join("blobs");
    fs::rename(&blobs, scratch.dir.path().join("real-blobs")).expect("move blobs");
    std::os::unix::fs::symlink(scratch.dir.path().join("real-blobs"), &blobs).expect("symlink");
    let err = scratch.import(&scratch.layout(), &ImportOptions::default()).expect_err("a link on the way");
    assert!(matches!(&err, ImportError::MissingBlob { .. }), "{err:?}");
    // The accepted twin: the real directory back.
    fs::remove_file(&blobs).expect("rm link");
    fs::rename(scratch.dir.path().join("real-blobs"), &blobs).expect("blobs back");
    scratch.import(&scratch.layout(), &ImportOptions::default()).expect("all blobs there");
}

#[test]
fn dot_dot_paths_are_refused() {
    accepted(&[Layer::gzip(&[E::File("a/./b/../../c", 0o644, b"x")])].map(|_| Layer::gzip(&[E::File("a/./b/c", 0o644, b"x")])));
    for path in ["../evil", "a/../../evil", "./..", "a/b/../../../evil"] {
        let err = refused(&[Layer::gzip(&[E::File(path, 0o644, b"x")])]);
        assert!(matches!(&err, ImportError::PathEscape { path: p, .. } if p == path), "{path}: {err:?}");
    }
    // A whiteout of `..` would remove the parent.
    let err = refused(&[Layer::gzip(&[E::Dir("a/", 0o755), E::File("a/.wh...", 0o644, b"")])]);
    assert!(matches!(err, ImportError::PathEscape { .. }), "{err:?}");
}

#[test]
fn nothing_is_written_through_a_symlink_of_a_lower_layer() {
    let victim = tempfile::tempdir().expect("victim dir");
    let outside = victim.path().to_str().expect("utf-8").to_owned();
    // Absolute (a host directory, standing for `/`: should this test ever fail, it writes
    // there, not into the host's /etc) and relative targets: all are acceptable links, and
    // none may be written through.
    accepted(&[Layer::gzip(&[E::Symlink("etc", "/")])]);
    for target in [outside.as_str(), "usr", "./usr/../etc2"] {
        accepted(&[Layer::gzip(&[E::Symlink("etc", target)])]);
        let err = refused(&[Layer::gzip(&[E::Dir("usr/", 0o755), E::Symlink("etc", target)]), Layer::gzip(&[E::File("etc/passwd", 0o644, b"pwned")])]);
        assert!(matches!(&err, ImportError::ThroughSymlink { path, symlink, .. } if path == "etc/passwd" && symlink == "etc"), "{target}: {err:?}");
        // In the same layer, and deeper below the link.
        let err = refused(&[Layer::gzip(&[E::Symlink("etc", target), E::File("etc/x/y", 0o644, b"pwned")])]);
        assert!(matches!(err, ImportError::ThroughSymlink { .. }), "{target}: {err:?}");
        // Directories, links, whiteouts and opaque markers below the link too.
        for entry in [
            E::Dir("etc/d/", 0o755),
            E::Symlink("etc/s", "/"),
            E::Link("etc/h", "f"),
            E::File("etc/.wh.passwd", 0o644, b""),
            E::File("etc/.wh..wh..opq", 0o644, b""),
        ] {
            let err = refused(&[Layer::gzip(&[E::File("f", 0o644, b"f"), E::Symlink("etc", target)]), Layer::gzip(&[entry])]);
            assert!(matches!(err, ImportError::ThroughSymlink { .. }), "{target}: {err:?}");
        }
    }
    assert_eq!(fs::read_dir(victim.path()).expect("victim").count(), 0, "nothing written outside");
}

#[test]
fn symlinks_climbing_above_the_root_are_refused() {
    accepted(&[Layer::gzip(&[E::Symlink("usr/bin/python3", "/usr/bin/python3.13"), E::Symlink("usr/lib64", "../lib"), E::Symlink("a/b/c", "../../x")])]);
    for (path, target) in [("etc", "../../.."), ("usr/x", "../../etc/shadow"), ("a", "/../../etc"), ("a/b/c", "../../../x")] {
        let err = refused(&[Layer::gzip(&[E::Symlink(path, target)])]);
        assert!(matches!(&err, ImportError::SymlinkEscape { path: p, target: t, .. } if p == path && t == target), "{path} -> {target}: {err:?}");
    }
}

#[test]
fn hard_links_must_name_a_regular_file_inside_the_root() {
    accepted(&[Layer::gzip(&[E::File("etc/passwd", 0o644, b"x")]), Layer::gzip(&[E::Link("copy", "etc/passwd"), E::Link("copy2", "/etc/passwd")])]);
    let base = || Layer::gzip(&[E::File("etc/passwd", 0o644, b"x"), E::Symlink("link", "/etc/passwd"), E::Dir("dir/", 0o755), E::Symlink("sl", "etc")]);
    for target in ["../etc/passwd", "etc/../../etc/passwd", "/etc/shadow", "link", "dir", "sl/passwd", "nothing", ""] {
        let err = refused(&[base(), Layer::gzip(&[E::Link("h", target)])]);
        assert!(matches!(&err, ImportError::HardLink { path, target: t, .. } if path == "h" && t == target), "{target}: {err:?}");
    }
}

#[test]
fn device_nodes_are_refused_or_left_out_when_asked() {
    for entry in [E::Char("dev/null"), E::Block("dev/sda")] {
        let err = refused(&[Layer::gzip(&[entry])]);
        assert!(matches!(&err, ImportError::DeviceNode { path, .. } if path.starts_with("dev/")), "{err:?}");
    }
    let scratch = Scratch::default();
    Writer::single(&scratch.layout(), &[Layer::gzip(&[E::Dir("dev/", 0o755), E::Char("dev/null"), E::Block("dev/sda"), E::File("etc/x", 0o644, b"x")])]);
    let opts = ImportOptions { skip_device_nodes: true, ..ImportOptions::default() };
    let imported = scratch.import(&scratch.layout(), &opts).expect("devices left out");
    assert_eq!(imported.devices_skipped, 2);
    assert_eq!(fs::read_dir(scratch.dest().join("dev")).expect("dev").count(), 0);
}

#[test]
fn a_decompression_bomb_is_refused_at_the_byte_limit() {
    let zeros = vec![0u8; 8 << 20];
    let bomb = || vec![Layer::gzip(&[E::File("zeros", 0o644, &zeros)])];
    assert!(bomb()[0].bytes.len() < 64 << 10, "a real bomb: small compressed");
    let opts = ImportOptions { max_unpacked_bytes: 4 << 20, ..ImportOptions::default() };
    let err = refused_with(&bomb(), &opts);
    assert!(matches!(&err, ImportError::TooManyBytes { path, limit, .. } if path == "zeros" && *limit == 4 << 20), "{err:?}");
    let err = refused_with(&[bomb()[0].to_zstd()], &opts);
    assert!(matches!(&err, ImportError::TooManyBytes { path, .. } if path == "zeros"), "zstd: {err:?}");
    // Spread over layers too.
    let half = vec![0u8; 3 << 20];
    let err = refused_with(&[Layer::gzip(&[E::File("a", 0o644, &half)]), Layer::gzip(&[E::File("b", 0o644, &half)])], &opts);
    assert!(matches!(&err, ImportError::TooManyBytes { path, .. } if path == "b"), "{err:?}");
    // The accepted twin: under the limit.
    let scratch = Scratch::default();
    Writer::single(&scratch.layout(), &[Layer::gzip(&[E::File("a", 0o644, &half)])]);
    scratch.import(&scratch.layout(), &opts).expect("under the limit");
}

#[test]
fn too_many_entries_and_too_long_paths_are_refused() {
    let opts = ImportOptions { max_entries: 10, max_path_depth: 8, ..ImportOptions::default() };
    let names: Vec<String> = (0..11).map(|i| format!("f{i}")).collect();
    let entries: Vec<E<'_>> = names.iter().map(|n| E::File(n, 0o644, b"")).collect();
    let err = refused_with(&[Layer::gzip(&entries)], &opts);
    assert!(matches!(err, ImportError::TooManyEntries { limit: 10, .. }), "{err:?}");
    let err = refused_with(&[Layer::gzip(&[E::File("a/b/c/d/e/f/g/h/i", 0o644, b"")])], &opts);
    assert!(matches!(err, ImportError::PathTooLong { .. }), "{err:?}");
}

#[test]
fn an_archive_is_refused_like_its_layout() {
    let scratch = Scratch::default();
    let layers = small();
    let (writer, _) = Writer::single(&scratch.layout(), &layers);
    fs::remove_file(writer.blob_path(&crate::writer::digest(&layers[0].bytes))).expect("remove");
    let tar = scratch.dir.path().join("layout.tar");
    archive(&scratch.layout(), &tar);
    fs::remove_dir_all(scratch.layout()).expect("only the archive");
    let err = scratch.import(&tar, &ImportOptions::default()).expect_err("missing blob");
    assert!(matches!(err, ImportError::MissingBlob { .. }), "{err:?}");
}

#[test]
fn an_existing_destination_is_never_replaced() {
    let scratch = Scratch::default();
    Writer::single(&scratch.layout(), &small());
    fs::create_dir(scratch.dest()).expect("dest");
    let err = sandbox_oci::import(&scratch.layout(), &scratch.dest(), &ImportOptions::default()).expect_err("exists");
    assert!(matches!(err, ImportError::DestinationExists { .. }), "{err:?}");
}

#[test]
fn a_bomb_in_the_tar_headers_is_refused_before_it_fills_memory() {
    // A GNU long name record of 4 MiB (the tar reader would buffer it whole), then its entry.
    let tar = |name_bytes: usize| {
        let mut builder = tar::Builder::new(Vec::new());
        let mut long = tar::Header::new_gnu();
        long.as_gnu_mut().expect("gnu").name[..13].copy_from_slice(b"././@LongLink");
        long.set_entry_type(tar::EntryType::GNULongName);
        long.set_size(name_bytes as u64);
        long.set_cksum();
        builder.append(&long, &vec![b'a'; name_bytes][..]).expect("tar");
        let mut file = tar::Header::new_gnu();
        file.set_size(1);
        file.set_mode(0o644);
        builder.append_data(&mut file, "short", &b"x"[..]).expect("tar");
        builder.into_inner().expect("tar")
    };
    let err = refused(&[Layer::gzip_tar(tar(4 << 20))]);
    assert!(matches!(err, ImportError::HeaderTooLarge { limit, .. } if limit == 1 << 20), "{err:?}");
    // The accepted twin: a long name of honest length (GNU long name records, as tar writes
    // them for paths over 100 bytes).
    let long_path = format!("{}/file", "directory-name".repeat(15));
    let mut builder = tar::Builder::new(Vec::new());
    let mut file = tar::Header::new_gnu();
    file.set_size(1);
    file.set_mode(0o644);
    builder.append_data(&mut file, &long_path, &b"x"[..]).expect("tar");
    let scratch = Scratch::default();
    Writer::single(&scratch.layout(), &[Layer::gzip_tar(builder.into_inner().expect("tar"))]);
    scratch.import(&scratch.layout(), &ImportOptions::default()).expect("a long name");
    assert_eq!(fs::read(scratch.dest().join(&long_path)).expect("the long-named file"), b"x");
}

#[test]
fn an_archive_holding_a_name_twice_or_a_layout_of_another_version_is_refused() {
    // Which of two `index.json` would count is exactly the ambiguity an attacker wants.
    let scratch = Scratch::default();
    let (writer, _) = Writer::single(&scratch.layout(), &small());
    let tar = scratch.dir.path().join("layout.tar");
    let members = |extra: bool| {
        let mut b = tar::Builder::new(Vec::new());
        for name in ["oci-layout", "index.json"] {
            b.append_path_with_name(writer.dir.join(name), name).expect("append");
        }
        if extra {
            b.append_path_with_name(writer.dir.join("index.json"), "./index.json").expect("append");
        }
        for blob in fs::read_dir(writer.dir.join("blobs/sha256")).expect("blobs") {
            let blob = blob.expect("blob");
            b.append_path_with_name(blob.path(), format!("blobs/sha256/{}", blob.file_name().to_string_lossy())).expect("append");
        }
        b.into_inner().expect("tar")
    };
    fs::write(&tar, members(false)).expect("archive");
    scratch.import(&tar, &ImportOptions::default()).expect("the twin without a duplicate");
    fs::remove_dir_all(scratch.dest()).expect("clean");
    fs::write(&tar, members(true)).expect("archive");
    let err = scratch.import(&tar, &ImportOptions::default()).expect_err("duplicate");
    assert!(matches!(&err, ImportError::Layout { reason } if reason.contains("twice")), "{err:?}");

    fs::write(writer.dir.join("oci-layout"), br#"{"imageLayoutVersion":"2.0.0"}"#).expect("version");
    let err = scratch.import(&writer.dir, &ImportOptions::default()).expect_err("version");
    assert!(matches!(&err, ImportError::Layout { reason } if reason.contains("2.0.0")), "{err:?}");
}
