//! Prepare and clean up one execution's host state: `<data_dir>/executions/<id>/` with an empty
//! `root/` (init mounts the container root there) and `workspace/` (a size-capped tmpfs holding
//! the input files, owned by the sandbox user), and the cgroup. [`Prepared`] undoes all of it in
//! [`Prepared::teardown`], or in `Drop` when an execution is abandoned half way.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::signal::Signal;
use nix::unistd::{Gid, Uid};
use sandbox_core::profile::ENV_MOUNT;
use sandbox_core::wire::{OutputFile, SkippedFile};
use sandbox_core::{Admitted, Language};

use sandbox_runtime::cgroup::{self, Cgroup, Layout, Usage};
use sandbox_runtime::process::{parent_of, Owner};
use sandbox_runtime::spec::{BindMount, Rlimits, RootFile, SpawnSpec, SANDBOX_UID, UID_SLOTS};

use crate::command::{booted, code_file, harness_files, host_python, program_command, CODE_DIR, INPUT_FILE};
use crate::EngineOptions;

/// Host files under /etc bound read-only into every sandbox.
pub(crate) const ETC_BINDS: [&str; 6] = ["/etc/ld.so.cache", "/etc/ssl", "/etc/ca-certificates", "/etc/alternatives", "/etc/mime.types", "/etc/fonts"];

/// A host-side failure while preparing or tearing down.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// A directory or file operation failed.
    #[error("{op} {path}")]
    Io {
        /// What was attempted.
        op: &'static str,
        /// On which path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The profile's environment is missing (it was removed after admission).
    #[error("{0}")]
    Environment(String),
    /// The data directory cannot be walked by the container's unprivileged init.
    #[error("{0} is not searchable by others (mode o+x is needed on every ancestor of the data directory)")]
    NotSearchable(PathBuf),
    /// Mounting or unmounting the workspace tmpfs failed.
    #[error("{op} workspace tmpfs at {path}")]
    Mount {
        /// `mount` or `unmount`.
        op: &'static str,
        /// The mount point.
        path: PathBuf,
        /// The kernel's errno.
        #[source]
        source: nix::Error,
    },
    /// A cgroup operation failed.
    #[error(transparent)]
    Cgroup(#[from] cgroup::CgroupError),
}

/// `openat2(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)` resolved with `RESOLVE_BENEATH |
/// RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV`: never a symlink (the last component included:
/// `ELOOP`), never out of `dir` (`EXDEV`), never onto another mount.
fn beneath(dir: &impl std::os::fd::AsFd, name: &str, flags: nix::fcntl::OFlag, mode: u32) -> io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    let how = OpenHow::new()
        .flags(flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .mode(nix::sys::stat::Mode::from_bits_truncate(mode))
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_XDEV);
    Ok(nix::fcntl::openat2(dir.as_fd(), name, how)?)
}

pub(crate) fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> PrepareError + 'a {
    move |source| PrepareError::Io { op, path: path.to_owned(), source }
}

/// A host uid held by one running execution: the program runs as `SANDBOX_UID + slot` inside,
/// host `uid_base + SANDBOX_UID + slot`. Held with `flock` on
/// `/run/sandbox/uid-slots-<uid_base>/<slot>`, so every process on the host (a service, CLI
/// runs) hands out distinct uids, and a dead process's slots free themselves.
pub(crate) struct UidSlot {
    /// The slot, `0..UID_SLOTS`.
    pub(crate) slot: u32,
    _lock: nix::fcntl::Flock<fs::File>,
}

impl UidSlot {
    /// Takes a free slot, starting at a random one.
    /// Errors: the directory cannot be made, or all [`UID_SLOTS`] are held.
    pub(crate) fn acquire(uid_base: u32) -> io::Result<Self> {
        let dir = PathBuf::from(format!("/run/sandbox/uid-slots-{uid_base}"));
        fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        // Random enough to spread concurrent starters (the low bits of a v7 uuid are random).
        let start = u32::from_le_bytes(uuid::Uuid::now_v7().as_bytes()[12..].try_into().expect("4 bytes")) % UID_SLOTS;
        for i in 0..UID_SLOTS {
            let slot = (start + i) % UID_SLOTS;
            let file = fs::OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).open(dir.join(slot.to_string()))?;
            if let Ok(lock) = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
                return Ok(Self { slot, _lock: lock });
            }
        }
        Err(io::Error::new(io::ErrorKind::WouldBlock, format!("all {UID_SLOTS} uid slots are in use")))
    }

    /// The uid the program runs as inside.
    pub(crate) fn uid(&self) -> u32 {
        SANDBOX_UID + self.slot
    }
}

/// One execution's host state.
pub(crate) struct Prepared {
    pub(crate) dir: PathBuf,
    pub(crate) workspace: PathBuf,
    /// The directory's own tmpfs (everything below it: owner file, mount points) is mounted.
    dir_mounted: bool,
    workspace_mounted: bool,
    /// A warm child's `warm/` tmpfs (code and /etc files) is mounted.
    warm_mounted: bool,
    /// A pooled sandbox's `code/` tmpfs is mounted.
    code_mounted: bool,
    /// Shared with the blocking threads that kill its processes ([`Prepared::stop`]).
    pub(crate) cgroup: Option<Arc<Cgroup>>,
    /// A pidfd of init, once known: every signal to init goes through it, so none can reach a
    /// later process that reused init's pid.
    pub(crate) init: Option<Arc<std::os::fd::OwnedFd>>,
    /// SHA-256 of each input file, to tell changed outputs from untouched inputs.
    inputs: Vec<(String, [u8; 32])>,
    pub(crate) spec: SpawnSpec,
    /// The execution's own uid, held until teardown.
    pub(crate) uid: UidSlot,
    /// Shared locks on the base and environment directories the run binds ([`crate::base::hold`]):
    /// garbage collection leaves them alone until teardown.
    held: Vec<nix::fcntl::Flock<fs::File>>,
    torn_down: bool,
    /// Deferred refills ([`crate::pool::Refill`] of the pooled sandbox this was,
    /// [`crate::spare::SpareRefill`] of the waiting helper it took): the teardown hands them
    /// back and the execution drops them with its result complete; each then lets its pool or
    /// the spare replace what the execution took.
    pub(crate) refills: Vec<Refill>,
}

