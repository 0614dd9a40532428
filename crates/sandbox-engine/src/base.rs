//! Bases of environments other than the host: root filesystems built once, content-addressed,
//! shared by every environment naming the same one, and bound read-only as a sandbox's system
//! directories ([`sandbox_runtime::spec::SpawnSpec::system_root`]).
//!
//! Layout: `<environments_dir>/bases/<kind>-<hash>/` holds `rootfs/` (the unpacked root
//! filesystem) and `manifest.json` ([`BaseManifest`]), written last. A base is built aside in
//! `bases/.build-<kind>-<hash>/` and renamed into place; builds of one base are serialized by
//! `flock(2)` on `bases/.lock-<kind>-<hash>`. A run holds a shared `flock` on the base's
//! directory while it uses it ([`hold`]); [`Bases::gc`] removes a base only under an exclusive
//! one taken without waiting, so a base in use is never removed.
//!
//! The one kind today is `debian` ([`DebianBase`]): mmdebstrap `--variant=extract` downloads
//! the packages and their hard dependencies from the mirror (apt checks them against the
//! archive's signed Release file) and unpacks them; no maintainer script, trigger or program
//! of the base runs, on the host or anywhere. The unpacking runs in mmdebstrap's `unshare`
//! mode (own mount, pid, uts and ipc namespaces; as root it keeps the host's user namespace,
//! so file owners are right). The downloaded `.deb`s are kept in `[runtime] apt_cache_dir`
//! for the next build.
//!
//! The `oci` kind ([`OciBase`]) is an OCI image from local disk, imported by `sandbox_oci`
//! (every blob checked against its digest, layers applied with whiteouts, nothing of the image
//! executed; device nodes refused unless `[oci] skip_device_nodes`) into
//! `bases/oci-<first 16 hex of the manifest's sha256>/`: two environments naming the same image
//! share it. An environment's spec names a path, not a digest: install points a link
//! `bases/oci-source-<hash of source and reference>` at `oci-<digest>` ([`Bases::resolve`]) and
//! records the base in the environment's manifest, which is what its runs bind. Under the same
//! layout, locks and collection as `debian`.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::fcntl::{Flock, FlockArg};
use sandbox_core::profile::{DebianBase, Environment, EnvironmentBase, OciBase};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::environment::{io, run_tool, tree_digest, EnvError};

/// The system directories a base provides, each bound read-only at the same path (the
/// merged-/usr links `/bin`, `/sbin`, `/lib`, `/lib64` are copied as links).
pub const BASE_SYSTEM_DIRS: [&str; 5] = ["/usr", "/bin", "/sbin", "/lib", "/lib64"];

/// The Python interpreter of a base, as the sandbox sees it.
pub const BASE_PYTHON: &str = "/usr/bin/python3";

/// What `manifest.json` of an installed base says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BaseManifest {
    /// `<kind>-<hash>`, the directory's name ([`base_id`]).
    pub id: String,
    /// The Debian spec it was built from (a `debian` base).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debian: Option<DebianBase>,
    /// The image it was imported from (an `oci` base).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciImage>,
    /// The Debian architecture, e.g. `amd64`.
    pub architecture: String,
    /// When it was built (RFC 3339, UTC).
    pub installed_at: String,
    /// Every package unpacked, `name=version` (the versions resolved at build time).
    pub packages: Vec<String>,
    /// The `major.minor` of the base's Python, if it has one (read from `/usr/bin/python3`'s
    /// link target, `python3.13`, for an image also its `[oci] python` or config's
    /// `PYTHON_VERSION`: nothing of the base is run).
    pub python_version: Option<String>,
    /// Files in `rootfs/`.
    pub files: u64,
    /// Their total size, in bytes.
    pub bytes: u64,
    /// Hex SHA-256 over the tree (as an environment's), for `verify`.
    pub tree_sha256: String,
}

