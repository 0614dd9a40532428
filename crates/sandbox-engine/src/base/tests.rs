use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

use super::*;

fn trixie(packages: &[&str]) -> DebianBase {
    DebianBase { suite: "trixie".into(), packages: packages.iter().map(|p| (*p).to_owned()).collect(), mirror: "http://deb.debian.org/debian".into() }
}

#[test]
fn a_base_id_is_its_spec_whatever_the_package_order() {
    let a = base_id(&trixie(&["python3", "libstdc++6"]));
    assert!(a.starts_with("debian-") && a.len() == "debian-".len() + 16, "{a}");
    assert_eq!(a, base_id(&trixie(&["libstdc++6", "python3", "python3"])), "order and duplicates do not matter");
    assert_ne!(a, base_id(&trixie(&["python3"])), "another package list is another base");
    let mut other_mirror = trixie(&["python3", "libstdc++6"]);
    other_mirror.mirror = "http://mirror.example/debian".into();
    assert_ne!(a, base_id(&other_mirror), "another mirror is another base");
}

#[track_caller]
fn check_platform(libc: Option<&str>, want: &str) {
    let m = BaseManifest {
        id: "debian-x".into(),
        debian: Some(trixie(&["python3"])),
        oci: None,
        architecture: "amd64".into(),
        installed_at: String::new(),
        packages: libc.map(|v| vec![format!("libc6={v}"), "python3=3.13.5-1".into()]).unwrap_or_default(),
        python_version: Some("3.13".into()),
        files: 0,
        bytes: 0,
        tree_sha256: String::new(),
    };
    assert_eq!(python_platform(&m), want);
}

#[test]
fn the_python_platform_follows_the_bases_c_library() {
    check_platform(Some("2.41-12+deb13u5"), "x86_64-manylinux_2_40");
    check_platform(Some("2.36-9+deb12u10"), "x86_64-manylinux_2_36");
    check_platform(None, "x86_64-manylinux_2_28");
    check_platform(Some("garbage"), "x86_64-manylinux_2_28");
}