impl Prepared {
    /// Creates the directories, mounts and fills the workspace, creates the cgroup, and builds the spawn spec.
    /// Errors: [`PrepareError`]; whatever was made is undone by `Drop`.
    pub(crate) fn new(opts: &EngineOptions, layout: &Layout, id: &str, a: &Admitted, code: &str) -> Result<Self, PrepareError> {
        let mut p = Self::create(opts, layout, id, &a.profile)?;
        p.write_inputs(a, opts.config.runtime.uid_base)?;
        let (mut argv, env) = program_command(a, &opts.config);
        let mut files = root_files(a.language, p.uid.uid(), Some((code, a.input_json.as_deref())));
        // A Python harness with bytecode for the host's interpreter starts from it (see
        // crate::bytecode): beside the harness's source in /code, its `.pyc`; beside the rest of
        // the harness's, its own for the function harness, which always loads it (~25 kB: a
        // script run that fails compiles its source instead of every run carrying it).
        let compiled = (a.language == Language::Python).then(|| host_python(&opts.config, &a.profile)).flatten();
        if let Some(compiled) = compiled.and_then(|python| crate::bytecode::harness(&opts.data_dir, &python)) {
            argv = booted(argv);
            let wanted = if a.harness == sandbox_core::wire::Harness::Function { compiled.len() } else { 1 };
            let names = harness_files(Language::Python).iter().map(|(name, _)| name);
            files.extend(names.zip(compiled.iter()).take(wanted).map(|(name, pyc)| RootFile {
                sandbox_path: format!("{CODE_DIR}/{name}c"),
                content: pyc.clone(),
                mode: 0o444,
            }));
        }
        let spec = p.spec_for(opts, &a.profile, a.language, files, argv, env)?;
        p.spec = spec;
        Ok(p)
    }

    /// The host state of a pooled sandbox of `profile` (see [`crate::pool`]): everything
    /// [`Prepared::new`] makes but the inputs, plus `code/`, a small tmpfs the sandbox sees
    /// read-only at `/code` holding the harness now and the code once an execution takes it.
    /// The program is the harness in `pool` mode, importing `preload`.
    /// Errors: [`PrepareError`]; whatever was made is undone by `Drop`.
    pub(crate) fn new_member(
        opts: &EngineOptions,
        layout: &Layout,
        id: &str,
        profile: &sandbox_core::Profile,
        preload: &[String],
    ) -> Result<Self, PrepareError> {
        let mut p = Self::create(opts, layout, id, profile)?;
        let code = p.dir.join("code");
        fs::DirBuilder::new().mode(0o755).create(&code).map_err(io_err("create", &code))?;
        // Room for the largest code (with its inline source map) and a function's input.
        let size = profile.limits.code_max_bytes.saturating_mul(4).saturating_add(MEMBER_INPUT_MAX_BYTES);
        let options = format!("size={size},mode=0755");
        mount(Some("tmpfs"), &code, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some(options.as_str())).map_err(|source| PrepareError::Mount {
            op: "mount",
            path: code.clone(),
            source,
        })?;
        p.code_mounted = true;
        for (name, source) in harness_files(profile.language) {
            write_ro(&code.join(name), source.as_bytes())?;
        }
        let (argv, mut env) = crate::command::pool_command(profile, &opts.config);
        env.push(("SANDBOX_PRELOAD".into(), preload.join(",")));
        let files = root_files(profile.language, p.uid.uid(), None).into_iter().filter(|f| !f.sandbox_path.starts_with(&format!("{CODE_DIR}/"))).collect();
        let mut spec = p.spec_for(opts, profile, profile.language, files, argv, env)?;
        spec.mounts.insert(0, BindMount { host: code, sandbox_path: CODE_DIR.into(), read_only: true });
        p.spec = spec;
        Ok(p)
    }

    /// The host state of a template's pre-forked child of `profile` (see [`crate::pool`]):
    /// everything [`Prepared::new`] makes but the inputs, plus the `warm/` tmpfs a warm child
    /// binds (`code/` with the harness now and the code once an execution takes it, `etc/passwd`
    /// and `etc/group` naming its uid).
    /// Errors: [`PrepareError`]; whatever was made is undone by `Drop`.
    pub(crate) fn new_template_member(opts: &EngineOptions, layout: &Layout, id: &str, profile: &sandbox_core::Profile) -> Result<Self, PrepareError> {
        let mut p = Self::create(opts, layout, id, profile)?;
        // The child never execs: its argv is unused, and its environment comes with the code.
        let (argv, env) = crate::command::pool_command(profile, &opts.config);
        let files = root_files(profile.language, p.uid.uid(), None).into_iter().filter(|f| !f.sandbox_path.starts_with(&format!("{CODE_DIR}/"))).collect();
        p.spec = p.spec_for(opts, profile, profile.language, files, argv, env)?;
        let room = profile.limits.code_max_bytes.saturating_mul(4).saturating_add(MEMBER_INPUT_MAX_BYTES);
        let code = p.mount_warm(room)?;
        for (name, source) in harness_files(profile.language) {
            write_ro(&code.join(name), source.as_bytes())?;
        }
        Ok(p)
    }

    /// Gives a pooled sandbox its execution: the input files into the workspace; the code, the
    /// function's input and `_sandbox_run.json` (`{"mode": "script"|"function", "env": {NAME:
    /// value}}`: the harness mode and the request's environment, or for a template's child the
    /// program's whole environment) into its code directory (`code/`, a template child's
    /// `warm/code/`).
    /// Errors: [`PrepareError::Io`] (e.g. code larger than the code tmpfs).
    pub(crate) fn fill_member(&mut self, opts: &EngineOptions, a: &Admitted, code: &str) -> Result<(), PrepareError> {
        self.write_inputs(a, opts.config.runtime.uid_base)?;
        let (dir, env) = if self.warm_mounted {
            // A template's child clears its environment and takes this one whole.
            (self.dir.join("warm/code"), program_command(a, &opts.config).1.into_iter().collect::<std::collections::BTreeMap<_, _>>())
        } else {
            (self.dir.join("code"), a.env.clone().into_iter().collect())
        };
        write_ro(&dir.join(code_file(a.language)), code.as_bytes())?;
        let run = serde_json::json!({ "mode": a.harness.as_str(), "env": env });
        write_ro(&dir.join("_sandbox_run.json"), run.to_string().as_bytes())?;
        if let Some(input) = a.input_json.as_deref() {
            let name = INPUT_FILE.strip_prefix(&format!("{CODE_DIR}/")).unwrap_or("input.json");
            write_ro(&dir.join(name), input.as_bytes())?;
        }
        Ok(())
    }