/// What an `oci` base records of its image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OciImage {
    /// The layout directory or oci-archive it was read from, and the reference asked for.
    pub source: PathBuf,
    /// The `org.opencontainers.image.ref.name` asked for, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// `sha256:<hex>` of the image manifest (the base's content address).
    pub manifest_digest: String,
    /// `sha256:<hex>` of the image config.
    pub config_digest: String,
    /// The layers' digests, lowest first.
    pub layers: Vec<String>,
    /// The Python interpreter inside the image the environment's runs use.
    pub python: String,
    /// Bytes of file content unpacked.
    pub unpacked_bytes: u64,
    /// Device nodes of the layers left out (the sandbox has its own `/dev`).
    pub devices_skipped: u64,
    /// The GNU C library's version (`2.41`), read from its `libc.so.6`'s bytes (its
    /// `release version` string; nothing run), for the wheels' platform ([`python_platform`]);
    /// `None` when the image has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glibc: Option<String>,
}

/// One base directory found under `bases/`, with its manifest when it has a readable one.
#[derive(Debug, Clone)]
pub struct BaseEntry {
    /// `<kind>-<hash>`.
    pub id: String,
    /// Its directory.
    pub path: PathBuf,
    /// Its manifest.
    pub manifest: Option<BaseManifest>,
}

/// The Debian architecture of this host's machine (`amd64`, `arm64`, ...).
pub fn host_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "i386",
        "powerpc64" => "ppc64el",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    }
}

/// `debian-<first 16 hex digits of SHA-256>` over the suite, the sorted package list, the
/// mirror, the architecture and the build method: equal specs share one base.
pub fn base_id(d: &DebianBase) -> String {
    let mut packages = d.packages.clone();
    packages.sort();
    packages.dedup();
    let key = serde_json::json!({
        "suite": d.suite, "packages": packages, "mirror": d.mirror, "architecture": host_architecture(),
        "method": "mmdebstrap-extract", "layout": 2,
    });
    format!("debian-{}", hex::encode(&Sha256::digest(key.to_string().as_bytes())[..8]))
}

/// `oci-source-<first 16 hex digits of SHA-256>` over the image's source path, reference and the
/// architecture: the name of the link to the `oci-<digest>` base imported from it.
pub fn oci_source_id(o: &OciBase) -> String {
    let key = serde_json::json!({ "source": o.source, "reference": o.reference, "architecture": host_architecture(), "layout": 1 });
    format!("oci-source-{}", hex::encode(&Sha256::digest(key.to_string().as_bytes())[..8]))
}

/// The base id of `env`, `None` for the host base. For an `oci` base, the name of its source
/// link ([`oci_source_id`]), which [`Bases::installed`], [`Bases::manifest`] and [`hold`] go
/// through and [`Bases::resolve`] turns into the base's own id.
pub fn base_of(env: &Environment) -> Option<String> {
    match (env.base, &env.debian, &env.oci) {
        (EnvironmentBase::Debian, Some(d), _) => Some(base_id(d)),
        (EnvironmentBase::Oci, _, Some(o)) => Some(oci_source_id(o)),
        _ => None,
    }
}

/// The Python interpreter of `env`'s runs as the sandbox sees it, `None` for the host base:
/// [`BASE_PYTHON`], or an image's `[oci] python`.
pub fn python_of(env: &Environment) -> Option<&str> {
    match (env.base, &env.oci) {
        (EnvironmentBase::Host, _) => None,
        (EnvironmentBase::Oci, Some(o)) => Some(&o.python),
        _ => Some(BASE_PYTHON),
    }
}

/// The bases under one environments directory.
#[derive(Debug, Clone)]
pub struct Bases {
    dir: PathBuf,
}

impl Bases {
    /// The bases of the environments in `environments_dir` (in its `bases/`).
    pub fn new(environments_dir: &Path) -> Self {
        Self { dir: environments_dir.join("bases") }
    }

    /// `bases/`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory of base `id` if it is installed (its manifest exists). The per-run lookup:
    /// nothing is read but one `stat`.
    pub fn installed(&self, id: &str) -> Option<PathBuf> {
        let path = self.dir.join(id);
        path.join("manifest.json").is_file().then_some(path)
    }

    /// The manifest of the installed base `id`.
    /// Errors: [`EnvError::Io`] when it is missing or unreadable.
    pub fn manifest(&self, id: &str) -> Result<BaseManifest, EnvError> {
        let file = self.dir.join(id).join("manifest.json");
        let bytes = fs::read(&file).map_err(io("read", &file))?;
        serde_json::from_slice(&bytes).map_err(|e| EnvError::Io { op: "parse", path: file, source: std::io::Error::other(e) })
    }

