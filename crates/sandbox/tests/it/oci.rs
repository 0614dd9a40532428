//! Environments on an `oci` base: an OCI image layout written here from the Debian trixie base
//! the debian tests build (its root filesystem as the lower layer) and an upper layer with a
//! whiteout, an opaque directory and an added file; `sandbox env install` imports it and a run
//! sees exactly the merged tree. Hostile layers (a digest that does not match, `../`, a link
//! escaping the root, a device node) are refused by `env install`, naming the problem. A
//! representative subset of the isolation and limit tests passes on the oci base as on the host.

use std::fs;
use std::sync::OnceLock;

use serde_json::json;
use sha2::{Digest, Sha256};

use super::*;

/// The test profile on the oci base (`py-small`'s limits).
const OCI: &str = "py-oci-small";

const LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";

/// Where the test image's layout lives: shared between test runs like the environments, and
/// rebuilt when the Debian base it is made from changes.
pub fn oci_image_dir() -> PathBuf {
    Path::new(&test_environments_dir()).join("oci-test-image")
}

/// The `[environments.oci-test]` and `[profiles.py-oci-small]` of the tests' configuration.
pub fn oci_test_config() -> String {
    format!(
        "\n[environments.oci-test]\ndescription = \"the test OCI image (oci.rs)\"\nbase = \"oci\"\n\
         python = [\"numpy==2.4.6\"]\npython_imports = [\"numpy\"]\n[environments.oci-test.oci]\nsource = {:?}\n\
         reference = \"test\"\n\n[profiles.py-oci-small]\nlanguage = \"python\"\nenvironment = \"oci-test\"\n[profiles.py-oci-small.limits]\n\
         memory_max_bytes = 268435456\npids_max = 64\ntimeout_ms = 10000\ngrace_ms = 1000\n",
        oci_image_dir().display().to_string()
    )
}

/// One tar entry of a hand-made layer, its path written into the header as is.
enum E<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8]),
    Symlink(&'a str, &'a str),
    Char(&'a str),
}