    /// The execution directory, its uid, workspace tmpfs and cgroup, for `profile`.
    fn create(opts: &EngineOptions, layout: &Layout, id: &str, profile: &sandbox_core::Profile) -> Result<Self, PrepareError> {
        let rt = &opts.config.runtime;
        let uid = UidSlot::acquire(rt.uid_base).map_err(io_err("acquire a uid slot in", Path::new("/run/sandbox")))?;
        let executions = opts.data_dir.join("executions");
        fs::DirBuilder::new().recursive(true).mode(0o711).create(&executions).map_err(io_err("create", &executions))?;
        check_searchable(&executions)?;
        let dir = executions.join(id);
        // A directory a finished execution left in the pool, renamed to this execution's name (it
        // is empty: the teardown removed the owner file before it pooled it), else a new one.
        if !take_pooled_dir(&opts.data_dir, &dir) {
            fs::DirBuilder::new().mode(0o700).create(&dir).map_err(io_err("create", &dir))?;
        }
        // Who owns this execution: a later start sweeps it only once this process is gone.
        // Written aside and renamed, so a concurrent sweep never reads half a file. Once here,
        // under the tmpfs below, for a process sharing the data directory from another mount
        // namespace (one the tmpfs does not propagate to); again on the tmpfs, for this one.
        write_owner(&dir)?;
        let mut p = Self {
            workspace: dir.join("workspace"),
            dir,
            dir_mounted: false,
            workspace_mounted: false,
            warm_mounted: false,
            code_mounted: false,
            cgroup: None,
            init: None,
            inputs: Vec::new(),
            spec: SpawnSpec::default(),
            uid,
            held: Vec::new(),
            torn_down: false,
            refills: Vec::new(),
        };
        // Everything below the directory is scratch state on a small tmpfs of its own: the owner
        // file and the mount points. On the data directory's disk filesystem each of their
        // creations and removals was a journaled metadata change (about twelve per execution,
        // now five), and every fsync of the audit log, on the same filesystem, waited for them.
        // Owned by the container's root (host uid_base) and 0700: init can reach the mount
        // points below it, no other host user can reach the workspace while it runs.
        let options = format!("size=1m,nr_inodes=256,mode=0700,uid={base},gid={base}", base = rt.uid_base);
        let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        mount(Some("tmpfs"), &p.dir, Some("tmpfs"), flags, Some(options.as_str())).map_err(|source| PrepareError::Mount {
            op: "mount",
            path: p.dir.clone(),
            source,
        })?;
        p.dir_mounted = true;
        write_owner(&p.dir)?;
        let root = p.dir.join("root");
        fs::DirBuilder::new().mode(0o755).create(&root).map_err(io_err("create", &root))?;
        fs::DirBuilder::new().mode(0o755).create(&p.workspace).map_err(io_err("create", &p.workspace))?;
        let user = rt.uid_base + p.uid.uid();
        let group = rt.uid_base + SANDBOX_UID;
        let options = format!("size={},mode=0755,uid={user},gid={group}", profile.filesystem.workspace_max_bytes);
        mount(Some("tmpfs"), &p.workspace, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some(options.as_str()))
            .map_err(|source| PrepareError::Mount { op: "mount", path: p.workspace.clone(), source })?;
        p.workspace_mounted = true;
        let limits = cgroup::Limits { memory_max_bytes: profile.limits.memory_max_bytes, cpu_max: profile.limits.cpu_max, pids_max: profile.limits.pids_max };
        p.cgroup = Some(Arc::new(Cgroup::create(layout, &opts.cgroup_parent, id, limits)?));
        Ok(p)
    }

    /// The spawn spec of this execution: `root_files`, `argv` and `env` as given, everything else
    /// from the profile and this execution's directory, uid and cgroup.
    fn spec_for(
        &mut self,
        opts: &EngineOptions,
        profile: &sandbox_core::Profile,
        language: Language,
        root_files: Vec<RootFile>,
        argv: Vec<String>,
        env: Vec<(String, String)>,
    ) -> Result<SpawnSpec, PrepareError> {
        let rt = &opts.config.runtime;
        let fs_policy = &profile.filesystem;
        let system = system_of(opts, profile, language)?;
        self.held = system.held;
        let mut spec = SpawnSpec {
            execution_id: self.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            engine_pid: std::process::id(),
            uid_base: rt.uid_base,
            program_uid: self.uid.uid(),
            template_slots: 0,
            template_children: 0,
            cgroup_join: self.cgroup.as_deref().map(Cgroup::join_files).unwrap_or_default(),
            cgroup_dir: self.cgroup.as_deref().and_then(Cgroup::v2_dir).map(Path::to_owned),
            root_dir: self.dir.join("root"),
            workspace_dir: self.workspace.clone(),
            system_dirs: system.dirs,
            etc_binds: ETC_BINDS.iter().map(PathBuf::from).collect(),
            system_root: system.root,
            root_files,
            tmp_bytes: fs_policy.tmp_max_bytes,
            mounts: runtime_mounts(opts, profile, language)?
                .into_iter()
                .chain(fs_policy.mounts.iter().map(|m| BindMount {
                    host: m.host.clone(),
                    sandbox_path: m.sandbox.display().to_string(),
                    read_only: m.read_only,
                }))
                .collect(),
            masked_dirs: system.masked,
            hostname: "sandbox".into(),
            argv,
            env,
            cwd: "/workspace".into(),
            rlimits: Rlimits {
                nofile: profile.limits.nofile,
                // No file larger than the largest tmpfs, with room so that a full tmpfs says ENOSPC first.
                fsize_bytes: fs_policy.workspace_max_bytes.max(fs_policy.tmp_max_bytes) + (1 << 20),
                nproc: u64::from(profile.limits.pids_max),
            },
            tun: matches!(profile.network, sandbox_core::network::Network::Allowlist(_)),
            landlock_min_abi: profile.landlock_min_abi,
            seccomp_bpf: seccomp_bpf(),
            // Set by the cold start that sends it (`supervise::Recorded`).
            hold: false,
        };
        if spec.tun {
            // The engine answers DNS at the gateway of the sandbox's TUN (sandbox-network).
            let resolver = format!("nameserver {}\noptions timeout:2 attempts:2\n", sandbox_runtime::tun::GATEWAY_IPV4);
            spec.root_files.iter_mut().filter(|f| f.sandbox_path == "/etc/resolv.conf").for_each(|f| f.content = resolver.clone().into_bytes());
        }
        Ok(spec)
    }