    /// The id of the base `id` names: the target of an `oci-source-` link, else `id` itself.
    pub fn resolve(&self, id: &str) -> String {
        match fs::read_link(self.dir.join(id)) {
            Ok(target) if target.components().count() == 1 && matches!(target.components().next(), Some(std::path::Component::Normal(_))) => {
                target.to_string_lossy().into_owned()
            }
            _ => id.to_owned(),
        }
    }

    /// Every base directory present (unfinished builds, source links and lock files excluded),
    /// by id.
    pub fn list(&self) -> Vec<BaseEntry> {
        let Ok(entries) = fs::read_dir(&self.dir) else { return Vec::new() };
        let mut out: Vec<BaseEntry> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let id = e.file_name().to_str()?.to_owned();
                let dir = e.file_type().is_ok_and(|t| t.is_dir());
                (!id.starts_with('.') && dir).then(|| BaseEntry { manifest: self.manifest(&id).ok(), path: e.path(), id })
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// Builds the Debian base `d` unless it is installed (then nothing is done); returns its
    /// directory and manifest. `cache` keeps the downloaded `.deb`s between builds. `progress`
    /// receives one line per step and mmdebstrap's own lines.
    /// Errors: [`EnvError::Installer`] (mmdebstrap missing or failing, e.g. a package that does
    /// not exist in the suite), [`EnvError::Io`]; a failed build leaves nothing behind.
    pub fn install_debian(&self, d: &DebianBase, cache: &Path, progress: &mut dyn FnMut(&str)) -> Result<(PathBuf, BaseManifest), EnvError> {
        let id = base_id(d);
        fs::create_dir_all(&self.dir).map_err(io("create", &self.dir))?;
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o755)).map_err(io("chmod", &self.dir))?;
        let _lock = lock_exclusive(&self.dir.join(format!(".lock-{id}")))?;
        if let Some(path) = self.installed(&id) {
            progress(&format!("base {id} is installed already ({})", path.display()));
            return Ok((path.clone(), self.manifest(&id)?));
        }
        let build = self.dir.join(format!(".build-{id}"));
        if build.exists() {
            progress(&format!("removing an unfinished build at {}", build.display()));
            fs::remove_dir_all(&build).map_err(io("remove", &build))?;
        }
        fs::create_dir(&build).map_err(io("create", &build))?;
        fs::set_permissions(&build, fs::Permissions::from_mode(0o755)).map_err(io("chmod", &build))?;
        let built = self.build_debian(&id, d, cache, &build, progress);
        if built.is_err() {
            let _ = fs::remove_dir_all(&build);
        }
        built
    }

    fn build_debian(&self, id: &str, d: &DebianBase, cache: &Path, build: &Path, progress: &mut dyn FnMut(&str)) -> Result<(PathBuf, BaseManifest), EnvError> {
        let rootfs = build.join("rootfs");
        let versions = build.join("packages.txt");
        let archives = cache.join("archives");
        fs::create_dir_all(&archives).map_err(io("create", &archives))?;
        // Builds sharing the cache copy it in and out: one at a time.
        let _cache_lock = lock_exclusive(&cache.join(".lock"))?;
        progress(&format!("base {id}: Debian {} ({}) from {} with mmdebstrap: {}", d.suite, host_architecture(), d.mirror, d.packages.join(" ")));
        let (q, a, v) = (shell_quote(&archives), shell_quote(&versions), d.suite.as_str());
        let mut cmd = Command::new("mmdebstrap");
        cmd.args(["--mode=unshare", "--variant=extract", "--verbose"])
            .arg(format!("--architectures={}", host_architecture()))
            .arg(format!("--include={}", d.packages.join(",")))
            // The cached .debs are copied in and the new ones out (mmdebstrap's documented
            // sync-in/sync-out hooks); apt downloads only what is missing.
            .arg("--skip=download/empty")
            .arg("--setup-hook=mkdir -p \"$1\"/var/cache/apt/archives/")
            .arg(format!("--setup-hook=sync-in {q} /var/cache/apt/archives/"))
            // The packages unpacked and their versions, read from the archives' control fields
            // (dpkg-deb parses them; nothing in them runs).
            .arg(format!("--extract-hook=for f in $MMDEBSTRAP_ESSENTIAL; do dpkg-deb --show --showformat='${{Package}}=${{Version}}\\n' \"$1/$f\"; done > {a}"))
            .arg(format!("--customize-hook=sync-out /var/cache/apt/archives {q}"))
            .args(["--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/locale/*"])
            .arg(v)
            .arg(&rootfs)
            .arg(format!("deb {} {v} main", d.mirror))
            .arg(format!("deb {} {v}-updates main", d.mirror));
        if d.mirror == "http://deb.debian.org/debian" {
            cmd.arg(format!("deb http://deb.debian.org/debian-security {v}-security main"));
        }
        run_tool("mmdebstrap", cmd, &mut |line: &str| {
            // Its per-file warnings about the absent /dev are noise for an extract.
            if !line.contains("because the /dev directory is missing")
                && !line.contains("because the /sys directory")
                && !line.contains("because the /proc directory")
            {
                progress(line);
            }
        })?;
        progress(&format!("base {id}: making the tree a read-only system root (merged-/usr links, no setuid bits, no special files)"));
        finish_rootfs(&rootfs)?;
        let text = fs::read_to_string(&versions).map_err(io("read", &versions))?;
        let mut packages: Vec<String> = text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect();
        packages.sort();
        let (files, bytes, tree_sha256) = tree_digest(build)?;
        let manifest = BaseManifest {
            id: id.to_owned(),
            debian: Some(d.clone()),
            oci: None,
            architecture: host_architecture().to_owned(),
            installed_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            python_version: python_version(&rootfs),
            packages,
            files,
            bytes,
            tree_sha256,
        };
        let target = self.publish(build, id, &manifest)?;
        progress(&format!(
            "base {id} installed: {} packages, {} MiB, python {}",
            manifest.packages.len(),
            bytes >> 20,
            manifest.python_version.as_deref().unwrap_or("-")
        ));
        Ok((target, manifest))
    }

    /// Writes `manifest.json` into the finished build directory `build` (the manifest comes last:
    /// a base without one is not installed) and renames it into place as base `id`; returns its
    /// directory.
    /// Errors: [`EnvError::Io`] naming the file or the target.
    fn publish(&self, build: &Path, id: &str, manifest: &BaseManifest) -> Result<PathBuf, EnvError> {
        let file = build.join("manifest.json");
        fs::write(&file, serde_json::to_vec_pretty(manifest).expect("JSON serializes")).map_err(io("write", &file))?;
        let target = self.dir.join(id);
        fs::rename(build, &target).map_err(io("rename", &target))?;
        Ok(target)
    }

    /// Imports the OCI image `o` unless a base of the same image manifest is installed, and
    /// points `o`'s source link ([`oci_source_id`]) at it; returns its directory and manifest.
    /// The image is inspected first (index, manifest and config, verified: cheap), so an image
    /// imported already is not unpacked again. Blocking (seconds per hundred MB): call it from a
    /// blocking thread in async code. `progress` receives one line per step and per layer.
    /// Errors: [`EnvError::Image`] naming what the importer refused (a digest mismatch, a path
    /// escaping the root, a link escaping it, a device node, ...), [`EnvError::Installer`] when
    /// the image has no usable Python, [`EnvError::Io`]; a failed import leaves nothing behind.
    pub fn install_oci(&self, o: &OciBase, progress: &mut dyn FnMut(&str)) -> Result<(PathBuf, BaseManifest), EnvError> {
        let opts = sandbox_oci::ImportOptions { reference: o.reference.clone(), skip_device_nodes: o.skip_device_nodes, ..Default::default() };
        let image_err = |source| EnvError::Image { source_path: o.source.clone(), source };
        progress(&format!(
            "image {}{}: reading its index, manifest and config",
            o.source.display(),
            o.reference.as_ref().map(|r| format!(" ({r})")).unwrap_or_default()
        ));
        let image = sandbox_oci::inspect(&o.source, &opts).map_err(image_err)?;
        let id = format!("oci-{}", &image.manifest_digest.hex()[..16]);
        fs::create_dir_all(&self.dir).map_err(io("create", &self.dir))?;
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o755)).map_err(io("chmod", &self.dir))?;
        let _lock = lock_exclusive(&self.dir.join(format!(".lock-{id}")))?;
        let installed = match self.installed(&id) {
            Some(path) => {
                progress(&format!("base {id} (image {}) is installed already ({})", image.manifest_digest, path.display()));
                // This environment's interpreter, which may not be the one of the environment
                // that imported the image.
                let mut manifest = self.manifest(&id)?;
                manifest.python_version = Some(check_python(&path.join("rootfs"), o, &image)?);
                if let Some(m) = manifest.oci.as_mut() {
                    m.python.clone_from(&o.python);
                }
                (path, manifest)
            }
            None => {
                let build = self.dir.join(format!(".build-{id}"));
                if build.exists() {
                    progress(&format!("removing an unfinished build at {}", build.display()));
                    fs::remove_dir_all(&build).map_err(io("remove", &build))?;
                }
                fs::create_dir(&build).map_err(io("create", &build))?;
                fs::set_permissions(&build, fs::Permissions::from_mode(0o755)).map_err(io("chmod", &build))?;
                let built = self.build_oci(&id, o, &opts, &build, progress);
                if built.is_err() {
                    let _ = fs::remove_dir_all(&build);
                }
                built?
            }
        };
        // The source link, replaced atomically: runs looking it up meanwhile find the old base
        // or the new one.
        let link = self.dir.join(oci_source_id(o));
        let temp = self.dir.join(format!(".link-{}-{}", oci_source_id(o), std::process::id()));
        let _ = fs::remove_file(&temp);
        std::os::unix::fs::symlink(&id, &temp).map_err(io("symlink", &temp))?;
        fs::rename(&temp, &link).map_err(io("rename", &link))?;
        Ok(installed)
    }

    fn build_oci(
        &self,
        id: &str,
        o: &OciBase,
        opts: &sandbox_oci::ImportOptions,
        build: &Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<(PathBuf, BaseManifest), EnvError> {
        let rootfs = build.join("rootfs");
        let imported = sandbox_oci::import_with_progress(&o.source, &rootfs, opts, &mut |p| {
            if let sandbox_oci::Progress::Layer { index, count, digest, size_bytes } = p {
                progress(&format!("base {id}: layer {}/{count} {digest} ({} MiB)", index + 1, size_bytes >> 20));
            }
        })
        .map_err(|source| EnvError::Image { source_path: o.source.clone(), source })?;
        let image = &imported.image;
        progress(&format!("base {id}: making the tree a read-only system root (merged-/usr links, no setuid bits, no special files)"));
        finish_rootfs(&rootfs)?;
        let python_version = check_python(&rootfs, o, image)?;
        let (files, bytes, tree_sha256) = tree_digest(build)?;
        let manifest = BaseManifest {
            id: id.to_owned(),
            debian: None,
            oci: Some(OciImage {
                source: o.source.clone(),
                reference: o.reference.clone(),
                manifest_digest: image.manifest_digest.to_string(),
                config_digest: image.config_digest.to_string(),
                layers: image.layers.iter().map(ToString::to_string).collect(),
                python: o.python.clone(),
                unpacked_bytes: imported.unpacked_bytes,
                devices_skipped: imported.devices_skipped,
                glibc: glibc_version(&rootfs),
            }),
            architecture: host_architecture().to_owned(),
            installed_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            packages: Vec::new(),
            python_version: Some(python_version),
            files,
            bytes,
            tree_sha256,
        };
        let target = self.publish(build, id, &manifest)?;
        progress(&format!(
            "base {id} installed: {} layers, {files} files, {} MiB, python {} ({})",
            image.layers.len(),
            bytes >> 20,
            manifest.python_version.as_deref().unwrap_or("-"),
            o.python
        ));
        Ok((target, manifest))
    }

    /// Recomputes the tree digest of base `id` and compares it with its manifest.
    /// Errors: [`EnvError::Tampered`] naming what differs; [`EnvError::Io`] when not installed.
    pub fn check_integrity(&self, id: &str) -> Result<BaseManifest, EnvError> {
        let id = &self.resolve(id);
        let manifest = self.manifest(id)?;
        let path = self.dir.join(id);
        let (files, bytes, digest) = tree_digest(&path)?;
        if (files, bytes, digest.as_str()) != (manifest.files, manifest.bytes, manifest.tree_sha256.as_str()) {
            return Err(EnvError::Tampered {
                name: format!("base {id}"),
                path,
                detail: format!(
                    "manifest: {} files, {} bytes, sha256 {}; now: {files} files, {bytes} bytes, sha256 {digest}",
                    manifest.files, manifest.bytes, manifest.tree_sha256
                ),
            });
        }
        Ok(manifest)
    }

    /// Removes every base whose id is not in `keep` and that no run holds ([`hold`]), and the
    /// unfinished builds no install is working on. Returns the directories removed and those
    /// kept because a run holds them.
    /// Errors: [`EnvError::Io`] on a removal that fails.
    pub fn gc(&self, keep: &[String]) -> Result<(Vec<PathBuf>, Vec<PathBuf>), EnvError> {
        let (mut removed, mut busy) = (Vec::new(), Vec::new());
        let keep: Vec<String> = keep.iter().map(|k| self.resolve(k)).collect();
        for b in self.list() {
            if keep.contains(&b.id) {
                continue;
            }
            match remove_unless_held(&b.path)? {
                true => removed.push(b.path),
                false => busy.push(b.path),
            }
        }
        // Source links go with their base (a link whose base is kept stays: another
        // configuration sharing the directory may name it).
        if let Ok(entries) = fs::read_dir(&self.dir) {
            for e in entries.filter_map(Result::ok) {
                if e.file_type().is_ok_and(|t| t.is_symlink()) && !e.path().exists() {
                    fs::remove_file(e.path()).map_err(io("remove", &e.path()))?;
                }
            }
        }
        if let Ok(entries) = fs::read_dir(&self.dir) {
            for e in entries.filter_map(Result::ok) {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(id) = name.strip_prefix(".build-") else { continue };
                // An install in progress holds the base's lock.
                let lock = self.dir.join(format!(".lock-{id}"));
                let Ok(file) = fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock) else { continue };
                if let Ok(_held) = Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                    fs::remove_dir_all(e.path()).map_err(io("remove", &e.path()))?;
                    removed.push(e.path());
                }
            }
        }
        Ok((removed, busy))
    }
}