/// The tree a build leaves is made a system root as data: merged-/usr links where missing,
/// the CA bundle, no setuid bits, no special files; the Python version is read from a link.
#[test]
fn an_unpacked_tree_becomes_a_system_root_without_running_anything() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for d in ["usr/bin", "usr/lib", "usr/lib64", "usr/share/ca-certificates/mozilla", "etc"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    symlink("python3.13", root.join("usr/bin/python3")).unwrap();
    fs::write(root.join("usr/bin/su"), b"#!").unwrap();
    fs::set_permissions(root.join("usr/bin/su"), fs::Permissions::from_mode(0o4755)).unwrap();
    fs::write(root.join("usr/share/ca-certificates/mozilla/B.crt"), b"B").unwrap();
    fs::write(root.join("usr/share/ca-certificates/mozilla/A.crt"), b"A\n").unwrap();
    nix::unistd::mkfifo(&root.join("etc/fifo"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    finish_rootfs(root).unwrap();
    assert_eq!(fs::read_link(root.join("lib64")).unwrap(), Path::new("usr/lib64"));
    assert_eq!(fs::read_link(root.join("bin")).unwrap(), Path::new("usr/bin"));
    assert!(fs::symlink_metadata(root.join("sbin")).is_err(), "no link to a directory the tree lacks");
    assert_eq!(fs::read_to_string(root.join("etc/ssl/certs/ca-certificates.crt")).unwrap(), "A\nB\n");
    assert_eq!(fs::metadata(root.join("usr/bin/su")).unwrap().mode() & 0o7777, 0o755);
    assert!(fs::symlink_metadata(root.join("etc/fifo")).is_err(), "special files are removed");
    assert_eq!(python_version(root).as_deref(), Some("3.13"));
}

/// A small unpacked image: merged-/usr links, `python3 -> python3.13`, an absolute link, a
/// loop, and links pointing out of the image and at a host directory.
fn image() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = dir.path();
    for d in ["usr/bin", "usr/local/bin", "usr/lib/x86_64-linux-gnu", "opt/py/bin"] {
        fs::create_dir_all(r.join(d)).unwrap();
    }
    symlink("usr/bin", r.join("bin")).unwrap();
    fs::write(r.join("usr/bin/python3.13"), b"ELF, never run").unwrap();
    symlink("python3.13", r.join("usr/bin/python3")).unwrap();
    symlink("/usr/bin/python3", r.join("usr/local/bin/python3")).unwrap();
    symlink("../../../../../usr/bin/python3.13", r.join("usr/local/bin/climbing")).unwrap();
    symlink("loop-b", r.join("usr/bin/loop-a")).unwrap();
    symlink("loop-a", r.join("usr/bin/loop-b")).unwrap();
    fs::write(r.join("opt/py/bin/python3"), b"").unwrap();
    symlink("/opt/py/bin/python3", r.join("usr/bin/python3.12")).unwrap();
    // A link to a host directory holding a python3: the host must not follow it.
    let host = tempfile::tempdir().expect("tempdir").keep();
    fs::write(host.join("python3"), b"host").unwrap();
    symlink(&host, r.join("usr/hostlink")).unwrap();
    fs::write(r.join("usr/lib/x86_64-linux-gnu/libc.so.6"), b"\x7fELF...GNU C Library (Debian GLIBC 2.41-12) stable release version 2.41.\n").unwrap();
    dir
}

#[track_caller]
fn check_resolve(path: &str, want: Option<(&str, &[&str])>) {
    let dir = image();
    let got = resolve_in(dir.path(), path);
    assert_eq!(got.as_ref().map(|(p, n)| (p.as_str(), n.iter().map(String::as_str).collect::<Vec<_>>())), want.map(|(p, n)| (p, n.to_vec())), "{path}");
}

#[test]
fn paths_resolve_inside_the_image_never_through_the_host() {
    check_resolve("/usr/bin/python3", Some(("/usr/bin/python3.13", &["python3", "python3.13"])));
    check_resolve("/bin/python3", Some(("/usr/bin/python3.13", &["python3", "python3.13"])));
    check_resolve("/usr/local/bin/python3", Some(("/usr/bin/python3.13", &["python3", "python3", "python3.13"])));
    // `..` at the image's root stays there, as the kernel does inside the sandbox.
    check_resolve("/usr/local/bin/climbing", Some(("/usr/bin/python3.13", &["climbing", "python3.13"])));
    check_resolve("/usr/bin/python3.12", Some(("/opt/py/bin/python3", &["python3.12", "python3"])));
    check_resolve("/usr/bin/loop-a", None);
    check_resolve("/usr/bin/missing", None);
    check_resolve("/usr/bin", None);
    // The link's target is a host directory: resolved inside the image, where it does not exist.
    check_resolve("/usr/hostlink/python3", None);
}

fn oci(python: &str, python_version: Option<&str>) -> OciBase {
    OciBase { source: "/srv/image".into(), reference: None, python: python.into(), python_version: python_version.map(str::to_owned), skip_device_nodes: false }
}

fn described(env: &[&str]) -> sandbox_oci::Image {
    sandbox_oci::Image {
        manifest_digest: sandbox_oci::Digest::of(b"manifest"),
        config_digest: sandbox_oci::Digest::of(b"config"),
        layers: Vec::new(),
        os: "linux".into(),
        architecture: "amd64".into(),
        config: sandbox_oci::ImageConfig { env: env.iter().map(|e| (*e).to_owned()).collect(), ..Default::default() },
        config_json: "{}".into(),
    }
}

#[test]
fn the_images_python_and_its_version_are_found_without_running_it() {
    let dir = image();
    let r = dir.path();
    let check = |o: OciBase, env: &[&str]| check_python(r, &o, &described(env)).map_err(|e| e.to_string());
    assert_eq!(check(oci("/usr/bin/python3", None), &[]), Ok("3.13".into()));
    assert_eq!(check(oci("/usr/local/bin/python3", None), &[]), Ok("3.13".into()));
    // The setting wins; then the link names; then the config's PYTHON_VERSION.
    assert_eq!(check(oci("/usr/bin/python3", Some("3.12")), &[]), Ok("3.12".into()));
    let unnamed = check(oci("/usr/bin/python3.12", None), &[]).unwrap_err();
    assert!(unnamed.contains("/opt/py/bin/python3, outside the directories a base provides"), "{unnamed}");
    fs::write(r.join("usr/bin/py"), b"").unwrap();
    assert_eq!(check(oci("/usr/bin/py", None), &["PYTHON_VERSION=3.11.9"]), Ok("3.11".into()));
    let unknown = check(oci("/usr/bin/py", None), &["PYTHON_VERSION=three"]).unwrap_err();
    assert!(unknown.contains("set python_version = \"3.N\""), "{unknown}");
    let missing = check(oci("/usr/bin/python4", None), &["PATH=/usr/local/bin:/usr/bin"]).unwrap_err();
    assert!(missing.contains("no interpreter at /usr/bin/python4") && missing.contains("set python = \"/usr/local/bin/python3\""), "{missing}");
    let elsewhere = check(oci("/usr/hostlink/python3", None), &["PATH=/nowhere"]).unwrap_err();
    assert!(elsewhere.contains("no python3 on its PATH"), "{elsewhere}");
}

#[test]
fn glibc_version_is_read_from_the_bytes_of_libc() {
    let dir = image();
    assert_eq!(glibc_version(dir.path()).as_deref(), Some("2.41"));
    let mut m = BaseManifest {
        id: "oci-x".into(),
        debian: None,
        oci: None,
        architecture: "amd64".into(),
        installed_at: String::new(),
        packages: Vec::new(),
        python_version: None,
        files: 0,
        bytes: 0,
        tree_sha256: String::new(),
    };
    assert_eq!(python_platform(&m), "x86_64-manylinux_2_28");
    m.oci = Some(OciImage {
        source: "/srv/image".into(),
        reference: None,
        manifest_digest: String::new(),
        config_digest: String::new(),
        layers: Vec::new(),
        python: BASE_PYTHON.into(),
        unpacked_bytes: 0,
        devices_skipped: 0,
        glibc: Some("2.36".into()),
    });
    assert_eq!(python_platform(&m), "x86_64-manylinux_2_36");
    fs::remove_file(dir.path().join("usr/lib/x86_64-linux-gnu/libc.so.6")).unwrap();
    assert_eq!(glibc_version(dir.path()), None);
}
