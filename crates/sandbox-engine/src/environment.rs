//! Package environments on the host: install (`sandbox env install`), look up, verify the
//! integrity of, and remove the directories that profiles bind read-only into their runs.
//!
//! Layout: `<dir>/<name>-<spec hash>/` holds `python/` (a uv `--target` site directory, with
//! bytecode compiled so read-only imports are fast), `node/node_modules/` (npm), and
//! `manifest.json` ([`Manifest`]), written last. An installation is built aside in
//! `<dir>/.build-<name>-<hash>/` and renamed into place, so a run sees a whole environment or
//! none. The directory name carries the hash of the spec, so changing a pin makes a new
//! environment and leaves the old one for running executions until `sandbox env remove`.
//! Installs of one name are serialized by `flock(2)` on `<dir>/.lock-<name>`.
//!
//! Nothing of the packages runs on the host: wheels only (no build scripts), npm with
//! `--ignore-scripts`, and the one step that imports package code (matplotlib's font cache)
//! runs in a sandbox through [`BuildSandbox`], with the build directory bound read-only as the
//! environment. With locks ([`sandbox_core::lock`]) uv installs with `--require-hashes` and npm
//! with `npm ci`, so a changed or substituted archive fails the install.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sandbox_core::profile::{Environment, RuntimeConfig};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What `manifest.json` of an installed environment says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// The environment's name.
    pub name: String,
    /// Hex SHA-256 (first 16 digits) of the spec and the runtime it was built for.
    pub spec_hash: String,
    /// The spec as declared.
    pub spec: Environment,
    /// When it was installed (RFC 3339, UTC).
    pub installed_at: String,
    /// Python distributions present, `name==version`, as installed (the closure uv resolved).
    pub python_installed: Vec<String>,
    /// npm packages present, `name@version`.
    pub npm_installed: Vec<String>,
    /// Files in the environment (the manifest excluded).
    pub files: u64,
    /// Their total size, in bytes.
    pub bytes: u64,
    /// Hex SHA-256 over every file's path, mode and content and every symlink's target, in path
    /// order: `verify` recomputes it to find any change since install.
    pub tree_sha256: String,
    /// The base it sits on (`debian-<hash>` or `oci-<digest>`, under `bases/`); absent for the
    /// host base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
}

/// Why an install, lookup or removal failed.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// No `[environments.NAME]` is declared.
    #[error("no environment named {0:?} is declared")]
    Unknown(String),
    /// A file system step failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// On what.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// An installer (uv, npm) failed or could not be started.
    #[error("{tool} failed: {message}")]
    Installer {
        /// `uv` or `npm`.
        tool: &'static str,
        /// Its exit status and last lines of output.
        message: String,
    },
    /// A downloaded archive does not match the hash its lock records.
    #[error("{package} does not match its hash in the {tool} lock (changed upstream, or the lock was altered): {detail}")]
    HashMismatch {
        /// `uv` or `npm`.
        tool: &'static str,
        /// `name==version` or `name@version`.
        package: String,
        /// What the installer said.
        detail: String,
    },
    /// A step that runs package code failed inside its sandbox.
    #[error("{step} failed in the sandbox: {message}")]
    Sandboxed {
        /// The step, e.g. `matplotlib font cache`.
        step: &'static str,
        /// Why.
        message: String,
    },
    /// The OCI image of an `oci` base was refused or could not be read: the source says what
    /// (a blob whose digest does not match, a path or link escaping the root, a device node, ...).
    #[error("cannot import the OCI image {}", source_path.display())]
    Image {
        /// The layout directory or oci-archive.
        source_path: PathBuf,
        /// What the importer refused.
        #[source]
        source: sandbox_oci::ImportError,
    },
    /// The installed files differ from the manifest.
    #[error("environment {name:?} at {} was changed after install: {detail}", path.display())]
    Tampered {
        /// The environment.
        name: String,
        /// Its directory.
        path: PathBuf,
        /// What differs.
        detail: String,
    },
}

pub(crate) fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> EnvError + 'a {
    move |source| EnvError::Io { op, path: path.to_owned(), source }
}

/// Runs the install steps that execute package code inside a sandbox, as an execution runs:
/// namespaces, an unprivileged uid, landlock, seccomp, no network, cgroup limits.
pub trait BuildSandbox {
    /// Runs `code` in `language` (Python, or TypeScript on the runtime's default Node.js) as an
    /// execution of a profile in environment `name`, with `build` bound read-only where the
    /// environment goes ([`sandbox_core::profile::ENV_MOUNT`], its `node/node_modules` also at
    /// `/node_modules`, as in a run); returns the workspace files it left that match the globs
    /// `outputs`, by workspace-relative name.
    /// Errors: why it could not run, or how it ended when not `ok`, as text.
    fn run(&self, name: &str, build: &Path, language: sandbox_core::Language, code: &str, outputs: &[&str]) -> Result<BTreeMap<String, Vec<u8>>, String>;
}

/// The result of [`Environments::install`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installed {
    /// It was already installed with this spec: nothing was done.
    Already(PathBuf, Manifest),
    /// It was built now.
    Built(PathBuf, Manifest),
}

/// What [`Environments::gc`] did.
#[derive(Debug, Clone, Default)]
pub struct Gc {
    /// Directories removed (environment versions, bases, unfinished base builds).
    pub removed: Vec<PathBuf>,
    /// Directories that would have gone but a run holds them.
    pub in_use: Vec<PathBuf>,
}

/// One declared environment's state on this host.
#[derive(Debug, Clone)]
pub struct EnvStatus {
    /// The directory of the current spec, with its manifest, if installed.
    pub current: Option<(PathBuf, Manifest)>,
    /// Directories of the same name built from older specs.
    pub stale: Vec<PathBuf>,
}

/// The installed environments under one directory.
#[derive(Debug, Clone)]
pub struct Environments {
    dir: PathBuf,
}