/// A shared `flock(2)` on the directory `dir` (a base or an environment) for as long as the
/// value lives: [`Bases::gc`] and `Environments::gc` never remove a directory while one is held.
/// Errors: the directory cannot be opened (it was removed).
pub fn hold(dir: &Path) -> std::io::Result<Flock<fs::File>> {
    let file = fs::File::open(dir)?;
    Flock::lock(file, FlockArg::LockShared).map_err(|(_, e)| e.into())
}

/// Removes `dir` if no [`hold`] is on it (an exclusive `flock` taken without waiting), renaming
/// it aside first so that a run looking it up meanwhile finds nothing. Returns whether it was
/// removed.
/// Errors: [`EnvError::Io`].
pub(crate) fn remove_unless_held(dir: &Path) -> Result<bool, EnvError> {
    let file = fs::File::open(dir).map_err(io("open", dir))?;
    let Ok(_lock) = Flock::lock(file, FlockArg::LockExclusiveNonblock) else { return Ok(false) };
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let aside = dir.with_file_name(format!(".gc-{name}"));
    fs::rename(dir, &aside).map_err(io("rename", dir))?;
    fs::remove_dir_all(&aside).map_err(io("remove", &aside))?;
    Ok(true)
}

fn lock_exclusive(path: &Path) -> Result<Flock<fs::File>, EnvError> {
    let file = fs::OpenOptions::new().create(true).truncate(false).write(true).open(path).map_err(io("open", path))?;
    Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| EnvError::Io { op: "flock", path: path.to_owned(), source: e.into() })
}

fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// Makes an unpacked tree a system root: the merged-/usr links (`bin -> usr/bin`, ...) where
/// the packages did not ship them, the CA bundle `/etc/ssl/certs/ca-certificates.crt` that
/// ca-certificates' maintainer script would have written (the concatenation of its
/// `/usr/share/ca-certificates/mozilla/*.crt`), setuid and setgid bits dropped, and anything
/// but files, directories and symlinks (device nodes, fifos, sockets) removed. Touches data
/// only: nothing of the tree runs.
fn finish_rootfs(rootfs: &Path) -> Result<(), EnvError> {
    let mozilla = rootfs.join("usr/share/ca-certificates/mozilla");
    let bundle = rootfs.join("etc/ssl/certs/ca-certificates.crt");
    if mozilla.is_dir() && fs::symlink_metadata(&bundle).is_err() {
        let mut certs: Vec<PathBuf> = fs::read_dir(&mozilla)
            .map_err(io("read", &mozilla))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "crt") && p.symlink_metadata().is_ok_and(|m| m.is_file()))
            .collect();
        certs.sort();
        let mut text = Vec::new();
        for c in &certs {
            text.extend(fs::read(c).map_err(io("read", c))?);
            if !text.ends_with(b"\n") {
                text.push(b'\n');
            }
        }
        let dir = bundle.parent().expect("below etc/ssl");
        fs::create_dir_all(dir).map_err(io("create", dir))?;
        fs::write(&bundle, text).map_err(io("write", &bundle))?;
    }
    for dir in ["bin", "sbin", "lib", "lib64"] {
        let link = rootfs.join(dir);
        if fs::symlink_metadata(&link).is_err() && rootfs.join("usr").join(dir).is_dir() {
            std::os::unix::fs::symlink(format!("usr/{dir}"), &link).map_err(io("symlink", &link))?;
        }
    }
    fn walk(dir: &Path) -> Result<(), EnvError> {
        for e in fs::read_dir(dir).map_err(io("read", dir))? {
            let path = e.map_err(io("read", dir))?.path();
            let meta = fs::symlink_metadata(&path).map_err(io("stat", &path))?;
            let ft = meta.file_type();
            if ft.is_symlink() {
                continue;
            }
            if ft.is_block_device() || ft.is_char_device() || ft.is_fifo() || ft.is_socket() {
                fs::remove_file(&path).map_err(io("remove", &path))?;
                continue;
            }
            if meta.mode() & 0o6000 != 0 {
                fs::set_permissions(&path, fs::Permissions::from_mode(meta.mode() & 0o1777)).map_err(io("chmod", &path))?;
            }
            if ft.is_dir() {
                walk(&path)?;
            }
        }
        Ok(())
    }
    walk(rootfs)
}