fn tar_of(entries: &[E<'_>]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        let mut header = tar::Header::new_gnu();
        header.set_mtime(1_700_000_000);
        let (path, kind, mode, data, link): (&str, tar::EntryType, u32, &[u8], Option<&str>) = match *entry {
            E::Dir(path) => (path, tar::EntryType::Directory, 0o755, b"", None),
            E::File(path, data) => (path, tar::EntryType::Regular, 0o644, data, None),
            E::Symlink(path, target) => (path, tar::EntryType::Symlink, 0o777, b"", Some(target)),
            E::Char(path) => (path, tar::EntryType::Char, 0o666, b"", None),
        };
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(data.len() as u64);
        let gnu = header.as_gnu_mut().expect("a GNU header");
        gnu.name[..path.len()].copy_from_slice(path.as_bytes());
        if let Some(link) = link {
            gnu.linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
        header.set_cksum();
        builder.append(&header, data).expect("tar into memory");
    }
    builder.into_inner().expect("tar into memory")
}

/// A tar of the tree at `root`, links kept as links.
fn tar_of_tree(root: &Path) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    builder.append_dir_all(".", root).expect("tar the tree");
    builder.into_inner().expect("tar into memory")
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn blob(dir: &Path, media_type: &str, bytes: &[u8]) -> Value {
    let digest = sha256(bytes);
    fs::write(dir.join("blobs/sha256").join(digest.trim_start_matches("sha256:")), bytes).unwrap();
    json!({ "mediaType": media_type, "digest": digest, "size": bytes.len() })
}

/// Writes an OCI image layout (image-layout.md) at `dir` of one image for this machine's
/// architecture: uncompressed tar `layers`, lowest first, named `reference`; the layers'
/// descriptors.
fn write_layout(dir: &Path, layers: &[Vec<u8>], reference: &str) -> Vec<Value> {
    fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let config = json!({
        "architecture": arch, "os": "linux",
        "config": { "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "Cmd": ["python3"] },
        "rootfs": { "type": "layers", "diff_ids": layers.iter().map(|l| sha256(l)).collect::<Vec<_>>() },
    });
    let config = blob(dir, "application/vnd.oci.image.config.v1+json", &serde_json::to_vec(&config).unwrap());
    let descriptors: Vec<Value> = layers.iter().map(|l| blob(dir, LAYER_TAR, l)).collect();
    let manifest = json!({ "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": config, "layers": descriptors });
    let mut manifest = blob(dir, "application/vnd.oci.image.manifest.v1+json", &serde_json::to_vec(&manifest).unwrap());
    manifest["annotations"] = json!({ "org.opencontainers.image.ref.name": reference });
    let index = json!({ "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [manifest] });
    fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    descriptors
}

/// The root filesystem of the Debian base `python-3.13-analysis` sits on (built by the debian
/// tests' helper), and its id.
fn debian_rootfs() -> (String, PathBuf) {
    debian_environment_installed();
    let envs = PathBuf::from(test_environments_dir());
    let out = sandbox(&["env", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    let id = list
        .lines()
        .find(|l| l.starts_with("python-3.13-analysis "))
        .and_then(|l| l.split_whitespace().find(|w| w.starts_with("debian-")))
        .unwrap_or_else(|| panic!("the base of python-3.13-analysis in env list:\n{list}"))
        .to_owned();
    let rootfs = envs.join("bases").join(&id).join("rootfs");
    assert!(rootfs.join("usr/bin/python3").symlink_metadata().is_ok(), "{}", rootfs.display());
    (id, rootfs)
}

/// A host directory the test image's `/etc` links to, holding files a run takes from a base's
/// `/etc` (`mime.types`, `ld.so.cache`) with a secret in them.
fn host_etc() -> PathBuf {
    Path::new(&test_environments_dir()).join("oci-host-etc")
}

const HOST_ETC_SECRET: &str = "host-etc-secret-7d1f";

/// The upper layer of the test image over the Debian root: deletes the lower's
/// `/usr/lib/python3.13/this.py` (a whiteout), makes `/usr/share/zoneinfo` opaque (only its
/// entry of this layer stays) and adds `/usr/share/oci-test/added.txt`. And a hostile part:
/// `/etc` becomes a link to a host directory ([`host_etc`]), which the host must never follow.
fn upper_layer() -> Vec<u8> {
    let host_etc = Box::leak(host_etc().display().to_string().into_boxed_str());
    tar_of(&[
        E::Symlink("etc", host_etc),
        E::File("usr/lib/python3.13/.wh.this.py", b""),
        E::Dir("usr/share/zoneinfo/"),
        E::File("usr/share/zoneinfo/.wh..wh..opq", b""),
        E::File("usr/share/zoneinfo/only-from-the-upper-layer", b"UTC0\n"),
        E::Dir("usr/share/oci-test/"),
        E::File("usr/share/oci-test/added.txt", b"added by the upper layer\n"),
    ])
}

/// Writes the test image's layout (once per Debian base: a stamp names the base it was made
/// from) and installs the `oci-test` environment on it, once per test process.
pub fn oci_environment_installed() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let (id, rootfs) = debian_rootfs();
        let dir = oci_image_dir();
        fs::create_dir_all(host_etc()).unwrap();
        for f in ["mime.types", "ld.so.cache"] {
            fs::write(host_etc().join(f), HOST_ETC_SECRET).unwrap();
        }
        let id = format!("{id} (upper layer 2)");
        if fs::read_to_string(dir.join("made-from")).ok().as_deref() != Some(id.as_str()) {
            let build = dir.with_file_name(format!(".oci-test-image-{}", std::process::id()));
            let _ = fs::remove_dir_all(&build);
            write_layout(&build, &[tar_of_tree(&rootfs), upper_layer()], "test");
            fs::write(build.join("made-from"), &id).unwrap();
            let _ = fs::remove_dir_all(&dir);
            fs::rename(&build, &dir).unwrap();
        }
        let out = sandbox(&["env", "install", "oci-test"]).output().unwrap();
        assert!(out.status.success(), "sandbox env install oci-test: {}", String::from_utf8_lossy(&out.stderr));
    });
}

#[test]
fn an_oci_base_run_sees_exactly_the_merged_tree_of_the_images_layers() {
    oci_environment_installed();
    let code = "import os, sys\nprint(sys.executable, sys.version.split()[0].rsplit('.', 1)[0])\n\
                print(os.path.exists('/usr/lib/python3.13/this.py'), os.path.exists('/usr/lib/python3.13/antigravity.py'))\n\
                print(sorted(os.listdir('/usr/share/zoneinfo')))\nprint(open('/usr/share/oci-test/added.txt').read(), end='')\n\
                print(sorted(os.listdir('/')))\nprint(open('/etc/passwd').read().splitlines()[1].split(':')[0])\n\
                print(os.path.exists('/etc/mime.types'), os.path.exists('/etc/ld.so.cache'))\n\
                import numpy\nprint(numpy.__version__, numpy.__file__.startswith('/opt/sandbox/env/'), int(numpy.arange(5).sum()))";
    let r = run(OCI, code, &[]);
    assert_eq!(r.status(), "ok", "{r:?}");
    let lines: Vec<&str> = r.stdout().lines().collect();
    // The image's own CPython 3.13 (the lower layer's), not the host's 3.11.
    assert_eq!(lines[0], "/usr/bin/python3 3.13", "{r:?}");
    // The whiteout removed one file of the lower layer; its neighbours stay.
    assert_eq!(lines[1], "False True", "{r:?}");
    // The opaque directory holds only the upper layer's entries.
    assert_eq!(lines[2], "['only-from-the-upper-layer']", "{r:?}");
    assert_eq!(lines[3], "added by the upper layer", "{r:?}");
    assert_eq!(lines[4], "['bin', 'code', 'dev', 'etc', 'lib', 'lib64', 'opt', 'proc', 'sbin', 'tmp', 'usr', 'workspace']", "{r:?}");
    assert_eq!(lines[5], "sandbox", "the synthesized /etc/passwd: {r:?}");
    // The image's `etc -> <host directory>`: the host followed no link of the image, so none of
    // the /etc files a run takes from its base came from the host.
    assert_eq!(lines[6], "False False", "{r:?}");
    assert!(!r.stdout().contains(HOST_ETC_SECRET), "{r:?}");
    // The environment's packages, installed by uv for the image's Python 3.13 (a compiled
    // extension: the platform and ABI match), never run on the host.
    assert_eq!(lines[7], "2.4.6 True 10", "{r:?}");
    // env verify: the environment's and the base's files against their manifests, then the
    // imports inside a sandbox on the image.
    let out = sandbox(&["env", "verify", "oci-test"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.contains("base oci-") && stderr.contains("every package imports inside the sandbox"), "{stderr}");

    // The base records the image: its manifest digest is the base's address.
    let index: Value = serde_json::from_slice(&fs::read(oci_image_dir().join("index.json")).unwrap()).unwrap();
    let digest = index["manifests"][0]["digest"].as_str().unwrap().to_owned();
    let base = Path::new(&test_environments_dir()).join("bases").join(format!("oci-{}", &digest[7..23]));
    let manifest: Value = serde_json::from_slice(&fs::read(base.join("manifest.json")).expect("the base's manifest")).unwrap();
    assert_eq!(manifest["oci"]["manifestDigest"], digest.as_str(), "{manifest}");
    assert_eq!(manifest["oci"]["layers"].as_array().map(Vec::len), Some(2), "{manifest}");
    assert_eq!(manifest["oci"]["reference"], "test", "{manifest}");
    assert_eq!(manifest["pythonVersion"], "3.13", "{manifest}");
    // The C library's version, read from libc.so.6's bytes (trixie's is 2.41), for uv's platform.
    assert!(manifest["oci"]["glibc"].as_str().is_some_and(|v| v.starts_with("2.") && v[2..].parse::<u32>().is_ok_and(|m| m >= 36)), "{manifest}");
    let list = String::from_utf8_lossy(&sandbox(&["env", "list"]).output().unwrap().stdout).into_owned();
    let row = format!("oci-{}", &digest[7..23]);
    assert!(list.lines().any(|l| l.starts_with(&row) && l.contains("installed") && l.contains("2 layers") && l.ends_with("oci-test")), "{list}");
}

/// Installs an environment on the image at `layout` (written by `write`) into a fresh
/// environments directory: `sandbox env install`'s exit code and stderr.
fn install_image(write: impl FnOnce(&Path), oci_extra: &str) -> (i32, String, PathBuf) {
    let dir = tempfile::Builder::new().prefix("oci-").tempdir_in(&env().dir).unwrap().keep();
    let layout = dir.join("layout");
    write(&layout);
    let config = dir.join("config.toml");
    fs::write(
        &config,
        format!(
            "[runtime]\nenvironments_dir = {:?}\n[environments.img]\nbase = \"oci\"\n[environments.img.oci]\nsource = {:?}\n{oci_extra}",
            dir.join("environments").display().to_string(),
            layout.display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new(bin()).arg("--config").arg(&config).arg("--data-dir").arg(&env().data).args(["env", "install", "img"]).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned(), dir.join("environments"))
}

/// `env install` of an image whose single layer is `entries` fails with exit code 2 and a message
/// holding `want`, leaving no base behind.
#[track_caller]
fn check_refused(layout: impl FnOnce(&Path), want: &str) {
    let (code, stderr, envs) = install_image(layout, "");
    assert_eq!(code, 2, "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("sandbox: error: cannot import the OCI image ") && last.contains(want), "wanted {want:?} in: {stderr}");
    let left: Vec<String> = fs::read_dir(envs.join("bases")).unwrap().filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(left.iter().all(|n| n.starts_with(".lock-")), "nothing but lock files stays: {left:?}");
}

fn one_layer(entries: &'static [E<'static>]) -> impl FnOnce(&Path) {
    move |dir| {
        write_layout(dir, &[tar_of(entries)], "img");
    }
}

#[test]
fn env_install_refuses_a_layer_whose_digest_does_not_match() {
    check_refused(
        |dir| {
            let layers = write_layout(dir, &[tar_of(&[E::Dir("usr/"), E::File("usr/a", b"honest")])], "img");
            // The same length, other bytes: the size matches, the hash does not.
            let digest = layers[0]["digest"].as_str().unwrap().to_owned();
            let path = dir.join("blobs/sha256").join(&digest[7..]);
            let mut bytes = fs::read(&path).unwrap();
            let at = bytes.windows(6).position(|w| w == b"honest").unwrap();
            bytes[at..at + 6].copy_from_slice(b"forged");
            fs::write(&path, bytes).unwrap();
        },
        "has content hashing to sha256:",
    );
}

#[test]
fn env_install_refuses_a_path_escaping_the_root() {
    check_refused(one_layer(&[E::File("../escaped", b"x")]), "entry \"../escaped\" escapes the root");
    check_refused(one_layer(&[E::Dir("usr/"), E::File("usr/../../escaped", b"x")]), "escapes the root");
}

#[test]
fn env_install_refuses_a_symlink_pointing_out_of_the_root() {
    check_refused(one_layer(&[E::Dir("usr/"), E::Symlink("usr/shadow", "../../etc/shadow")]), "symbolic link \"usr/shadow\" points out of the root");
    check_refused(one_layer(&[E::Symlink("etc", "/../../../etc")]), "symbolic link \"etc\" points out of the root");
}

#[test]
fn env_install_refuses_a_device_node_unless_told_to_leave_them_out() {
    const DEV: &[E<'static>] = &[E::Dir("dev/"), E::Char("dev/kmsg")];
    check_refused(one_layer(DEV), "entry \"dev/kmsg\" is a device node");
    // Its twin: with skip_device_nodes the layers pass, and this image then lacks a Python.
    let (code, stderr, envs) = install_image(one_layer(DEV), "skip_device_nodes = true\n");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("the image has no interpreter at /usr/bin/python3"), "{stderr}");
    assert!(!stderr.contains("device node"), "{stderr}");
    assert!(
        fs::read_dir(envs.join("bases")).unwrap().filter_map(Result::ok).all(|e| e.file_name().to_string_lossy().starts_with('.')),
        "nothing half-built stays"
    );
}

#[test]
fn env_install_names_the_images_python_when_it_is_elsewhere() {
    let (code, stderr, _) = install_image(
        one_layer(&[
            E::Dir("usr/"),
            E::Dir("usr/local/"),
            E::Dir("usr/local/bin/"),
            E::File("usr/local/bin/python3.12", b""),
            E::Symlink("usr/local/bin/python3", "python3.12"),
        ]),
        "",
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("it has /usr/local/bin/python3 on its PATH: set python = \"/usr/local/bin/python3\""), "{stderr}");
}

// The isolation subset, on the oci base: the same programs and the same expected outcomes as
// attacks.rs and limits.rs on the host base.

#[test]
fn oci_base_root_filesystem_is_read_only() {
    oci_environment_installed();
    attacks::root_filesystem_is_read_only_on(OCI);
}

#[test]
fn oci_base_host_secret_file_is_invisible() {
    oci_environment_installed();
    attacks::host_secret_file_is_invisible_on(OCI);
}

#[test]
fn oci_base_no_host_paths_leak_through_mountinfo_or_cmdline() {
    oci_environment_installed();
    attacks::no_host_paths_leak_through_mountinfo_or_cmdline_on(OCI);
}

#[test]
fn oci_base_dangerous_syscalls_fail_with_eperm() {
    oci_environment_installed();
    attacks::dangerous_syscalls_fail_with_eperm_on(OCI);
    attacks::new_namespaces_via_clone_are_refused_on(OCI);
    attacks::unlisted_syscalls_fail_with_enosys_on(OCI);
}

#[test]
fn oci_base_host_processes_and_pid1_are_invisible() {
    oci_environment_installed();
    attacks::host_processes_and_pid1_are_invisible_on(OCI);
}

#[test]
fn oci_base_cannot_become_root_and_holds_no_capabilities() {
    oci_environment_installed();
    attacks::cannot_become_root_and_holds_no_capabilities_on(OCI);
}

#[test]
fn oci_base_landlock_blocks_paths_outside_the_rules() {
    oci_environment_installed();
    attacks::landlock_blocks_paths_outside_the_rules_even_through_proc_on(OCI);
}

#[test]
fn oci_base_host_loopback_services_are_unreachable() {
    oci_environment_installed();
    attacks::host_loopback_services_are_unreachable_on(OCI);
    attacks::only_loopback_interface_exists_on(OCI);
}

#[test]
fn oci_base_memory_past_the_limit_is_memory_limit() {
    oci_environment_installed();
    limits::memory_past_the_limit_is_memory_limit_on(OCI);
}

#[test]
fn oci_base_fork_bomb_is_contained_and_host_still_forks() {
    oci_environment_installed();
    limits::fork_bomb_is_contained_and_host_still_forks_on(OCI);
}

/// A tiny image with an interpreter file (never run: nothing of an image runs at install).
fn tiny_image(dir: &Path, note: &'static [u8]) {
    write_layout(
        dir,
        &[tar_of(&[
            E::Dir("usr/"),
            E::Dir("usr/bin/"),
            E::File("usr/bin/python3.12", b"not run"),
            E::Symlink("usr/bin/python3", "python3.12"),
            E::File("usr/note", note),
        ])],
        "img",
    );
}

/// The oci-archive of a layout directory (`tar -C dir -cf out .`).
fn archive(dir: &Path, out: &Path) {
    let mut builder = tar::Builder::new(fs::File::create(out).unwrap());
    builder.append_dir_all(".", dir).unwrap();
    builder.finish().unwrap();
}

fn bases_in(envs: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(envs.join("bases"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// Environments naming one image (by one path or by two: a layout directory and an oci-archive
/// of it) share one base; replacing the image at
/// the path moves the environment to the new image's base on the next install; `env gc` removes
/// the bases and source links no environment names.
#[test]
fn oci_bases_are_shared_by_image_follow_the_source_and_are_collected() {
    let dir = tempfile::Builder::new().prefix("oci-share-").tempdir_in(&env().dir).unwrap().keep();
    let envs = dir.join("environments");
    // a: a layout directory; b: an oci-archive of the same image.
    let (a, b) = (dir.join("a"), dir.join("b.tar"));
    tiny_image(&a, b"one");
    archive(&a, &b);
    let runtime = format!("[runtime]\nenvironments_dir = {:?}\n", envs.display().to_string());
    let decl = |name: &str, src: &Path| format!("[environments.{name}]\nbase = \"oci\"\n[environments.{name}.oci]\nsource = {:?}\n", src.display().to_string());
    let config = dir.join("config.toml");
    fs::write(&config, format!("{runtime}{}{}{}", decl("x", &a), decl("y", &a), decl("z", &b))).unwrap();
    let cli = |config: &Path, args: &[&str]| Command::new(bin()).arg("--config").arg(config).arg("--data-dir").arg(&env().data).args(args).output().unwrap();
    for name in ["x", "y", "z"] {
        let out = cli(&config, &["env", "install", name]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let bases = bases_in(&envs);
    assert_eq!(bases.len(), 3, "one base and the source links of a and b: {bases:?}");
    let base = bases.iter().find(|n| !n.starts_with("oci-source-")).unwrap().clone();
    assert!(base.starts_with("oci-") && base.len() == 4 + 16, "{bases:?}");
    let list = String::from_utf8_lossy(&cli(&config, &["env", "list"]).stdout).into_owned();
    assert!(list.lines().any(|l| l.starts_with(&base) && l.contains("1 layers") && l.contains("3.12") && l.ends_with("x, y, z")), "{list}");

    // Another image in b.tar: z moves to its base on install; x and y keep theirs.
    tiny_image(&dir.join("two"), b"two");
    archive(&dir.join("two"), &b);
    let out = cli(&config, &["env", "install", "z"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success() && stderr.contains("the image is now oci-") && stderr.contains("reinstalling"), "{stderr}");
    let now = bases_in(&envs);
    assert_eq!(now.iter().filter(|n| !n.starts_with("oci-source-")).count(), 2, "{now:?}");
    // And a third image at a's path, installed for y only: x stays on the base it was built on
    // (runs and verify follow its manifest, not the path's link), so gc keeps that base.
    let y_only = dir.join("y-only.toml");
    fs::write(&y_only, format!("{runtime}{}", decl("y", &a))).unwrap();
    fs::remove_dir_all(&a).unwrap();
    tiny_image(&a, b"three");
    assert!(cli(&y_only, &["env", "install", "y"]).status.success());
    let out = cli(&config, &["env", "verify", "x"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("base {base}: ")), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(cli(&config, &["env", "gc"]).status.success());
    assert!(bases_in(&envs).contains(&base), "x's base stays: {:?}", bases_in(&envs));
    assert!(cli(&config, &["env", "remove", "y"]).status.success());
    fs::remove_dir_all(&a).unwrap();
    tiny_image(&a, b"one");
    assert!(cli(&config, &["env", "install", "y"]).status.success());

    // Only x declared: gc removes z's base and b's link, and keeps x's.
    let only_x = dir.join("only-x.toml");
    fs::write(&only_x, format!("{runtime}{}", decl("x", &a))).unwrap();
    assert!(cli(&config, &["env", "remove", "z"]).status.success());
    let out = cli(&only_x, &["env", "gc"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let left = bases_in(&envs);
    assert_eq!(left.len(), 2, "x's base and a's link (y's environment still names the same base): {left:?}");
    assert!(left.contains(&base), "{left:?}");
    let out = cli(&config, &["env", "verify", "x"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("base {base}: ")), "{}", String::from_utf8_lossy(&out.stderr));

    // A run needs only the base: the image may go once imported.
    fs::remove_dir_all(&a).unwrap();
    let out = cli(&only_x, &["env", "install", "x"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success() && stderr.contains(&format!("keeping the installed base {base}")) && stderr.contains("installed already"), "{stderr}");
}