    /// Mounts the `warm/` tmpfs a warm child binds (its own, so that the sandbox's mountinfo
    /// names no host path) with `room` bytes besides the /etc files, makes `code/` and `etc/`
    /// in it, and writes `etc/passwd` and `etc/group` from the spec's root files. Returns the
    /// path of `code/`.
    /// Errors: [`PrepareError::Mount`], [`PrepareError::Io`].
    fn mount_warm(&mut self, room: u64) -> Result<PathBuf, PrepareError> {
        let warm = self.dir.join("warm");
        fs::DirBuilder::new().mode(0o755).create(&warm).map_err(io_err("create", &warm))?;
        let options = format!("size={},mode=0755", room.saturating_add(1 << 20));
        mount(Some("tmpfs"), &warm, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some(options.as_str())).map_err(|source| PrepareError::Mount {
            op: "mount",
            path: warm.clone(),
            source,
        })?;
        self.warm_mounted = true;
        let code = warm.join("code");
        let etc = warm.join("etc");
        for d in [&code, &etc] {
            fs::DirBuilder::new().mode(0o755).create(d).map_err(io_err("create", d))?;
        }
        for f in self.spec.root_files.iter().filter(|f| f.sandbox_path == "/etc/passwd" || f.sandbox_path == "/etc/group") {
            let target = etc.join(&f.sandbox_path["/etc/".len()..]);
            fs::write(&target, &f.content).map_err(io_err("write", &target))?;
            fs::set_permissions(&target, fs::Permissions::from_mode(0o444)).map_err(io_err("chmod", &target))?;
        }
        Ok(code)
    }

    /// Writes the request's input files under the workspace: parent directories the sandbox
    /// user's (so the program may add files beside inputs), files the sandbox user's `0644`, or
    /// root's `0444` with `inputs_read_only`. Every name is resolved from a directory's
    /// descriptor with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV)`, every
    /// file created with `O_EXCL`, and owners and modes set on descriptors: a pooled or
    /// template-forked member's workspace was writable by code in its sandbox (its
    /// environment's preloaded modules) before this execution came, and a symlink, file or
    /// rename planted there must not turn this write as host root into one outside the
    /// workspace's tmpfs. Such a member fails here (`ELOOP`, `EEXIST`, `EXDEV`) and the
    /// execution starts cold (`warm::a_warm_members_planted_links_never_take_an_input_outside`).
    /// Errors: [`PrepareError::Io`] naming the path.
    fn write_inputs(&mut self, a: &Admitted, uid_base: u32) -> Result<(), PrepareError> {
        use sha2::Digest;
        use std::io::Write as _;
        let user = Uid::from_raw(uid_base + self.uid.uid());
        let group = Gid::from_raw(uid_base + SANDBOX_UID);
        let (root_uid, root_gid) = (Uid::from_raw(uid_base), Gid::from_raw(uid_base));
        if a.files.is_empty() {
            return Ok(());
        }
        let workspace: std::os::fd::OwnedFd = fs::File::open(&self.workspace).map_err(io_err("open", &self.workspace))?.into();
        for f in &a.files {
            let comps: Vec<&str> = f.path.components().collect();
            let Some((name, parents)) = comps.split_last() else { continue };
            let mut at = self.workspace.clone();
            let mut dir: Option<std::os::fd::OwnedFd> = None;
            for c in parents {
                at.push(c);
                let parent = dir.as_ref().unwrap_or(&workspace);
                let created = match nix::sys::stat::mkdirat(parent, *c, nix::sys::stat::Mode::from_bits_truncate(0o755)) {
                    Ok(()) => true,
                    Err(nix::errno::Errno::EEXIST) => false,
                    Err(e) => return Err(io_err("create", &at)(e.into())),
                };
                let next = beneath(parent, c, nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_RDONLY, 0).map_err(io_err("open", &at))?;
                if created {
                    nix::unistd::fchown(&next, Some(user), Some(group)).map_err(|e| io_err("chown", &at)(e.into()))?;
                }
                dir = Some(next);
            }
            at.push(name);
            let flags = nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_CREAT | nix::fcntl::OFlag::O_EXCL;
            let file = beneath(dir.as_ref().unwrap_or(&workspace), name, flags, 0o600).map_err(io_err("create", &at))?;
            let (owner, mode) = if a.profile.filesystem.inputs_read_only { ((root_uid, root_gid), 0o444) } else { ((user, group), 0o644) };
            nix::unistd::fchown(&file, Some(owner.0), Some(owner.1)).map_err(|e| io_err("chown", &at)(e.into()))?;
            nix::sys::stat::fchmod(&file, nix::sys::stat::Mode::from_bits_truncate(mode)).map_err(|e| io_err("chmod", &at)(e.into()))?;
            fs::File::from(file).write_all(&f.bytes).map_err(io_err("write", &at))?;
            self.inputs.push((f.path.as_str().to_owned(), sha2::Sha256::digest(&f.bytes).into()));
        }
        Ok(())
    }

    /// Ends every process of the execution: SIGKILL to init (which takes its pid namespace
    /// down), then to whatever the cgroup still holds (the helper, a process mid-fork).
    /// Blocks while the cgroup empties (up to 5 s): from async code use [`Prepared::stop`].
    pub(crate) fn stop_everything(&self) {
        stop(self.init.as_deref(), self.cgroup.as_deref());
    }

    /// Takes init's host pid, as reported: opens a pidfd for it and keeps it only if that
    /// process is still the child of `parent` (the helper, or a warm child), so a pid reused
    /// in between is never signalled.
    pub(crate) fn set_init(&mut self, pid: Option<i32>, parent: Option<i32>) {
        self.init = pid.and_then(|pid| {
            let fd = sandbox_runtime::pidfd_open(pid).ok()?;
            let parent_now = u32::try_from(pid).ok().and_then(parent_of).and_then(|p| i32::try_from(p).ok());
            (parent.is_none() || parent_now == parent).then(|| Arc::new(fd))
        });
    }

    /// Takes init's pidfd as its parent handed it over (a template's child is its execution's
    /// init: the template answers a fork with its pidfd).
    pub(crate) fn set_init_pidfd(&mut self, pidfd: std::os::fd::OwnedFd) {
        self.init = Some(Arc::new(pidfd));
    }

