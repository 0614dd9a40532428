//! Images that import: the merged tree of several layers, exactly.

use std::collections::BTreeMap;

use sandbox_oci::{ImportError, ImportOptions};
use serde_json::json;

use crate::writer::{archive, host_arch, Layer, Writer, E};
use crate::{inode, tree, Node, Scratch};

/// Three layers: whiteouts (a file, a directory), an opaque directory, overwrites (file by
/// file, file by directory), symbolic links (absolute and relative), hard links (same layer,
/// lower layer), a FIFO, setuid bits; the third layer is an uncompressed tar.
pub fn three_layers() -> Vec<Layer> {
    vec![
        Layer::gzip(&[
            E::Dir("etc/", 0o755),
            E::File("etc/passwd", 0o644, b"root:x:0:0::/root:/bin/sh\n"),
            E::File("etc/shadow", 0o600, b"root:*:1::::::\n"),
            E::Dir("opt/", 0o755),
            E::File("opt/old.txt", 0o644, b"old"),
            E::Dir("opt/sub/", 0o750),
            E::File("opt/sub/deep.txt", 0o644, b"deep"),
            // No entry for usr/ or usr/bin/: made as 0755.
            E::File("usr/bin/tool", 0o4755, b"#!/bin/sh\n"),
            E::File("usr/bin/group-tool", 0o2711, b"#!/bin/sh\n"),
            E::Dir("/tmp", 0o1777),
            E::File("./data/keep.txt", 0o644, b"v1"),
            E::File("data/linked", 0o640, b"shared"),
            E::Link("data/hard", "data/linked"),
            E::File("data/becomes-dir", 0o644, b"a file first"),
            E::Dir("var/cache/apt/", 0o755),
            E::File("var/cache/apt/pkgcache.bin", 0o644, b"cache"),
        ]),
        Layer::gzip(&[
            E::File("etc/.wh.shadow", 0o644, b""),
            E::Dir("opt/", 0o755),
            E::File("opt/.wh..wh..opq", 0o644, b""),
            E::File("opt/new.txt", 0o644, b"new"),
            E::File("data/keep.txt", 0o600, b"v2"),
            E::Dir("data/becomes-dir/", 0o700),
            E::File("data/becomes-dir/inside", 0o644, b"now a directory"),
            E::Symlink("usr/bin/python3", "/usr/bin/python3.13"),
            E::Symlink("usr/bin/python", "/usr/bin/python3.13"),
            E::Symlink("lib", "usr/lib"),
            E::Symlink("usr/bin/up", "../lib/x"),
            // Written before its own opaque marker: kept (the marker removes lower content only).
            E::File("srv/mine", 0o644, b"mine"),
            E::File("srv/.wh..wh..opq", 0o644, b""),
        ]),
        Layer::tar(&[
            E::File("var/.wh.cache", 0o644, b""),
            E::Link("data/hard2", "data/linked"),
            E::Fifo("run/ctl"),
            E::File("etc/.wh.not-there", 0o644, b""),
            E::File("usr/bin/.wh.python3", 0o644, b""),
        ]),
    ]
}