impl Environments {
    /// Environments under `dir` (usually `<data_dir>/environments`, or `[runtime] environments_dir`).
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// Where environments are looked up for `rt` and `data_dir`, in words for a message: the
    /// directory and why there (`[runtime] environments_dir`, or the data directory's own).
    pub fn place(rt: &RuntimeConfig, data_dir: &Path) -> String {
        let dir = Self::for_runtime(rt, data_dir).dir().display().to_string();
        match rt.environments_dir {
            Some(_) => format!("{dir} ([runtime] environments_dir)"),
            None => format!("{dir}, the data directory's (each --data-dir has its own; [runtime] environments_dir shares one)"),
        }
    }

    /// The directory for `rt` and `data_dir`: `[runtime] environments_dir`, else `<data_dir>/environments`.
    pub fn for_runtime(rt: &RuntimeConfig, data_dir: &Path) -> Self {
        Self::new(rt.environments_dir.clone().unwrap_or_else(|| data_dir.join("environments")))
    }

    /// The directory holding them.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bases of these environments (`<dir>/bases/`).
    pub fn bases(&self) -> crate::base::Bases {
        crate::base::Bases::new(&self.dir)
    }

    /// The first ancestor of the directory (or the directory itself) that others may not
    /// search (mode o+x): the container's unprivileged init could not bind an environment below it.
    pub fn unsearchable_ancestor(&self) -> Option<PathBuf> {
        self.dir.ancestors().find(|a| fs::metadata(a).is_ok_and(|m| m.mode() & 0o001 == 0)).map(Path::to_owned)
    }

    /// First 16 hex digits of SHA-256 over the spec and the interpreters it is built for: any
    /// change to a pin, the Python binary or the Node binary makes a different environment.
    /// The locks count too (their SHA-256): a changed lock is a new environment.
    /// An environment on a base other than the host's is keyed by the base's id instead of the
    /// host's interpreters.
    pub fn spec_hash(env: &Environment, rt: &RuntimeConfig) -> String {
        let mut key = serde_json::json!({
            "python": env.python, "npm": env.npm, "interpreter": rt.python, "node": rt.node, "layout": 2,
        });
        // Environments with npm packages have a compile cache since layout 4; the others keep
        // their hash.
        if !env.npm.is_empty() {
            key["layout"] = 4.into();
        }
        if let Some(base) = crate::base::base_of(env) {
            key = serde_json::json!({ "python": env.python, "npm": env.npm, "base": base, "layout": 3 });
        }
        // An image's interpreter chooses what the packages are resolved for.
        if let Some(o) = &env.oci {
            key["oci_python"] = serde_json::json!([o.python, o.python_version]);
        }
        // Keys only when there is a lock: an environment without one keeps its old hash.
        for (k, lock) in [("python_lock", &env.locks.python), ("npm_lock", &env.locks.npm)] {
            if let Some(text) = lock {
                key[k] = hex::encode(Sha256::digest(text.as_bytes())).into();
            }
        }
        let digest = Sha256::digest(key.to_string().as_bytes());
        hex::encode(&digest[..8])
    }

    fn path_of(&self, name: &str, hash: &str) -> PathBuf {
        self.dir.join(format!("{name}-{hash}"))
    }

    /// The installed directory of `name` for its current spec, if it is installed (its manifest
    /// exists). Nothing is hashed: this is the per-run lookup.
    pub fn installed(&self, name: &str, env: &Environment, rt: &RuntimeConfig) -> Option<PathBuf> {
        let path = self.path_of(name, &Self::spec_hash(env, rt));
        path.join("manifest.json").is_file().then_some(path)
    }

    /// The installed directory of the environment `config` declares as `name`; `None` when it
    /// is not declared or its current spec is not installed.
    pub fn installed_in(&self, config: &sandbox_core::Config, name: &str) -> Option<PathBuf> {
        config.environments.get(name).and_then(|env| self.installed(name, env, &config.runtime))
    }

    /// `name`'s current installation (with its manifest) and the directories of older specs.
    pub fn status(&self, name: &str, env: &Environment, rt: &RuntimeConfig) -> EnvStatus {
        let hash = Self::spec_hash(env, rt);
        let current = self.installed(name, env, rt).and_then(|p| read_manifest(&p).ok().map(|m| (p, m)));
        let stale = self.versions(name).into_iter().filter(|p| !p.ends_with(format!("{name}-{hash}"))).collect();
        EnvStatus { current, stale }
    }