    /// Blocks until init has exited (its pidfd turns readable), for at most `patience`; returns
    /// at once when init is unknown. For an init that reported the program's end and ends by
    /// itself: waiting on its pidfd, not polling the cgroup, lets the caller go on the moment it
    /// is gone.
    pub(crate) fn wait_init_exit(&self, patience: Duration) {
        if let Some(fd) = &self.init {
            let mut fds = [nix::poll::PollFd::new(std::os::fd::AsFd::as_fd(fd.as_ref()), nix::poll::PollFlags::POLLIN)];
            let ms = u16::try_from(patience.as_millis()).unwrap_or(u16::MAX);
            // EINTR or a timeout: the caller kills what remains anyway.
            let _ = nix::poll::poll(&mut fds, ms);
        }
    }

    /// Sends `sig` to init through its pidfd (nothing when it is unknown or gone).
    pub(crate) fn signal_init(&self, sig: Signal) {
        if let Some(fd) = &self.init {
            let _ = sandbox_runtime::pidfd_send_signal(std::os::fd::AsFd::as_fd(fd.as_ref()), sig as i32);
        }
    }

    /// [`Prepared::stop_everything`] on a blocking thread, so a slow kill never stalls the
    /// runtime's workers (other executions, streams, health probes).
    pub(crate) async fn stop(&self) {
        let (init, cgroup) = (self.init.clone(), self.cgroup.clone());
        let _ = tokio::task::spawn_blocking(move || stop(init.as_deref(), cgroup.as_deref())).await;
    }

    /// Resource usage from the cgroup (zeros if it cannot be read).
    pub(crate) fn usage(&self) -> Usage {
        self.cgroup.as_ref().and_then(|c| c.usage().ok()).unwrap_or_default()
    }

    /// Reads the new or changed workspace files (see [`crate::collect`]).
    pub(crate) fn collect_files(&self, a: &Admitted) -> io::Result<(std::collections::BTreeMap<String, OutputFile>, Vec<SkippedFile>)> {
        crate::collect::collect(&self.workspace, &self.inputs, a)
    }

    /// Removes the cgroup, the workspace mount and the execution directory.
    /// Errors: the first failure; the remaining steps are still attempted.
    pub(crate) fn teardown(&mut self) -> Result<(), PrepareError> {
        self.torn_down = true;
        let mut first: Option<PrepareError> = None;
        // Released last: the processes are gone once this returns.
        let held = std::mem::take(&mut self.held);
        let mut keep = |r: Result<(), PrepareError>| {
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        };
        self.stop_everything();
        if let Some(cg) = self.cgroup.take() {
            keep(cg.remove().map_err(PrepareError::from));
        }
        if self.dir_mounted {
            // Lazily, with everything mounted below it (workspace, code, warm): one unmount.
            keep(umount2(&self.dir, MntFlags::MNT_DETACH).map_err(|source| PrepareError::Mount { op: "unmount", path: self.dir.clone(), source }));
            (self.dir_mounted, self.warm_mounted, self.code_mounted, self.workspace_mounted) = (false, false, false, false);
        }
        if self.warm_mounted {
            let warm = self.dir.join("warm");
            keep(umount2(&warm, MntFlags::MNT_DETACH).map_err(|source| PrepareError::Mount { op: "unmount", path: warm, source }));
            self.warm_mounted = false;
        }
        if self.code_mounted {
            let code = self.dir.join("code");
            keep(umount2(&code, MntFlags::MNT_DETACH).map_err(|source| PrepareError::Mount { op: "unmount", path: code, source }));
            self.code_mounted = false;
        }
        if self.workspace_mounted {
            keep(umount2(&self.workspace, MntFlags::MNT_DETACH).map_err(|source| PrepareError::Mount { op: "unmount", path: self.workspace.clone(), source }));
            self.workspace_mounted = false;
        }
        // Nothing is mounted on the directory any more: it goes back to the pool, else is removed.
        let unmounted = !(self.dir_mounted || self.warm_mounted || self.code_mounted || self.workspace_mounted);
        if !(unmounted && pool_dir(&data_dir_of(&self.dir), &self.dir)) {
            keep(fs::remove_dir_all(&self.dir).or_else(ignore_not_found).map_err(io_err("remove", &self.dir)));
        }
        drop(held);
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if !self.torn_down {
            if let Err(e) = self.teardown() {
                tracing::error!(error = %e, "teardown of an abandoned execution failed");
            }
        }
    }
}

fn stop(init: Option<&std::os::fd::OwnedFd>, cgroup: Option<&Cgroup>) {
    if let Some(fd) = init {
        let _ = sandbox_runtime::pidfd_send_signal(std::os::fd::AsFd::as_fd(fd), Signal::SIGKILL as i32);
    }
    if let Some(cg) = cgroup {
        if let Err(e) = cg.kill_all(Duration::from_secs(5)) {
            tracing::error!(error = %e, "processes survived the cgroup kill");
        }
    }
}

/// A deferred refill ([`Prepared::refills`]): what it holds wakes its pool or spare when dropped.
pub(crate) type Refill = Box<dyn Send + Sync>;

/// Holds a value whose drop blocks (an abandoned [`Prepared`] tears down in `Drop`) and, when
/// dropped itself inside a tokio runtime, drops it on a blocking thread instead of the worker.
pub(crate) struct DropOffWorker<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> DropOffWorker<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(Some(value))
    }

    /// The value, to be dropped by the caller.
    pub(crate) fn into_inner(mut self) -> T {
        self.0.take().expect("present until taken or dropped")
    }
}

impl<T: Send + 'static> std::ops::Deref for DropOffWorker<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0.as_ref().expect("present until taken or dropped")
    }
}

impl<T: Send + 'static> std::ops::DerefMut for DropOffWorker<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0.as_mut().expect("present until taken or dropped")
    }
}

impl<T: Send + 'static> Drop for DropOffWorker<T> {
    fn drop(&mut self) {
        if let Some(value) = self.0.take() {
            match tokio::runtime::Handle::try_current() {
                // A runtime shutting down drops the task unrun, and with it the value, here.
                Ok(rt) => drop(rt.spawn_blocking(move || drop(value))),
                Err(_) => drop(value),
            }
        }
    }
}

/// The most a pooled sandbox's `code/` tmpfs holds for a function's input (JSON), in bytes.
const MEMBER_INPUT_MAX_BYTES: u64 = 64 << 20;

/// Writes `bytes` to a new file at `path`, mode 0444: created `O_EXCL` (never through a symlink
/// or into a file that is there already) and its mode set on the descriptor (whatever the umask).
fn write_ro(path: &Path, bytes: &[u8]) -> Result<(), PrepareError> {
    use std::io::Write as _;
    let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(io_err("create", path))?;
    f.write_all(bytes).map_err(io_err("write", path))?;
    f.set_permissions(fs::Permissions::from_mode(0o444)).map_err(io_err("chmod", path))
}