/// `3.13` when `rootfs/usr/bin/python3` links to `python3.13`.
fn python_version(rootfs: &Path) -> Option<String> {
    let target = fs::read_link(rootfs.join("usr/bin/python3")).ok()?;
    version_of_name(target.file_name()?.to_str()?)
}

/// `3.13` of `python3.13`.
fn version_of_name(name: &str) -> Option<String> {
    let version = name.strip_prefix("python")?;
    (version.split('.').count() == 2 && version.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))).then(|| version.to_owned())
}

/// Resolves `path` inside the unpacked image at `rootfs` as the sandbox's kernel will (the
/// image's root as `/`, `..` at the root staying there, at most 40 links), one component at a
/// time: the host is asked only about paths made of directories already found to be real ones,
/// so no link of the image is ever followed on the host. Returns the final path inside the
/// image when it is a regular file, with the names the last component had along its chain of
/// links (`python3`, `python3.13`).
fn resolve_in(rootfs: &Path, path: &str) -> Option<(String, Vec<String>)> {
    let split = |p: &str| p.split('/').filter(|c| !c.is_empty() && *c != ".").map(str::to_owned).collect::<Vec<_>>();
    let mut todo: std::collections::VecDeque<String> = split(path).into();
    let (mut done, mut names, mut hops): (Vec<String>, Vec<String>, u32) = (Vec::new(), Vec::new(), 0);
    while let Some(part) = todo.pop_front() {
        if part == ".." {
            done.pop();
            continue;
        }
        let mut host = rootfs.to_owned();
        host.extend(&done);
        host.push(&part);
        let meta = fs::symlink_metadata(&host).ok()?;
        let last = todo.is_empty();
        if last {
            names.push(part.clone());
        }
        if meta.file_type().is_symlink() {
            hops += 1;
            if hops > 40 {
                return None;
            }
            let target = fs::read_link(&host).ok()?;
            let target = target.to_str()?;
            if target.starts_with('/') {
                done.clear();
            }
            for c in split(target).into_iter().rev() {
                todo.push_front(c);
            }
        } else if last {
            done.push(part);
            return meta.is_file().then(|| (format!("/{}", done.join("/")), names));
        } else if meta.is_dir() {
            done.push(part);
        } else {
            return None;
        }
    }
    None
}

