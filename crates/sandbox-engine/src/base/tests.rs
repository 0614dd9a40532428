use std::os::unix::fs::{MetadataExt, PermissionsExt};

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
        debian: trixie(&["python3"]),
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
    std::os::unix::fs::symlink("python3.13", root.join("usr/bin/python3")).unwrap();
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