fn ignore_not_found(e: io::Error) -> io::Result<()> {
    if e.kind() == io::ErrorKind::NotFound {
        Ok(())
    } else {
        Err(e)
    }
}

/// Every ancestor of `dir` must have o+x for the container's unprivileged init to reach it.
pub(crate) fn check_searchable(dir: &Path) -> Result<(), PrepareError> {
    for a in dir.ancestors() {
        let meta = fs::metadata(a).map_err(io_err("stat", a))?;
        if meta.permissions().mode() & 0o001 == 0 {
            return Err(PrepareError::NotSearchable(a.to_owned()));
        }
    }
    Ok(())
}

/// The system root of a profile's runs: which directories, from where, what is hidden in them,
/// and the locks that keep them from garbage collection while the run lives.
pub(crate) struct System {
    /// Bound read-only at the same paths ([`SpawnSpec::system_dirs`]).
    pub(crate) dirs: Vec<PathBuf>,
    /// The base's root filesystem they come from; `None`: the host's ([`SpawnSpec::system_root`]).
    pub(crate) root: Option<PathBuf>,
    /// Directories hidden ([`SpawnSpec::masked_dirs`]).
    pub(crate) masked: Vec<String>,
    /// Shared locks on the base's and the environment's directories ([`crate::base::hold`]).
    pub(crate) held: Vec<nix::fcntl::Flock<fs::File>>,
}

/// The system root of `profile`'s runs: the host's `[runtime] system_dirs` (with the host's
/// Python package directories hidden from Python), or, for an environment on a base, the base's
/// root filesystem ([`crate::base::BASE_SYSTEM_DIRS`] below `<base>/rootfs`, nothing hidden:
/// the base holds only what its spec lists).
/// Errors: [`PrepareError::Environment`] when the environment's base is not installed.
pub(crate) fn system_of(opts: &EngineOptions, profile: &sandbox_core::Profile, language: Language) -> Result<System, PrepareError> {
    let rt = &opts.config.runtime;
    let (env_dir, base_dir) = installed_dirs(opts, profile)?;
    let mut held = Vec::new();
    if let Some(dir) = &env_dir {
        held.extend(crate::base::hold(dir).ok());
    }
    let Some(dir) = base_dir else {
        return Ok(System {
            dirs: rt.system_dirs.clone(),
            root: None,
            // The host's Python package directories: a run imports its environment's packages only.
            masked: match language {
                Language::Python => rt.python_hidden_dirs.iter().map(|d| d.display().to_string()).collect(),
                Language::Typescript => Vec::new(),
            },
            held,
        });
    };
    held.push(crate::base::hold(&dir).map_err(io_err("lock", &dir))?);
    Ok(System { dirs: crate::base::BASE_SYSTEM_DIRS.iter().map(PathBuf::from).collect(), root: Some(dir.join("rootfs")), masked: Vec::new(), held })
}

/// The installed directories a run of `profile` binds: its environment's (`None` without one,
/// or when it is not installed) and its environment's base (`None`: the host's root).
/// Errors: [`PrepareError::Environment`] when the environment's base is not installed.
fn installed_dirs(opts: &EngineOptions, profile: &sandbox_core::Profile) -> Result<(Option<PathBuf>, Option<PathBuf>), PrepareError> {
    let env = profile.environment.as_ref().and_then(|name| opts.config.environments.get(name).map(|e| (name, e)));
    let env_dir = profile.environment.as_ref().and_then(|name| opts.environment_dir(name));
    let Some((name, base)) = env.and_then(|(name, e)| crate::base::base_of(e).map(|b| (name, b))) else {
        return Ok((env_dir, None));
    };
    let bases = crate::environment::Environments::for_runtime(&opts.config.runtime, &opts.data_dir).bases();
    // An environment on an image runs on the base it was built on (its manifest names it; the
    // image's source link may name a newer image's by now); while it is being built, on the one
    // the link names. Resolved once: the run holds and binds that base.
    let built_on = env_dir.as_deref().filter(|_| base.starts_with("oci-source-")).and_then(crate::environment::base_of_installed);
    let base = built_on.unwrap_or_else(|| bases.resolve(&base));
    let dir = bases.installed(&base).ok_or_else(|| {
        PrepareError::Environment(format!(
            "base {base} of environment {name:?} is not installed in {} (`{}` installs it)",
            bases.dir().display(),
            opts.suggest(&format!("env install {name}"))
        ))
    })?;
    Ok((env_dir, Some(dir)))
}

/// Which installation of its environment and base a run of `profile` would bind now: the
/// (device, inode) of each directory of [`installed_dirs`], in that order; empty where none
/// is installed. A reinstall (`env remove` and `env install`) or an image's rebuild makes new
/// directories, so a template started on the old ones sees a change here ([`crate::warm`]).
pub(crate) fn installation(opts: &EngineOptions, profile: &sandbox_core::Profile) -> Vec<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let Ok((env_dir, base_dir)) = installed_dirs(opts, profile) else { return Vec::new() };
    [env_dir, base_dir].into_iter().flatten().filter_map(|d| fs::metadata(d).ok()).map(|m| (m.dev(), m.ino())).collect()
}

/// Mounts the runtime adds before the profile's own: the profile's environment, read-only,
/// at [`ENV_MOUNT`] (its `node_modules` also at `/node_modules`, where Node's bare-specifier
/// resolution from /code finds it).
pub(crate) fn runtime_mounts(opts: &EngineOptions, profile: &sandbox_core::Profile, language: Language) -> Result<Vec<BindMount>, PrepareError> {
    let mut mounts = Vec::new();
    if let Some(name) = &profile.environment {
        let path = opts.environment_dir(name).ok_or_else(|| {
            PrepareError::Environment(format!(
                "environment {name:?} is not installed in {} (`{}` installs it)",
                opts.environments_place(),
                opts.suggest(&format!("env install {name}"))
            ))
        })?;
        mounts.push(BindMount { host: path.clone(), sandbox_path: ENV_MOUNT.into(), read_only: true });
        let modules = path.join("node").join("node_modules");
        if language == Language::Typescript && modules.is_dir() {
            mounts.push(BindMount { host: modules, sandbox_path: "/node_modules".into(), read_only: true });
        }
    }
    Ok(mounts)
}