/// Checks that the image has `o.python` (a regular file, maybe through links, under the system
/// directories a base provides, [`resolve_in`]) and returns its `major.minor`: `[oci] python_version`, else
/// from the link names on the way (`python3 -> python3.13`), else the config's
/// `PYTHON_VERSION`. Nothing is run.
/// Errors: [`EnvError::Installer`] naming the fix (the `python3` on the image's `PATH`, or
/// `python_version`).
fn check_python(rootfs: &Path, o: &OciBase, image: &sandbox_oci::Image) -> Result<String, EnvError> {
    let refuse = |message: String| EnvError::Installer { tool: "oci", message };
    let Some((real, names)) = resolve_in(rootfs, &o.python) else {
        let on_path = image
            .config
            .env_var("PATH")
            .unwrap_or("/usr/local/bin:/usr/bin:/bin")
            .split(':')
            .map(|d| format!("{}/python3", d.trim_end_matches('/')))
            .find(|p| resolve_in(rootfs, p).is_some());
        let hint = match on_path {
            Some(p) => format!("it has {p} on its PATH: set python = {p:?} in the environment's [oci] table"),
            None => "it has no python3 on its PATH either: use an image with Python".to_owned(),
        };
        return Err(refuse(format!("the image has no interpreter at {} (a file, maybe through links inside the image); {hint}", o.python)));
    };
    if !BASE_SYSTEM_DIRS.iter().any(|d| real.starts_with(&format!("{d}/"))) {
        return Err(refuse(format!("the image's {} is {real}, outside the directories a base provides ({})", o.python, BASE_SYSTEM_DIRS.join(", "))));
    }
    if let Some(v) = &o.python_version {
        return Ok(v.clone());
    }
    if let Some(v) = names.iter().find_map(|n| version_of_name(n)) {
        return Ok(v);
    }
    let from_env = image.config.env_var("PYTHON_VERSION").and_then(|v| {
        let mut parts = v.split('.');
        let (major, minor) = (parts.next()?, parts.next()?);
        let minor: String = minor.chars().take_while(char::is_ascii_digit).collect();
        version_of_name(&format!("python{major}.{minor}"))
    });
    from_env.ok_or_else(|| {
        refuse(format!(
            "cannot tell the version of the image's {} without running it (no link to python3.N, no PYTHON_VERSION in its config): \
             set python_version = \"3.N\" in the environment's [oci] table",
            o.python
        ))
    })
}