    /// Every installed directory of `name`, whatever its spec.
    fn versions(&self, name: &str) -> Vec<PathBuf> {
        let Ok(entries) = fs::read_dir(&self.dir) else { return Vec::new() };
        let mut out: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix(name))
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            })
            .map(|e| e.path())
            .collect();
        out.sort();
        out
    }

    /// Installs `name` unless its current spec is installed already (then nothing is done).
    /// Python packages: `uv pip install --target` for `[runtime] python`, wheels only, bytecode
    /// compiled, `--require-hashes` against the lock if there is one; npm packages: `npm ci`
    /// against the lock if there is one, else `npm install`, both `--ignore-scripts`. Steps that
    /// run package code run in `sandbox`. `progress` receives one line per step and the
    /// installers' own output lines. Works offline once built: a run needs nothing but the
    /// directory.
    /// Then it removes the other versions of `name` no run holds, unless the directory is
    /// `[runtime] environments_dir` (perhaps shared with configurations declaring `name`
    /// otherwise: those versions stay for `gc`).
    /// Errors: [`EnvError`]; a failed build leaves nothing but its `.build-` directory, which
    /// the next install removes.
    pub fn install(
        &self,
        name: &str,
        env: &Environment,
        rt: &RuntimeConfig,
        sandbox: &dyn BuildSandbox,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Installed, EnvError> {
        fs::create_dir_all(&self.dir).map_err(io("create", &self.dir))?;
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o755)).map_err(io("chmod", &self.dir))?;
        let lock_path = self.dir.join(format!(".lock-{name}"));
        let lock_file = fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(io("open", &lock_path))?;
        let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| EnvError::Io {
            op: "flock",
            path: lock_path.clone(),
            source: e.into(),
        })?;
        let hash = Self::spec_hash(env, rt);
        let target = self.path_of(name, &hash);
        if let Some(path) = self.installed(name, env, rt) {
            let manifest = read_manifest(&path)?;
            if let Some(o) = env.oci.as_ref() {
                // The spec names the image by path: what is there now may be another image. A
                // run needs only the base, so an image no longer there keeps what is installed.
                let base = match self.bases().install_oci(o, progress) {
                    Ok((_, base)) => Some(base),
                    Err(EnvError::Image { source: e @ sandbox_oci::ImportError::Source { .. }, .. }) => {
                        progress(&format!("warning: {e}; keeping the installed base {}", manifest.base.as_deref().unwrap_or("-")));
                        None
                    }
                    Err(e) => return Err(e),
                };
                if let Some(base) = base.filter(|b| manifest.base.as_deref() != Some(b.id.as_str())) {
                    progress(&format!("{name} was installed on base {}; the image is now {}: reinstalling", manifest.base.as_deref().unwrap_or("-"), base.id));
                    if !crate::base::remove_unless_held(&path)? {
                        return Err(EnvError::Io {
                            op: "replace",
                            path,
                            source: std::io::Error::other("a running execution uses it: try again when it is over"),
                        });
                    }
                }
            }
        }
        if let Some(path) = self.installed(name, env, rt) {
            let manifest = read_manifest(&path)?;
            progress(&format!("{name} is installed already ({}); nothing to do", path.display()));
            return Ok(Installed::Already(path, manifest));
        }
        let base = self.install_base(env, rt, progress)?;
        let build = self.dir.join(format!(".build-{name}-{hash}"));
        if build.exists() {
            progress(&format!("removing an unfinished build at {}", build.display()));
            fs::remove_dir_all(&build).map_err(io("remove", &build))?;
        }
        fs::create_dir(&build).map_err(io("create", &build))?;
        // The sandbox's unprivileged init binds it.
        fs::set_permissions(&build, fs::Permissions::from_mode(0o755)).map_err(io("chmod", &build))?;
        let built = self.build(name, env, rt, base.as_ref(), &hash, &build, &target, sandbox, progress);
        if built.is_err() {
            // Nothing half-built stays behind (the next install would remove it anyway).
            let _ = fs::remove_dir_all(&build);
        }
        built
    }

    /// Installs the base of `env` unless it is installed (nothing for the host base); its
    /// manifest.
    /// Errors: as [`crate::base::Bases::install_debian`] and [`crate::base::Bases::install_oci`].
    pub fn install_base(&self, env: &Environment, rt: &RuntimeConfig, progress: &mut dyn FnMut(&str)) -> Result<Option<crate::base::BaseManifest>, EnvError> {
        use sandbox_core::profile::EnvironmentBase;
        Ok(match (env.base, &env.debian, &env.oci) {
            (EnvironmentBase::Debian, Some(d), _) => Some(self.bases().install_debian(d, &rt.apt_cache_dir, progress)?.1),
            (EnvironmentBase::Oci, _, Some(o)) => Some(self.bases().install_oci(o, progress)?.1),
            _ => None,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        &self,
        name: &str,
        env: &Environment,
        rt: &RuntimeConfig,
        base: Option<&crate::base::BaseManifest>,
        hash: &str,
        build: &Path,
        target: &Path,
        sandbox: &dyn BuildSandbox,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Installed, EnvError> {
        let steps = 2 + usize::from(!env.python.is_empty()) + usize::from(!env.npm.is_empty());
        let mut step = 0;
        let mut say = |progress: &mut dyn FnMut(&str), what: String| {
            step += 1;
            progress(&format!("[{step}/{steps}] {what}"));
        };
        if !env.python.is_empty() {
            let locked = if env.locks.python.is_some() { " (every hash checked against the lock)" } else { "" };
            let site = build.join("python");
            let mut cmd = Command::new(&rt.uv);
            cmd.args(["pip", "install", "--no-config"]);
            match base {
                None => {
                    say(progress, format!("Python packages for {} with uv: {}{locked}", rt.python.display(), env.python.join(" ")));
                    // Compiling bytecode runs the host interpreter's compiler over the files, never
                    // their code (a target directory is no site directory: no `.pth` runs either).
                    cmd.arg("--python").arg(&rt.python).args(["--compile-bytecode"]);
                }
                Some(b) => {
                    // For the base's interpreter, which never runs on the host: uv resolves for its
                    // version and C library and unpacks the wheels; no bytecode is compiled (that
                    // would take an interpreter of the same version).
                    let version = b.python_version.as_deref().ok_or_else(|| EnvError::Installer {
                        tool: "uv",
                        message: format!("base {} has no Python (a debian base: add python3 to its packages)", b.id),
                    })?;
                    let platform = crate::base::python_platform(b);
                    say(progress, format!("Python packages for Python {version} of base {} ({platform}) with uv: {}{locked}", b.id, env.python.join(" ")));
                    cmd.args(["--python-version", version, "--python-platform", &platform]);
                }
            }
            cmd.arg("--target").arg(&site).args(["--only-binary", ":all:", "--link-mode", "copy"]);
            // Beside the build, not in it (the lock is in the spec hash already); under the
            // install's flock, so the name is ours.
            let lock_file = self.dir.join(format!(".python-lock-{name}-{hash}.txt"));
            match &env.locks.python {
                Some(lock) => {
                    fs::write(&lock_file, lock.as_bytes()).map_err(io("write", &lock_file))?;
                    cmd.arg("--require-hashes").arg("-r").arg(&lock_file);
                }
                None => {
                    cmd.args(&env.python);
                }
            }
            let ran = run_tool("uv", cmd, progress);
            let _ = fs::remove_file(&lock_file);
            ran.map_err(|e| {
                hash_mismatch("uv", e, |tail| {
                    let at = tail.find("Hash mismatch for `")? + "Hash mismatch for `".len();
                    Some(tail[at..].split('`').next()?.to_owned())
                })
            })?;
        }
        if !env.npm.is_empty() {
            let locked = if env.locks.npm.is_some() { " (npm ci: the lock's tree, every integrity checked)" } else { "" };
            say(progress, format!("npm packages: {}{locked}", env.npm.join(" ")));
            let node = build.join("node");
            fs::create_dir(&node).map_err(io("create", &node))?;
            let package_json = node.join("package.json");
            fs::write(&package_json, package_json_of(name, env)).map_err(io("write", &package_json))?;
            let mut cmd = Command::new(&rt.npm);
            match &env.locks.npm {
                Some(lock) => {
                    // `npm ci`: exactly the lock's tree, each tarball checked against its integrity.
                    let lock_path = node.join("package-lock.json");
                    fs::write(&lock_path, lock.as_bytes()).map_err(io("write", &lock_path))?;
                    cmd.args(["ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--no-update-notifier"]);
                }
                None => {
                    cmd.args(["install", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--no-update-notifier", "--save-exact"]);
                }
            }
            cmd.arg("--prefix").arg(&node).current_dir(&node);
            let lock = env.locks.npm.as_deref().unwrap_or("{}");
            run_tool("npm", cmd, progress).map_err(|e| {
                hash_mismatch("npm", e, |tail| {
                    let at = tail.find("wanted ")? + "wanted ".len();
                    let wanted = tail[at..].split_whitespace().next()?;
                    sandbox_core::lock::npm_package_with_integrity(lock, wanted).map(|(n, v)| format!("{n}@{v}"))
                })
            })?;
        }
        say(progress, "checking and recording what was installed".into());
        make_world_readable(build)?;
        // Bytecode for what has none: the packages, and a base's standard library that its
        // packaging left uncompiled (Debian compiles it in a maintainer script, which a base
        // never runs; OCI images usually ship it compiled, and a tree without one has nothing).
        if let Some(b) = base {
            let stdlib = b.python_version.as_ref().and_then(|v| self.bases().installed(&b.id).map(|dir| dir.join("rootfs").join(format!("usr/lib/python{v}"))));
            let stdlib_uncompiled = stdlib.is_some_and(|d| d.is_dir() && !d.join("__pycache__").is_dir());
            if !env.python.is_empty() || stdlib_uncompiled {
                compile_bytecode(name, build, sandbox, progress)?;
                make_world_readable(build)?;
            }
        }
        if !env.npm.is_empty() {
            match self.unsearchable_ancestor() {
                // The cache only speeds imports up: the environment works without it, and the
                // warning below says what keeps runs from mounting it.
                Some(a) => {
                    progress(&format!("    Node.js compile cache: skipped ({} is not searchable by others: no sandbox can mount the build)", a.display()))
                }
                None => {
                    node_compile_cache(name, env, build, sandbox, progress)?;
                    make_world_readable(build)?;
                }
            }
        }
        if build.join("python").join("matplotlib").is_dir() {
            matplotlib_font_cache(name, build, sandbox, progress)?;
            make_world_readable(build)?;
        }
        let (files, bytes, tree_sha256) = tree_digest(build)?;
        let manifest = Manifest {
            name: name.to_owned(),
            spec_hash: hash.to_owned(),
            spec: env.clone(),
            installed_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            python_installed: python_dists(&build.join("python")),
            npm_installed: npm_packages(&build.join("node").join("node_modules")),
            files,
            bytes,
            tree_sha256,
            base: base.map(|b| b.id.clone()),
        };
        let manifest_path = build.join("manifest.json");
        fs::write(&manifest_path, serde_json::to_vec_pretty(&manifest).expect("JSON serializes")).map_err(io("write", &manifest_path))?;
        fs::set_permissions(&manifest_path, fs::Permissions::from_mode(0o444)).map_err(io("chmod", &manifest_path))?;
        say(progress, format!("switching in {}", target.display()));
        if target.exists() {
            // A directory without a manifest: an older, interrupted layout. Nothing runs from it.
            fs::remove_dir_all(target).map_err(io("remove", target))?;
        }
        fs::rename(build, target).map_err(io("rename", target))?;
        progress(&format!("{name} installed: {} files, {} MiB at {}", manifest.files, manifest.bytes >> 20, target.display()));
        if let Some(a) = self.unsearchable_ancestor() {
            progress(&format!(
                "warning: {} is not searchable by others (mode o+x), so sandboxes cannot mount this environment; \
                 chmod o+x it or move [runtime] environments_dir",
                a.display()
            ));
        }
        // The older versions of this name go, unless a run still uses one; but not from
        // `[runtime] environments_dir`, which configurations declaring the name differently (or
        // nodes on another build, whose built-in declaration differs) may share: there the other
        // version may be theirs, current, and `sandbox env gc`, asked for, removes it.
        for old in self.versions(name).into_iter().filter(|p| p != target) {
            if rt.environments_dir.is_some() {
                progress(&format!(
                    "kept the other version {} ([runtime] environments_dir may be shared with a configuration that declares it; \
                     `sandbox env gc` removes it)",
                    old.display()
                ));
                continue;
            }
            match crate::base::remove_unless_held(&old) {
                Ok(true) => progress(&format!("removed the older version {}", old.display())),
                Ok(false) => progress(&format!("kept the older version {} (a run uses it; `sandbox env gc` removes it later)", old.display())),
                Err(e) => progress(&format!("warning: cannot remove the older version {}: {e}", old.display())),
            }
        }
        Ok(Installed::Built(target.to_owned(), manifest))
    }

    /// Produces locks for `env`'s pins (what `sandbox env lock` writes): `uv pip compile
    /// --generate-hashes` for `[runtime] python`, wheels only (the hashes of every wheel of each
    /// pinned version), and `npm install --package-lock-only --ignore-scripts` (nothing is
    /// installed, no package code runs). Each is checked against the pins: a Python lock that
    /// needs more than `python` lists means the pins are not the whole closure. For an
    /// environment on a base, `base` is its manifest: the lock is for the base's Python version
    /// and C library.
    /// Errors: [`EnvError::Installer`] with the installer's output or the disagreement.
    pub fn lock(
        name: &str,
        env: &Environment,
        rt: &RuntimeConfig,
        base: Option<&crate::base::BaseManifest>,
        progress: &mut dyn FnMut(&str),
    ) -> Result<sandbox_core::lock::Locks, EnvError> {
        let scratch = std::env::temp_dir().join(format!("sandbox-env-lock-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&scratch);
        // Created anew, 0700, never through whatever another user put at this name (EEXIST).
        fs::DirBuilder::new().mode(0o700).create(&scratch).map_err(io("create", &scratch))?;
        let locked = Self::lock_in(name, env, rt, base, &scratch, progress);
        let _ = fs::remove_dir_all(&scratch);
        locked
    }

    fn lock_in(
        name: &str,
        env: &Environment,
        rt: &RuntimeConfig,
        base: Option<&crate::base::BaseManifest>,
        scratch: &Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<sandbox_core::lock::Locks, EnvError> {
        let mut locks = sandbox_core::lock::Locks::default();
        if !env.python.is_empty() {
            let interpreter = match base {
                Some(b) => format!("Python {} of base {}", b.python_version.as_deref().unwrap_or("-"), b.id),
                None => rt.python.display().to_string(),
            };
            progress(&format!("Python: uv pip compile --generate-hashes for {interpreter}: {}", env.python.join(" ")));
            let (input, output) = (scratch.join("requirements.in"), scratch.join("python-lock.txt"));
            fs::write(&input, env.python.join("\n") + "\n").map_err(io("write", &input))?;
            let mut cmd = Command::new(&rt.uv);
            cmd.args(["pip", "compile", "--no-config", "--generate-hashes", "--only-binary", ":all:", "--no-header", "--no-annotate", "--quiet"]);
            match base.map(|b| (b.python_version.as_deref(), crate::base::python_platform(b))) {
                None => cmd.arg("--python").arg(&rt.python),
                Some((Some(version), platform)) => cmd.args(["--python-version", version, "--python-platform", &platform]),
                Some((None, _)) => return Err(EnvError::Installer { tool: "uv", message: "the base has no Python".into() }),
            };
            cmd.arg(&input).arg("-o").arg(&output);
            run_tool("uv", cmd, progress)?;
            let text = fs::read_to_string(&output).map_err(io("read", &output))?;
            let text = format!("# Lock of environment {name} (`sandbox env lock {name}`: uv pip compile --generate-hashes, wheels only).\n{text}");
            sandbox_core::lock::check_python_lock(&env.python, &text)
                .map_err(|m| EnvError::Installer { tool: "uv", message: format!("the lock disagrees with the pins: {m}") })?;
            locks.python = Some(text.into());
        }
        if !env.npm.is_empty() {
            progress(&format!("npm: package-lock.json for {}", env.npm.join(" ")));
            let node = scratch.join("node");
            fs::create_dir(&node).map_err(io("create", &node))?;
            let package_json = node.join("package.json");
            fs::write(&package_json, package_json_of(name, env)).map_err(io("write", &package_json))?;
            let mut cmd = Command::new(&rt.npm);
            cmd.args(["install", "--package-lock-only", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--no-update-notifier", "--save-exact"])
                .arg("--prefix")
                .arg(&node)
                .current_dir(&node);
            run_tool("npm", cmd, progress)?;
            let lock_path = node.join("package-lock.json");
            let text = fs::read_to_string(&lock_path).map_err(io("read", &lock_path))?;
            sandbox_core::lock::check_npm_lock(&env.npm, &text)
                .map_err(|m| EnvError::Installer { tool: "npm", message: format!("the lock disagrees with the pins: {m}") })?;
            locks.npm = Some(text.into());
        }
        Ok(locks)
    }

    /// Recomputes the installed tree's digest and compares it with the manifest.
    /// Errors: [`EnvError::Tampered`] naming what differs; [`EnvError::Unknown`] if not installed.
    pub fn check_integrity(&self, name: &str, env: &Environment, rt: &RuntimeConfig) -> Result<(PathBuf, Manifest), EnvError> {
        let path = self.installed(name, env, rt).ok_or_else(|| EnvError::Unknown(name.to_owned()))?;
        let manifest = read_manifest(&path)?;
        let (files, bytes, digest) = tree_digest(&path)?;
        if (files, bytes, digest.as_str()) != (manifest.files, manifest.bytes, manifest.tree_sha256.as_str()) {
            return Err(EnvError::Tampered {
                name: name.to_owned(),
                path,
                detail: format!(
                    "manifest: {} files, {} bytes, sha256 {}; now: {files} files, {bytes} bytes, sha256 {digest}",
                    manifest.files, manifest.bytes, manifest.tree_sha256
                ),
            });
        }
        Ok((path, manifest))
    }

    /// Garbage collection (`sandbox env gc`): removes the versions of each environment `config`
    /// declares other than its current spec, then every base that neither a declared environment
    /// nor any environment still installed here names, skipping whatever a run holds
    /// ([`crate::base::hold`]). Environments of names `config` does not declare are left alone
    /// (another configuration may share the directory).
    /// Errors: [`EnvError::Io`] on a removal that fails.
    pub fn gc(&self, config: &sandbox_core::Config) -> Result<Gc, EnvError> {
        let mut report = Gc::default();
        for (name, env) in &config.environments {
            for old in self.status(name, env, &config.runtime).stale {
                match crate::base::remove_unless_held(&old)? {
                    true => report.removed.push(old),
                    false => report.in_use.push(old),
                }
            }
        }
        let mut keep: Vec<String> = config.environments.values().filter_map(crate::base::base_of).collect();
        if let Ok(entries) = fs::read_dir(&self.dir) {
            for e in entries.filter_map(Result::ok) {
                if let Ok(Some(base)) = read_manifest(&e.path()).map(|m| m.base) {
                    keep.push(base);
                }
            }
        }
        let (removed, in_use) = self.bases().gc(&keep)?;
        report.removed.extend(removed);
        report.in_use.extend(in_use);
        Ok(report)
    }

    /// Removes every installed version of `name` (and an unfinished build). A run that has it
    /// mounted sees its files disappear: remove environments when no profile uses them.
    /// Returns the directories removed.
    /// Errors: [`EnvError::Io`].
    pub fn remove(&self, name: &str) -> Result<Vec<PathBuf>, EnvError> {
        let mut removed = self.versions(name);
        if let Ok(entries) = fs::read_dir(&self.dir) {
            let prefix = format!(".build-{name}-");
            removed.extend(entries.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().starts_with(&prefix)).map(|e| e.path()));
        }
        for p in &removed {
            fs::remove_dir_all(p).map_err(io("remove", p))?;
        }
        Ok(removed)
    }
}

/// The `package.json` an environment's npm packages are installed (and locked) from.
fn package_json_of(name: &str, env: &Environment) -> Vec<u8> {
    let deps: serde_json::Map<String, serde_json::Value> =
        env.npm.iter().filter_map(|p| sandbox_core::profile::split_npm_pin(p)).map(|(n, v)| (n.to_owned(), serde_json::Value::String(v.to_owned()))).collect();
    let package = serde_json::json!({ "name": format!("sandbox-env-{name}"), "private": true, "dependencies": deps });
    serde_json::to_vec_pretty(&package).expect("JSON serializes")
}

/// The base the environment installed at `dir` was built on (its manifest's `base`).
pub(crate) fn base_of_installed(dir: &Path) -> Option<String> {
    read_manifest(dir).ok()?.base
}

fn read_manifest(path: &Path) -> Result<Manifest, EnvError> {
    let file = path.join("manifest.json");
    let bytes = fs::read(&file).map_err(io("read", &file))?;
    serde_json::from_slice(&bytes).map_err(|e| EnvError::Io { op: "parse", path: file, source: std::io::Error::other(e) })
}

/// Where the prebuilt matplotlib font cache lives in an environment; the Python harness copies it
/// into the run's writable `MPLCONFIGDIR`, so no run spends ~300 ms rebuilding it.
pub const MPL_CACHE_DIR: &str = "mplconfig";

/// Builds matplotlib's font cache in a sandbox: the environment's interpreter and packages
/// (the build directory bound read-only where the environment goes, so the cache names
/// `/opt/sandbox/env/python/...` paths), the cache written to the sandbox's workspace and
/// returned. Only `fontlist-v<version>.json` files, as data, are copied into the build.
fn matplotlib_font_cache(name: &str, build: &Path, sandbox: &dyn BuildSandbox, progress: &mut dyn FnMut(&str)) -> Result<(), EnvError> {
    let cache = build.join(MPL_CACHE_DIR);
    let code = "import os\nos.environ['MPLCONFIGDIR'] = '/workspace/mplconfig'\nimport matplotlib.font_manager\n";
    let files = sandbox
        .run(name, build, sandbox_core::Language::Python, code, &["mplconfig/*.json"])
        .map_err(|message| EnvError::Sandboxed { step: "matplotlib font cache", message })?;
    let fontlists: Vec<(&str, &Vec<u8>)> = files
        .iter()
        .filter_map(|(path, bytes)| {
            let file = path.strip_prefix("mplconfig/")?;
            let version = file.strip_prefix("fontlist-v")?.strip_suffix(".json")?;
            (!version.is_empty() && version.bytes().all(|b| b.is_ascii_digit() || b == b'.')).then_some((file, bytes))
        })
        .collect();
    if fontlists.is_empty() {
        return Err(EnvError::Sandboxed {
            step: "matplotlib font cache",
            message: format!("it wrote no mplconfig/fontlist-v<version>.json (files: {:?})", files.keys().collect::<Vec<_>>()),
        });
    }
    fs::create_dir_all(&cache).map_err(io("create", &cache))?;
    for (file, bytes) in fontlists {
        let path = cache.join(file);
        fs::write(&path, bytes).map_err(io("write", &path))?;
    }
    progress("    matplotlib: font cache built in a sandbox");
    Ok(())
}

/// Where an environment with npm packages keeps Node.js's module compile cache (V8 code cache,
/// `NODE_COMPILE_CACHE`, Node.js 22.1+): TypeScript runs in the environment set
/// `NODE_COMPILE_CACHE=<ENV_MOUNT>/node-compile-cache`, so importing a package deserializes its
/// compiled code instead of parsing and compiling its source (measured in runs: zod ~14 ms of
/// CPU less, the four packages of `typescript-analysis` ~16-22 ms; README "Performance").
/// Node.js names the directory it reads `<version>-<arch>-<V8 cache tag>-<uid>`
/// (src/compile_cache.cc, `GetCacheVersionTag`), and every execution has a uid of its own
/// (`SANDBOX_UID + slot`), so the entries sit in the directory of
/// [`SANDBOX_UID`](sandbox_runtime::spec::SANDBOX_UID) and every other slot's uid is a symlink
/// to it. The mount is read-only: a run's new entries (its own code) are not
/// written (Node.js ignores the failure); a Node.js of another version or V8 flag set finds no
/// directory of its tag and compiles as without a cache. Each entry holds its source's length
/// and CRC32, which Node.js checks before V8 takes the code (and V8 its own checks).
pub const NODE_COMPILE_CACHE_DIR: &str = "node-compile-cache";

/// Builds [`NODE_COMPILE_CACHE_DIR`]: a TypeScript run in the environment (the build bound as it
/// is in a run, so the cache names the `/node_modules/...` paths runs import) enables Node.js's
/// compile cache in its workspace, imports each declared npm package and `preload` module (one
/// that fails to import is skipped: it fails the same way in a run) and flushes the cache. Only
/// entries named `<tag>-<uid>/<8 hex digits>` are taken, as data.
/// Errors: [`EnvError::Sandboxed`] when the step fails or returns no entry.
fn node_compile_cache(name: &str, env: &Environment, build: &Path, sandbox: &dyn BuildSandbox, progress: &mut dyn FnMut(&str)) -> Result<(), EnvError> {
    use sandbox_runtime::spec::{SANDBOX_UID, UID_SLOTS};
    let step = "Node.js compile cache";
    let mut modules: Vec<String> = env.npm.iter().filter_map(|p| sandbox_core::profile::split_npm_pin(p).map(|(n, _)| n.to_owned())).collect();
    modules.extend(env.preload.iter().cloned());
    modules.sort();
    modules.dedup();
    let code = format!(
        "import module from \"node:module\";\n\
         const r = module.enableCompileCache(\"/workspace/ncc\");\n\
         if (r.status !== module.constants.compileCacheStatus.ENABLED) throw new Error(`compile cache not enabled: ${{JSON.stringify(r)}}`);\n\
         for (const name of {}) {{\n  try {{ await import(name); }} catch {{}}\n}}\n\
         module.flushCompileCache();\n",
        serde_json::to_string(&modules).expect("JSON serializes")
    );
    let files = sandbox.run(name, build, sandbox_core::Language::Typescript, &code, &["ncc/**"]).map_err(|message| EnvError::Sandboxed { step, message })?;
    let (tag, entries) = compile_cache_entries(&files).map_err(|message| EnvError::Sandboxed { step, message })?;
    let root = build.join(NODE_COMPILE_CACHE_DIR);
    let own = format!("{tag}-{SANDBOX_UID}");
    let dir = root.join(&own);
    fs::create_dir_all(&dir).map_err(io("create", &dir))?;
    for (entry, bytes) in &entries {
        let path = dir.join(entry);
        fs::write(&path, bytes).map_err(io("write", &path))?;
    }
    for uid in SANDBOX_UID + 1..SANDBOX_UID + UID_SLOTS {
        let link = root.join(format!("{tag}-{uid}"));
        std::os::unix::fs::symlink(&own, &link).map_err(io("symlink", &link))?;
    }
    progress(&format!("    Node.js compile cache: {} modules compiled ({tag}) in a sandbox", entries.len()));
    Ok(())
}

/// Compile-cache entries: (name, bytes).
type CacheEntries<'a> = Vec<(&'a str, &'a [u8])>;

/// The entries of a Node.js compile cache a build step returned (`ncc/<tag>-<uid>/<entry>`, by
/// workspace-relative name): its tag without the uid (`v26.12.1-x64-310b2ce3`) and each entry
/// named by 8 hex digits, with its bytes. Anything else is left out (a path with other
/// components, a name Node.js does not write).
/// Errors: entries under two tags, or none.
fn compile_cache_entries(files: &BTreeMap<String, Vec<u8>>) -> Result<(String, CacheEntries<'_>), String> {
    let plain = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_');
    let mut tag: Option<&str> = None;
    let mut entries = Vec::new();
    for (path, bytes) in files {
        let Some((dir, entry)) = path.strip_prefix("ncc/").and_then(|rest| rest.split_once('/')) else { continue };
        let Some((t, uid)) = dir.rsplit_once('-') else { continue };
        if !plain(t)
            || t.starts_with('.')
            || uid.is_empty()
            || !uid.bytes().all(|b| b.is_ascii_digit())
            || entry.len() != 8
            || !entry.bytes().all(|b| b.is_ascii_hexdigit())
        {
            continue;
        }
        match tag {
            Some(seen) if seen != t => return Err(format!("entries of two cache tags ({seen} and {t})")),
            _ => tag = Some(t),
        }
        entries.push((entry, bytes.as_slice()));
    }
    match tag {
        Some(t) => Ok((t.to_owned(), entries)),
        None => Err(format!("it wrote no cache entry (files: {:?})", files.keys().collect::<Vec<_>>())),
    }
}

/// Where an environment on a base keeps the bytecode of its packages and of the base's standard
/// library, compiled by the base's own interpreter: runs set `PYTHONPYCACHEPREFIX` to
/// `<ENV_MOUNT>/pycache`, below which each `.pyc` sits at its source's absolute path
/// (`pycache/usr/lib/python3.13/json/decoder.cpython-313.pyc`). Without it every run would
/// compile pandas and the standard library anew (seconds) on the read-only root.
pub const PYCACHE_DIR: &str = "pycache";

/// Compiles the packages and the base's standard library to bytecode in a sandbox (the base's
/// interpreter, the build bound read-only as the environment, `sys.pycache_prefix` in the
/// workspace) and copies the `.pyc` files, as data, into `<build>/pycache/`. Only paths made of
/// plain components that end in `.pyc` are taken.
/// Errors: [`EnvError::Sandboxed`] when the step fails or returns nothing usable.
fn compile_bytecode(name: &str, build: &Path, sandbox: &dyn BuildSandbox, progress: &mut dyn FnMut(&str)) -> Result<(), EnvError> {
    let code = format!(
        "import compileall, sys\nsys.pycache_prefix = '/workspace/pyc'\nstdlib = '/usr/lib/python%d.%d' % sys.version_info[:2]\n\
         compileall.compile_dir('{}/python', quiet=2)\ncompileall.compile_dir(stdlib, quiet=2)\n",
        sandbox_core::profile::ENV_MOUNT
    );
    let files = sandbox
        .run(name, build, sandbox_core::Language::Python, &code, &["pyc/**/*.pyc"])
        .map_err(|message| EnvError::Sandboxed { step: "bytecode compilation", message })?;
    let root = build.join(PYCACHE_DIR);
    let mut written = 0usize;
    for (path, bytes) in &files {
        let Some(rest) = path.strip_prefix("pyc/") else { continue };
        let parts: Vec<&str> = rest.split('/').collect();
        if !rest.ends_with(".pyc") || parts.iter().any(|c| c.is_empty() || *c == "." || *c == "..") {
            continue;
        }
        let target = parts.iter().fold(root.clone(), |p, c| p.join(c));
        let parent = target.parent().expect("below root");
        fs::create_dir_all(parent).map_err(io("create", parent))?;
        fs::write(&target, bytes).map_err(io("write", &target))?;
        written += 1;
    }
    if written == 0 {
        return Err(EnvError::Sandboxed { step: "bytecode compilation", message: "it wrote no .pyc file".into() });
    }
    progress(&format!("    bytecode: {written} modules compiled by the base's interpreter in a sandbox"));
    Ok(())
}

/// An installer's failure as [`EnvError::HashMismatch`] when `package` finds the package its
/// output names as mismatching; otherwise the failure as it was.
fn hash_mismatch(tool: &'static str, e: EnvError, package: impl Fn(&str) -> Option<String>) -> EnvError {
    match e {
        EnvError::Installer { message, .. } => match package(&message) {
            Some(package) => EnvError::HashMismatch { tool, package, detail: message },
            None => EnvError::Installer { tool, message },
        },
        e => e,
    }
}

/// Runs an installer, forwarding each output line to `progress`; its failure keeps the last lines.
pub(crate) fn run_tool(tool: &'static str, mut cmd: Command, progress: &mut dyn FnMut(&str)) -> Result<(), EnvError> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| EnvError::Installer {
        tool,
        message: format!("cannot start {:?}: {e} (scripts/install-deps.sh installs uv, npm and mmdebstrap)", cmd.get_program()),
    })?;
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let readers: Vec<_> = [child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>), child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>)]
        .into_iter()
        .flatten()
        .map(|pipe| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            })
        })
        .collect();
    drop(tx);
    let mut tail: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    for line in rx {
        if line.trim().is_empty() {
            continue;
        }
        progress(&format!("    {tool}: {line}"));
        tail.push_back(line);
        if tail.len() > 20 {
            tail.pop_front();
        }
    }
    for r in readers {
        let _ = r.join();
    }
    let status = child.wait().map_err(|e| EnvError::Installer { tool, message: e.to_string() })?;
    if !status.success() {
        return Err(EnvError::Installer { tool, message: format!("{status}; last output:\n{}", Vec::from(tail).join("\n")) });
    }
    Ok(())
}

/// Directories 0755 and files 0644 (0755 if executable by the owner): the sandbox's unprivileged
/// user reads them; nobody but root writes.
fn make_world_readable(root: &Path) -> Result<(), EnvError> {
    let meta = fs::symlink_metadata(root).map_err(io("stat", root))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mode = if meta.is_dir() || meta.mode() & 0o100 != 0 { 0o755 } else { 0o644 };
    fs::set_permissions(root, fs::Permissions::from_mode(mode)).map_err(io("chmod", root))?;
    if meta.is_dir() {
        for e in fs::read_dir(root).map_err(io("read", root))? {
            make_world_readable(&e.map_err(io("read", root))?.path())?;
        }
    }
    Ok(())
}

/// (files, bytes, hex SHA-256) over the tree below `root` in path order, `manifest.json` excluded.
pub(crate) fn tree_digest(root: &Path) -> Result<(u64, u64, String), EnvError> {
    fn walk(dir: &Path, rel: &str, h: &mut Sha256, files: &mut u64, bytes: &mut u64) -> Result<(), EnvError> {
        let mut entries: Vec<_> = fs::read_dir(dir).map_err(io("read", dir))?.filter_map(Result::ok).collect();
        entries.sort_by_key(fs::DirEntry::file_name);
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let rel = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            if rel == "manifest.json" {
                continue;
            }
            let path = e.path();
            let meta = fs::symlink_metadata(&path).map_err(io("stat", &path))?;
            if meta.file_type().is_symlink() {
                let target = fs::read_link(&path).map_err(io("readlink", &path))?;
                h.update(format!("l {rel} {}\n", target.display()));
            } else if meta.is_dir() {
                h.update(format!("d {rel} {:o}\n", meta.mode() & 0o7777));
                walk(&path, &rel, h, files, bytes)?;
            } else {
                let mut f = fs::File::open(&path).map_err(io("open", &path))?;
                let mut fh = Sha256::new();
                std::io::copy(&mut f, &mut fh).map_err(io("read", &path))?;
                h.update(format!("f {rel} {:o} {} {}\n", meta.mode() & 0o7777, meta.len(), hex::encode(fh.finalize())));
                *files += 1;
                *bytes += meta.len();
            }
        }
        Ok(())
    }
    let (mut h, mut files, mut bytes) = (Sha256::new(), 0, 0);
    walk(root, "", &mut h, &mut files, &mut bytes)?;
    Ok((files, bytes, hex::encode(h.finalize())))
}