fn expected() -> BTreeMap<String, Node> {
    let f = |mode, s: &str| Node::File(mode, s.to_owned());
    let l = |s: &str| Node::Symlink(s.to_owned());
    [
        ("data", Node::Dir(0o755)),
        ("data/becomes-dir", Node::Dir(0o700)),
        ("data/becomes-dir/inside", f(0o644, "now a directory")),
        ("data/hard", f(0o640, "shared")),
        ("data/hard2", f(0o640, "shared")),
        ("data/keep.txt", f(0o600, "v2")),
        ("data/linked", f(0o640, "shared")),
        ("etc", Node::Dir(0o755)),
        ("etc/passwd", f(0o644, "root:x:0:0::/root:/bin/sh\n")),
        ("lib", l("usr/lib")),
        ("opt", Node::Dir(0o755)),
        ("opt/new.txt", f(0o644, "new")),
        ("run", Node::Dir(0o755)),
        ("run/ctl", Node::Fifo(0o644)),
        ("srv", Node::Dir(0o755)),
        ("srv/mine", f(0o644, "mine")),
        ("tmp", Node::Dir(0o1777)),
        ("usr", Node::Dir(0o755)),
        ("usr/bin", Node::Dir(0o755)),
        ("usr/bin/python", l("/usr/bin/python3.13")),
        ("usr/bin/group-tool", f(0o711, "#!/bin/sh\n")),
        ("usr/bin/tool", f(0o755, "#!/bin/sh\n")),
        ("usr/bin/up", l("../lib/x")),
        ("var", Node::Dir(0o755)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

#[track_caller]
fn check_merged(scratch: &Scratch, source: &std::path::Path, manifest: &str, layers: &[Layer]) {
    let imported = scratch.import(source, &ImportOptions::default()).expect("import");
    assert_eq!(sandbox_oci::inspect(source, &ImportOptions::default()).expect("inspect"), imported.image, "inspect describes what import imports");
    let image = &imported.image;
    let dest = scratch.dest();
    assert_eq!(tree(&dest), expected());
    assert_eq!(inode(&dest.join("data/hard")), inode(&dest.join("data/linked")));
    assert_eq!(inode(&dest.join("data/hard2")), inode(&dest.join("data/linked")));
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata(&dest).expect("stat");
    assert_eq!((root.mode() & 0o7777, root.uid()), (0o755, rustix::process::getuid().as_raw()));
    let file = std::fs::metadata(dest.join("etc/passwd")).expect("stat");
    assert_eq!((file.uid(), file.mtime()), (rustix::process::getuid().as_raw(), 1_700_000_000), "owned by the importer, image mtime kept");

    assert_eq!(image.manifest_digest.as_str(), manifest);
    let want_layers: Vec<String> = layers.iter().map(|l| crate::writer::digest(&l.bytes)).collect();
    assert_eq!(image.layers.iter().map(|d| d.to_string()).collect::<Vec<_>>(), want_layers);
    assert_eq!((image.os.as_str(), image.architecture.as_str()), ("linux", host_arch()));
    assert_eq!(image.config.env_var("PATH"), Some("/usr/local/bin:/usr/bin:/bin"));
    assert_eq!(image.config.cmd, Some(vec!["python3".to_owned()]));
    assert_eq!(
        (image.config.entrypoint.as_deref(), image.config.working_dir.as_deref(), image.config.user.as_deref()),
        (None, Some("/app"), Some("1000:1000"))
    );
    assert!(image.config.labels.is_empty());
    let contents = ["root:x:0:0::/root:/bin/sh\n", "root:*:1::::::\n", "old", "deep", "#!/bin/sh\n", "#!/bin/sh\n", "v1", "shared", "a file first", "cache"];
    let contents2 = ["new", "v2", "now a directory", "mine"];
    assert_eq!(imported.unpacked_bytes, contents.iter().chain(&contents2).map(|c| c.len() as u64).sum::<u64>());
    assert_eq!(imported.entries, 16 + 13 + 5);
    assert_eq!(crate::writer::digest(image.config_json.as_bytes()), image.config_digest.to_string());
}

#[test]
fn three_layers_merge_into_exactly_the_expected_tree() {
    let scratch = Scratch::default();
    let layers = three_layers();
    let (_, manifest) = Writer::single(&scratch.layout(), &layers);
    check_merged(&scratch, &scratch.layout(), &manifest, &layers);
}

#[test]
fn progress_is_told_before_each_layer() {
    let scratch = Scratch::default();
    let layers = three_layers();
    Writer::single(&scratch.layout(), &layers);
    let mut seen = Vec::new();
    sandbox_oci::import_with_progress(&scratch.layout(), &scratch.dest(), &ImportOptions::default(), &mut |step| match step {
        sandbox_oci::Progress::Layer { index, count, digest, size_bytes } => seen.push((index, count, digest.to_string(), size_bytes)),
        _ => unreachable!("only layers so far"),
    })
    .expect("import");
    let want: Vec<_> = layers.iter().enumerate().map(|(i, l)| (i, 3, crate::writer::digest(&l.bytes), l.bytes.len() as u64)).collect();
    assert_eq!(seen, want);
}

#[test]
fn zstd_layers_give_the_same_tree() {
    let scratch = Scratch::default();
    let layers: Vec<Layer> = three_layers().iter().map(Layer::to_zstd).collect();
    let (_, manifest) = Writer::single(&scratch.layout(), &layers);
    check_merged(&scratch, &scratch.layout(), &manifest, &layers);
}

#[test]
fn an_oci_archive_of_the_layout_gives_the_same_tree() {
    let scratch = Scratch::default();
    let layers = three_layers();
    let (_, manifest) = Writer::single(&scratch.layout(), &layers);
    let tar = scratch.dir.path().join("layout.tar");
    archive(&scratch.layout(), &tar);
    std::fs::remove_dir_all(scratch.layout()).expect("only the archive is left");
    check_merged(&scratch, &tar, &manifest, &layers);
}

#[test]
fn a_manifest_is_chosen_by_platform_by_reference_and_through_a_nested_index() {
    let one = |name: &str| vec![Layer::gzip(&[E::File(name, 0o644, b"x")])];
    let scratch = Scratch::default();
    let writer = Writer::new(&scratch.layout());
    let other_arch = if host_arch() == "arm64" { "amd64" } else { "arm64" };
    let mut here = writer.image(host_arch(), &one("here"), |_| {});
    here["platform"] = json!({ "os": "linux", "architecture": host_arch() });
    let mut there = writer.image(other_arch, &one("there"), |_| {});
    there["platform"] = json!({ "os": "linux", "architecture": other_arch });
    let mut named = writer.image(host_arch(), &one("named"), |_| {});
    named["annotations"] = json!({ "org.opencontainers.image.ref.name": "v1" });

    // By platform among several.
    writer.index(vec![here.clone(), there.clone()]);
    scratch.import(&scratch.layout(), &ImportOptions::default()).expect("by platform");
    assert!(scratch.dest().join("here").is_file());
    std::fs::remove_dir_all(scratch.dest()).expect("clean");

    // By reference name; without it, two manifests for this platform are ambiguous.
    writer.index(vec![here.clone(), there.clone(), named.clone()]);
    let by_name = ImportOptions { reference: Some("v1".into()), ..ImportOptions::default() };
    scratch.import(&scratch.layout(), &by_name).expect("by reference");
    assert!(scratch.dest().join("named").is_file());
    std::fs::remove_dir_all(scratch.dest()).expect("clean");
    let mut here_too = named.clone();
    here_too["platform"] = json!({ "os": "linux", "architecture": host_arch() });
    writer.index(vec![here.clone(), here_too]);
    let err = scratch.import(&scratch.layout(), &ImportOptions::default()).expect_err("ambiguous");
    assert!(matches!(err, ImportError::AmbiguousManifest { count: 2, .. }), "{err:?}");
    let missing = ImportOptions { reference: Some("v2".into()), ..ImportOptions::default() };
    let err = scratch.import(&scratch.layout(), &missing).expect_err("no such reference");
    assert!(matches!(err, ImportError::NoManifest { .. }), "{err:?}");

    // Through a nested image index (one level), as `skopeo copy --all` writes it.
    let nested = writer.blob(crate::writer::INDEX, &serde_json::to_vec(&json!({ "schemaVersion": 2, "manifests": [there, here] })).expect("json"));
    writer.index(vec![nested]);
    scratch.import(&scratch.layout(), &ImportOptions::default()).expect("through an index");
    assert!(scratch.dest().join("here").is_file());
    std::fs::remove_dir_all(scratch.dest()).expect("clean");

    // A single manifest for another platform.
    let there_only = writer.image(other_arch, &one("there"), |_| {});
    writer.index(vec![there_only]);
    let err = scratch.import(&scratch.layout(), &ImportOptions::default()).expect_err("other platform");
    assert!(matches!(err, ImportError::Platform { .. }), "{err:?}");
}