/// The version of the GNU C library in an unpacked image (`2.41`): the `release version 2.N`
/// string in the bytes of its `libc.so.6`, found by [`resolve_in`] (no host link followed).
fn glibc_version(rootfs: &Path) -> Option<String> {
    const CANDIDATES: [&str; 6] = [
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/aarch64-linux-gnu/libc.so.6",
        "/usr/lib64/libc.so.6",
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/aarch64-linux-gnu/libc.so.6",
        "/lib64/libc.so.6",
    ];
    let (path, _) = CANDIDATES.iter().find_map(|c| resolve_in(rootfs, c))?;
    let file = fs::File::open(rootfs.join(path.trim_start_matches('/'))).ok()?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, 64 << 20), &mut bytes).ok()?;
    let needle = b"release version 2.";
    let at = bytes.windows(needle.len()).position(|w| w == needle)? + needle.len();
    let minor: String = bytes[at..].iter().take(3).take_while(|b| b.is_ascii_digit()).map(|&b| char::from(b)).collect();
    (!minor.is_empty()).then(|| format!("2.{minor}"))
}

/// The uv `--python-platform` matching a base's C library: `x86_64-manylinux_2_<minor>` from
/// the `libc6=2.<minor>-...` of its packages or an image's [`OciImage::glibc`] (capped at 2.40,
/// the newest uv names), or `manylinux_2_28` when neither tells.
pub fn python_platform(m: &BaseManifest) -> String {
    let arch = match m.architecture.as_str() {
        "arm64" => "aarch64",
        _ => "x86_64",
    };
    let minor = m
        .packages
        .iter()
        .find_map(|p| p.strip_prefix("libc6=2."))
        .or_else(|| m.oci.as_ref()?.glibc.as_deref()?.strip_prefix("2."))
        .and_then(|v| v.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<u32>().ok())
        .map_or(28, |n| n.min(40));
    format!("{arch}-manylinux_2_{minor}")
}

#[cfg(test)]
mod tests;