/// The synthesized /etc, the harness and, unless this is a template's root, the code file and
/// the function's input. `uid` is the program's uid (named `sandbox` in /etc/passwd).
pub(crate) fn root_files(language: Language, uid: u32, code: Option<(&str, Option<&str>)>) -> Vec<RootFile> {
    let f = |path: &str, content: &str, mode: u32| RootFile { sandbox_path: path.into(), content: content.as_bytes().to_vec(), mode };
    let passwd = format!(
        "root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{SANDBOX_UID}:sandbox:/tmp:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    );
    vec![
        f("/etc/passwd", &passwd, 0o444),
        f("/etc/group", &format!("root:x:0:\nsandbox:x:{SANDBOX_UID}:\nnogroup:x:65534:\n"), 0o444),
        f("/etc/hostname", "sandbox\n", 0o444),
        f("/etc/hosts", "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n", 0o444),
        // No resolver: the network namespace is empty (allowlist profiles get one in `new`).
        f("/etc/resolv.conf", "", 0o444),
        f("/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n", 0o444),
    ]
    .into_iter()
    .chain(harness_files(language).iter().map(|(name, source)| f(&format!("{CODE_DIR}/{name}"), source, 0o444)))
    .chain(code.map(|(code, _)| f(&format!("{CODE_DIR}/{}", code_file(language)), code, 0o444)))
    .chain(code.and_then(|(_, input)| input).map(|json| f(INPUT_FILE, json, 0o444)))
    .collect()
}

/// Where empty execution directories wait for reuse: `<data_dir>/executions-pool/<n>`, `n` in
/// `0..DIR_POOL_SIZE`. An execution's directory on the data directory's disk filesystem is a
/// mount point (its tmpfs holds everything else); making one and removing it was two metadata
/// changes of the disk per execution, and the removal frees the directory's block, which on a
/// filesystem mounted with `discard` (ext4(5)) is a synchronous TRIM: ~0.17 ms at the end of
/// every `sandbox run` on this project's machines. A finished execution's directory is renamed
/// into the pool instead and the next execution renames it to its own name: one rename each
/// way, no block allocated or freed. The pool holds at most [`DIR_POOL_SIZE`] directories (the
/// peak of concurrent executions, up to that); it is state of the data directory like the audit
/// log, not an execution's leftover, and holds nothing but empty directories.
pub(crate) const DIR_POOL: &str = "executions-pool";

/// The most directories [`DIR_POOL`] keeps; a teardown that finds every place taken removes
/// its directory instead.
const DIR_POOL_SIZE: u32 = 16;

/// The data directory an execution directory (`<data_dir>/executions/<id>`) belongs to.
fn data_dir_of(dir: &Path) -> PathBuf {
    dir.parent().and_then(Path::parent).map(Path::to_owned).unwrap_or_default()
}

/// Renames a pooled directory ([`DIR_POOL`]) to `dir` (which must not exist); false when the
/// pool has none (or cannot be read), and the caller makes a new one. Concurrent takers race
/// by rename: each pooled directory goes to one of them.
fn take_pooled_dir(data_dir: &Path, dir: &Path) -> bool {
    let pool = data_dir.join(DIR_POOL);
    (0..DIR_POOL_SIZE).any(|n| {
        let from = pool.join(n.to_string());
        rename_noreplace(&from, dir)
    })
}

/// Empties `dir` of the owner file the execution wrote on the disk and renames it into the first
/// free place of the pool ([`DIR_POOL`]); false (the caller removes it) when anything else is in
/// it or every place is taken.
fn pool_dir(data_dir: &Path, dir: &Path) -> bool {
    for name in ["owner", "owner.tmp"] {
        if let Err(e) = fs::remove_file(dir.join(name)) {
            if e.kind() != io::ErrorKind::NotFound {
                return false;
            }
        }
    }
    let pool = data_dir.join(DIR_POOL);
    match fs::DirBuilder::new().mode(0o700).create(&pool) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return false,
        _ => {}
    }
    // Only an empty directory goes to the pool: a later execution mounts its tmpfs over it.
    match fs::read_dir(dir).map(|mut d| d.next().is_none()) {
        Ok(true) => {}
        _ => return false,
    }
    (0..DIR_POOL_SIZE).any(|n| {
        let to = pool.join(n.to_string());
        rename_noreplace(dir, &to)
    })
}

/// `renameat2(from, to, RENAME_NOREPLACE)` (Linux 3.15+; rustix's raw system call, so a musl
/// build has it too): true when `from` is now `to`; false when `to` exists, `from` does not, or
/// the filesystem refuses the flag.
fn rename_noreplace(from: &Path, to: &Path) -> bool {
    rustix::fs::renameat_with(rustix::fs::CWD, from, rustix::fs::CWD, to, rustix::fs::RenameFlags::NOREPLACE).is_ok()
}

/// Writes `dir/owner` ([`owner_line`]) aside and renames it into place.
pub(crate) fn write_owner(dir: &Path) -> Result<(), PrepareError> {
    let (owner_tmp, owner) = (dir.join("owner.tmp"), dir.join("owner"));
    fs::write(&owner_tmp, owner_line()).map_err(io_err("write", &owner_tmp))?;
    fs::rename(&owner_tmp, &owner).map_err(io_err("rename", &owner))
}

/// `"<pid> <start time>"` of this process ([`Owner`]), the content of an execution's `owner` file.
pub(crate) fn owner_line() -> String {
    format!("{}\n", Owner::current())
}

