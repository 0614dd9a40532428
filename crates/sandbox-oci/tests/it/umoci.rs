//! A layout made by a real tool: `umoci` (Debian's package, scripts/install-deps.sh) builds a
//! two-layer image from a directory, the second layer deleting a file and a directory of the
//! first (its own whiteouts); the import gives exactly the directory's final state.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

use sandbox_oci::ImportOptions;

use crate::{tree, Node, Scratch};

#[track_caller]
fn umoci(args: &[&str], cwd: &Path) {
    let out = Command::new("umoci").args(args).current_dir(cwd).output().expect("run umoci");
    assert!(out.status.success(), "umoci {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
#[allow(clippy::print_stderr)] // the visible skip
fn a_layout_made_by_umoci_imports_with_its_whiteouts_applied() {
    if Command::new("umoci").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "CI must have umoci (scripts/install-deps.sh)");
        eprintln!("SKIP a_layout_made_by_umoci_imports_with_its_whiteouts_applied: no umoci (apt-get install umoci)");
        return;
    }
    let scratch = Scratch::default();
    let dir = scratch.dir.path();
    umoci(&["init", "--layout", "layout"], dir);
    umoci(&["new", "--image", "layout:py"], dir);
    // Layer 1: files, a directory, an absolute symbolic link.
    umoci(&["unpack", "--image", "layout:py", "one"], dir);
    let rootfs = dir.join("one/rootfs");
    fs::create_dir_all(rootfs.join("etc")).expect("mkdir");
    fs::create_dir_all(rootfs.join("opt/sub")).expect("mkdir");
    fs::write(rootfs.join("etc/hostname"), "box\n").expect("write");
    fs::write(rootfs.join("etc/shadow"), "secret\n").expect("write");
    fs::write(rootfs.join("opt/sub/old"), "old\n").expect("write");
    symlink("/usr/bin/python3", rootfs.join("python")).expect("symlink");
    umoci(&["repack", "--image", "layout:py", "one"], dir);
    // Layer 2: a file and a directory deleted (whiteouts), a file added.
    umoci(&["unpack", "--image", "layout:py", "two"], dir);
    let rootfs = dir.join("two/rootfs");
    fs::remove_file(rootfs.join("etc/shadow")).expect("rm");
    fs::remove_dir_all(rootfs.join("opt/sub")).expect("rm -r");
    fs::write(rootfs.join("etc/new"), "new\n").expect("write");
    umoci(&["repack", "--image", "layout:py", "two"], dir);
    umoci(&["config", "--image", "layout:py", "--config.env", "PATH=/usr/local/bin:/usr/bin", "--config.cmd", "python3"], dir);
    for bundle in ["one", "two"] {
        fs::remove_dir_all(dir.join(bundle)).expect("rm bundle");
    }

    let opts = ImportOptions { reference: Some("py".into()), ..ImportOptions::default() };
    let image = scratch.import(&scratch.layout(), &opts).expect("import").image;
    let want: Vec<(String, Node)> = vec![
        ("etc".into(), Node::Dir(0o755)),
        ("etc/hostname".into(), Node::File(0o644, "box\n".into())),
        ("etc/new".into(), Node::File(0o644, "new\n".into())),
        ("opt".into(), Node::Dir(0o755)),
        ("python".into(), Node::Symlink("/usr/bin/python3".into())),
    ];
    assert_eq!(tree(&scratch.dest()), want.into_iter().collect());
    assert_eq!(image.layers.len(), 2);
    assert_eq!(image.config.env_var("PATH"), Some("/usr/local/bin:/usr/bin"));
    assert_eq!(image.config.cmd, Some(vec!["python3".to_owned()]));
}