/// `name==version` of each `*.dist-info` directory in a site directory.
fn python_dists(site: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(site) else { return Vec::new() };
    let mut out: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let n = e.file_name().to_str()?.strip_suffix(".dist-info")?.to_owned();
            let (name, version) = n.split_once('-')?;
            Some(format!("{name}=={version}"))
        })
        .collect();
    out.sort();
    out
}

/// `name@version` of each package in a node_modules directory (scoped ones included).
fn npm_packages(modules: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![modules.to_owned()];
    if let Ok(entries) = fs::read_dir(modules) {
        dirs.extend(entries.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().starts_with('@')).map(|e| e.path()));
    }
    for dir in dirs {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for e in entries.filter_map(Result::ok) {
            let pj = e.path().join("package.json");
            let Ok(text) = fs::read(&pj) else { continue };
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(&text) else { continue };
            if let (Some(n), Some(ver)) = (v["name"].as_str(), v["version"].as_str()) {
                out.push(format!("{n}@{ver}"));
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(names: &[&str]) -> BTreeMap<String, Vec<u8>> {
        names.iter().map(|n| ((*n).to_owned(), n.as_bytes().to_vec())).collect()
    }

    /// A build step's output is the sandboxed program's: only the names Node.js writes are taken.
    #[test]
    fn a_compile_cache_step_returns_only_what_node_writes() {
        let got = files(&[
            "ncc/v26.12.1-x64-310b2ce3-1042/0badc0de",
            "ncc/v26.12.1-x64-310b2ce3-1042/DEADBEEF",
            "ncc/v26.12.1-x64-310b2ce3-1042/0badc0de.tmp",
            "ncc/v26.12.1-x64-310b2ce3-1042/nothex00",
            "ncc/v26.12.1-x64-310b2ce3-1042/sub/0badc0de",
            "ncc/v26.12.1-x64-310b2ce3-x/0badc0de",
            "ncc/..-1042/0badc0de",
            "ncc/a/b-1042/0badc0de",
            "ncc/0badc0de",
            "other/v26-1042/0badc0de",
        ]);
        let (tag, entries) = compile_cache_entries(&got).unwrap();
        assert_eq!(tag, "v26.12.1-x64-310b2ce3");
        let names: Vec<&str> = entries.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["0badc0de", "DEADBEEF"]);
        assert_eq!(entries[0].1, b"ncc/v26.12.1-x64-310b2ce3-1042/0badc0de");
    }

    #[test]
    fn a_compile_cache_of_two_tags_or_none_fails_the_step() {
        let two = files(&["ncc/v26.12.1-x64-310b2ce3-1042/0badc0de", "ncc/v22.1.0-x64-00000000-1042/0badc0de"]);
        assert!(compile_cache_entries(&two).unwrap_err().contains("two cache tags"));
        let none = files(&["ncc/v26.12.1-x64-310b2ce3-1042/junk"]);
        assert!(compile_cache_entries(&none).unwrap_err().contains("no cache entry"));
    }
}