/// Removes what executions of dead owners left in `<data_dir>/executions` (a service killed
/// mid-run): kills their cgroups' processes, removes the cgroups, unmounts the workspaces,
/// deletes the directories. Executions whose owner process still runs are left alone.
/// Returns the ids swept; failures are logged and the sweep goes on.
pub(crate) fn sweep(opts: &EngineOptions, layout: Option<&Layout>) -> Vec<String> {
    let executions = opts.data_dir.join("executions");
    let Ok(entries) = fs::read_dir(&executions) else { return Vec::new() };
    let mut swept = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let dir = entry.path();
        let Some(id) = entry.file_name().to_str().map(str::to_owned) else { continue };
        match fs::read_to_string(dir.join("owner")).ok().as_deref().and_then(Owner::parse) {
            Some(o) if o.alive() => continue,
            Some(_) => {}
            // No owner yet, or not a whole one (a writer that does not rename it into place):
            // an execution being created right now by another process, unless the directory
            // is old (its creator died before writing the file).
            None => {
                // By its ctime, which a rename sets: a directory taken from the pool
                // ([`DIR_POOL`]) is as new as its execution, whatever its mtime says.
                let age = fs::metadata(&dir)
                    .ok()
                    .and_then(|m| std::time::UNIX_EPOCH.checked_add(Duration::from_secs(u64::try_from(std::os::unix::fs::MetadataExt::ctime(&m)).unwrap_or(0))))
                    .and_then(|t| t.elapsed().ok())
                    .unwrap_or_default();
                if age < Duration::from_secs(60) {
                    continue;
                }
            }
        }
        tracing::warn!(execution_id = %id, "sweeping what a dead service left behind");
        if let Some(layout) = layout {
            let cg = Cgroup::existing(layout, &opts.cgroup_parent, &id);
            if let Err(e) = cg.kill_all(Duration::from_secs(5)).and_then(|()| cg.remove()) {
                tracing::error!(execution_id = %id, error = %e, "cannot remove a leftover cgroup");
            }
        }
        // The execution's own tmpfs last (a template's directory has none).
        for mounted in ["workspace", "warm", "code", ""] {
            let _ = umount2(&dir.join(mounted), MntFlags::MNT_DETACH);
        }
        if let Err(e) = fs::remove_dir_all(&dir) {
            tracing::error!(execution_id = %id, error = %e, "cannot remove a leftover execution directory");
        }
        swept.push(id);
    }
    swept
}

/// Removes the cgroups of readiness self-tests (`selftest-<pid>-<n>` under `parent`,
/// `sandbox_runtime::selftest::run`) whose process is gone: one killed mid-test (a second
/// Ctrl-C of `sandbox doctor`, a SIGKILL) left its cgroup, which nothing else removes. A pid
/// that runs again as another process keeps its cgroup until that one ends.
pub(crate) fn sweep_selftests(layout: &Layout, parent: &str) {
    let mut dead = std::collections::BTreeSet::new();
    for dir in Cgroup::existing(layout, parent, "").dirs() {
        let Ok(entries) = fs::read_dir(dir) else { continue };
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix("selftest-").and_then(|rest| rest.split('-').next()).and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|pid| sandbox_runtime::process::start_time(pid).is_none()) {
                dead.insert(name);
            }
        }
    }
    for name in dead {
        tracing::warn!(cgroup = %name, "removing the cgroup of a self-test whose process died");
        let cg = Cgroup::existing(layout, parent, &name);
        if let Err(e) = cg.kill_all(Duration::from_secs(5)).and_then(|()| cg.remove()) {
            tracing::error!(cgroup = %name, error = %e, "cannot remove a leftover self-test cgroup");
        }
    }
}

/// The seccomp filter every sandbox loads (`sandbox_runtime::seccomp_program`, built with the
/// binary), for the spawn spec.
pub(crate) fn seccomp_bpf() -> Vec<u8> {
    sandbox_runtime::seccomp_program().to_vec()
}

/// `spec` as the frame sent on a control socket ([`SpawnSpec::frame`]: a JSON line, then the
/// root files' bytes). To our own binary started as the helper (`for_helper`), the seccomp
/// program is left out: it embeds the same one, built with it (init then loads that), and its
/// instructions as JSON numbers cost both sides time (~0.3 ms for the two programs of before).
/// A template's child gets it: it runs the warm library, another build artifact.
/// A template's child gets nothing else it does not read ([`SpawnSpec::for_warm_child`]: no
/// host path, no root file), since its program is a fork of it.
pub(crate) fn spec_frame(spec: &mut SpawnSpec, for_helper: bool) -> Vec<u8> {
    if for_helper {
        let bpf = std::mem::take(&mut spec.seccomp_bpf);
        let frame = spec.frame();
        spec.seccomp_bpf = bpf;
        frame
    } else {
        spec.for_warm_child().frame()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_frame_leaves_the_seccomp_program_to_our_own_helper_and_keeps_the_spec_whole() {
        let mut spec = SpawnSpec { hostname: "sandbox".into(), seccomp_bpf: seccomp_bpf(), ..Default::default() };
        assert!(!spec.seccomp_bpf.is_empty() && spec.seccomp_bpf.len().is_multiple_of(8));
        let parse = |frame: &[u8]| SpawnSpec::from_frame(frame).unwrap();
        // Our binary as the helper: no program on the wire (its init loads the embedded one);
        // the root files' bytes follow the JSON as they are, text or not.
        let pyc = vec![0xa7, 0x0d, 0x0d, 0x0a, 0, 0xff, b'\n', b'"'];
        spec.root_files = vec![
            RootFile { sandbox_path: "/code/main.py".into(), content: "print(\"h\u{e9}\")\n".into(), mode: 0o444 },
            RootFile { sandbox_path: "/code/empty".into(), content: Vec::new(), mode: 0o444 },
            RootFile { sandbox_path: "/code/_sandbox_harness.pyc".into(), content: pyc.clone(), mode: 0o444 },
        ];
        let frame = spec_frame(&mut spec, true);
        let to_helper = parse(&frame);
        assert!(to_helper.seccomp_bpf.is_empty());
        assert_eq!(to_helper.hostname, "sandbox");
        let files: Vec<_> = to_helper.root_files.iter().map(|f| (f.sandbox_path.as_str(), f.content.as_slice(), f.mode)).collect();
        assert_eq!(
            files,
            [("/code/main.py", "print(\"h\u{e9}\")\n".as_bytes(), 0o444), ("/code/empty", &[][..], 0o444), ("/code/_sandbox_harness.pyc", &pyc[..], 0o444)]
        );
        assert!(frame.ends_with(&pyc), "the bytes follow the JSON as they are");
        assert_eq!(spec.seccomp_bpf, seccomp_bpf(), "the engine's copy keeps its program");
        // A template's child: the program goes with the spec, no host path or root file does.
        spec.workspace_dir = "/var/lib/sandbox/executions/x/workspace".into();
        spec.cgroup_join = vec!["/sys/fs/cgroup/pids/sandbox/x/tasks".into()];
        spec.mounts = vec![BindMount { host: "/srv/data".into(), sandbox_path: "/data".into(), read_only: true }];
        let frame = spec_frame(&mut spec, false);
        let to_child = parse(&frame);
        assert_eq!(to_child.seccomp_bpf, seccomp_bpf());
        assert_eq!((to_child.cgroup_join.len(), to_child.mounts[0].sandbox_path.as_str(), to_child.root_files.len()), (1, "/data", 0));
        let text = String::from_utf8(frame).unwrap();
        for host in ["/var/lib", "/sys/fs", "/srv", "/code"] {
            assert!(!text.contains(host), "{host} in {text}");
        }
    }
}
