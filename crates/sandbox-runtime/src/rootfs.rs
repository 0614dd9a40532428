//! The container's root filesystem, built by init inside its new mount namespace: a tmpfs root
//! holding read-only binds of the host's system directories, a synthesized /etc, the code,
//! /workspace (the engine's tmpfs), /tmp, a minimal /dev, a fresh /proc; then pivot_root and the
//! root made read-only. Nothing else of the host is reachable.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use crate::spec::{SpawnSpec, WARM_LIB_DIR, WARM_TREES};

use crate::step::StepError;

fn step<T, E: std::fmt::Display>(name: &'static str, what: &Path, r: Result<T, E>) -> Result<T, StepError> {
    r.map_err(|e| StepError::new(name, format!("{}: {e}", what.display())))
}

/// Device nodes bound from the host's /dev.
const DEVICES: [&str; 5] = ["null", "zero", "full", "random", "urandom"];

/// /proc entries hidden behind /dev/null (as container runtimes' default masked paths do).
/// Docker's masked /proc paths (moby `oci/defaults.go`: acpi, asound, interrupts, kcore, keys,
/// latency_stats, timer_list, timer_stats, sched_debug, scsi) plus sysrq-trigger and kallsyms:
/// files are covered by /dev/null, directories by an empty read-only tmpfs.
const PROC_MASKED: [&str; 12] =
    ["acpi", "asound", "interrupts", "kcore", "keys", "latency_stats", "timer_list", "timer_stats", "sched_debug", "scsi", "sysrq-trigger", "kallsyms"];

/// Builds the root and pivots into it. Runs as root of the container's user namespace.
pub(crate) fn build(spec: &SpawnSpec) -> Result<(), StepError> {
    let root = spec.root_dir.as_path();
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    // Keep our mount changes from propagating back to the host.
    step("make_private", Path::new("/"), mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>))?;
    // The new root: a small tmpfs that only holds mount points, /etc and the code.
    // Sized to what it holds (code, harness, input) plus room for mount points.
    let held: usize = spec.root_files.iter().map(|f| f.content.len()).sum();
    let root_size = format!("size={},mode=0755", (held as u64).saturating_add(16 << 20));
    step("root_tmpfs", root, mount(Some("tmpfs"), root, Some("tmpfs"), nosuid_nodev, Some(root_size.as_str())))?;

    // The system directories: the host's, or those of the environment's base (an unpacked root
    // filesystem), bound at the same paths either way.
    // A base's directories are mounted as overlays (`PathHider`), so that mountinfo does not name
    // where the service keeps its bases; the host's own are binds (their paths are the same
    // inside).
    let from = spec.system_root.as_deref().unwrap_or(Path::new("/"));
    let mut hider = PathHider::new(root);
    let mut base_hider = spec.system_root.is_some().then_some(&mut hider);
    for dir in &spec.system_dirs {
        bind_system_dir(root, from, dir, base_hider.as_deref_mut())?;
    }
    mkdir(root, "/etc")?;
    for file in &spec.etc_binds {
        let source = source_of(from, file);
        // A symlink of a base would be bound as what it names on the host: only plain files and
        // directories reached without one are bound, a base's symlinks are skipped.
        let Ok(meta) = fs::metadata(&source) else { continue };
        if spec.system_root.is_some() && through_symlink(from, file) {
            continue;
        }
        let target = inside(root, file.to_str().unwrap_or("/etc/missing"));
        match base_hider.as_deref_mut() {
            // A base's small /etc files are copied into the root (no mount, no path shown).
            Some(_) if meta.is_file() && meta.len() <= BASE_ETC_FILE_COPY_MAX => {
                let bytes = step("etc_copy", &source, fs::read(&source))?;
                step("etc_copy", &target, fs::write(&target, bytes))?;
                step("etc_copy", &target, fs::set_permissions(&target, fs::Permissions::from_mode(0o444)))?;
            }
            Some(h) if meta.is_dir() => {
                step("mount_dir", &target, fs::DirBuilder::new().recursive(true).mode(0o755).create(&target))?;
                if !h.mount_ro(&source, &target)? {
                    bind_ro(&source, &target, true)?;
                }
            }
            _ => bind_ro(&source, &target, meta.is_dir())?,
        }
    }
    let mut made: Vec<PathBuf> = Vec::new();
    for f in &spec.root_files {
        let path = inside(root, &f.sandbox_path);
        if let Some(parent) = path.parent().filter(|p| !made.iter().any(|m| m == p)) {
            step("root_file", parent, fs::DirBuilder::new().recursive(true).mode(0o755).create(parent))?;
            made.push(parent.to_owned());
        }
        let mut file = step("root_file", &path, fs::File::create(&path))?;
        step("root_file", &path, std::io::Write::write_all(&mut file, &f.content))?;
        step("root_file", &path, file.set_permissions(fs::Permissions::from_mode(f.mode)))?;
    }
    // UTC unless the program sets TZ.
    let localtime = inside(root, "/etc/localtime");
    if !localtime.exists() {
        step("localtime", &localtime, std::os::unix::fs::symlink("/usr/share/zoneinfo/UTC", &localtime))?;
    }

    let ws = mkdir(root, "/workspace")?;
    step("workspace", &ws, mount(Some(&spec.workspace_dir), &ws, None::<&str>, MsFlags::MS_BIND, None::<&str>))?;
    remount_bind(&ws, nosuid_nodev)?;

    let tmp = mkdir(root, "/tmp")?;
    let size = format!("size={},mode=1777", spec.tmp_bytes);
    step("tmp", &tmp, mount(Some("tmpfs"), &tmp, Some("tmpfs"), nosuid_nodev, Some(size.as_str())))?;

    build_dev(root, spec.tmp_bytes)?;

    mount_proc(&mkdir(root, "/proc")?, &template_sysctls(spec))?;

    for dir in &spec.masked_dirs {
        let target = inside(root, dir);
        if target.is_dir() {
            let flags = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            step("mask", &target, mount(Some("tmpfs"), &target, Some("tmpfs"), flags, Some("size=4k,mode=0555")))?;
        }
    }
    for m in &spec.mounts {
        let target = inside(root, &m.sandbox_path);
        step("mount_dir", &target, fs::DirBuilder::new().recursive(true).mode(0o755).create(&target))?;
        if m.read_only {
            if !hider.mount_ro(&m.host, &target)? {
                bind_ro(&m.host, &target, true)?;
            }
        } else {
            step("mount_rw", &target, mount(Some(&m.host), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>))?;
            remount_bind(&target, nosuid_nodev)?;
        }
    }

    hider.finish()?;

    // pivot_root(".", ".") stacks the old root under the new one; detaching it leaves only ours.
    step("chdir_root", root, nix::unistd::chdir(root))?;
    step("pivot_root", root, nix::unistd::pivot_root(".", "."))?;
    step("umount_old_root", root, umount2(".", MntFlags::MNT_DETACH))?;
    step("chdir_root", root, nix::unistd::chdir("/"))?;
    step("root_readonly", Path::new("/"), mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | nosuid_nodev, None::<&str>))?;
    Ok(())
}

/// The sysctls a template's init writes into its user namespace before /proc/sys turns
/// read-only ([`mount_proc`]): `user/max_inotify_instances` and `user/max_inotify_watches`, each
/// the host's per-user limit (`fs.inotify.max_user_instances`, `max_user_watches`) divided by
/// the template's children at most plus one (`template_children`), at least 1. Every child of
/// every template runs in a user namespace owned by the same host uid (`uid_base`), and the
/// kernel counts each inotify instance and watch against that owner at the host level as well
/// as against the child's own uid in the namespace (ucounts, kernel/ucount.c): without a share
/// each, one warm execution could take the host's 128 instances and deny inotify to every warm
/// execution beside it until it ends. Each child runs as a uid of its own in the namespace, so
/// each gets its share; a cold execution's namespace has an owner of its own and keeps the
/// host's limit. Nothing for a sandbox that is not a template, or when the host's limits
/// cannot be read (the host's /proc, before the fresh one is mounted).
fn template_sysctls(spec: &SpawnSpec) -> Vec<(&'static str, String)> {
    if spec.template_slots == 0 || spec.template_children == 0 {
        return Vec::new();
    }
    let share = InotifyShare::of(spec.template_children);
    [("user/max_inotify_instances", share.instances), ("user/max_inotify_watches", share.watches)]
        .into_iter()
        .filter_map(|(name, n)| Some((name, n?.to_string())))
        .collect()
}

/// What each warm execution gets of the host's inotify limits (`template_sysctls`): the
/// host's per-user `fs.inotify.max_user_instances` and `max_user_watches` divided by the
/// templates' children at most plus one. A limit the host's /proc does not give is `None`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InotifyShare {
    /// `fs.inotify.max_user_instances`, the host's per-user limit of inotify instances.
    pub host_instances: Option<u64>,
    /// `fs.inotify.max_user_watches`, the host's per-user limit of watches.
    pub host_watches: Option<u64>,
    /// How many ways the limits are divided: the templates' children at most plus one.
    pub shares: u64,
    /// Instances each warm execution may hold (`user.max_inotify_instances` in its namespace),
    /// at least 1.
    pub instances: Option<u64>,
    /// Watches each warm execution may hold (`user.max_inotify_watches`), at least 1.
    pub watches: Option<u64>,
}

impl InotifyShare {
    /// The share of each of `children` template children (every template of a service, children
    /// forked ahead included), from the host's limits read now.
    pub fn of(children: u32) -> Self {
        let read = |file: &str| fs::read_to_string(file).ok()?.trim().parse::<u64>().ok();
        let (host_instances, host_watches) = (read("/proc/sys/fs/inotify/max_user_instances"), read("/proc/sys/fs/inotify/max_user_watches"));
        let shares = u64::from(children) + 1;
        let each = |limit: Option<u64>| limit.map(|l| (l / shares).max(1));
        Self { host_instances, host_watches, shares, instances: each(host_instances), watches: each(host_watches) }
    }
}

/// Mounts a fresh /proc of the current pid namespace at `proc_dir`, with the masked entries
/// behind /dev/null and the kernel-tunable subtrees read-only. Each of `sysctls`, a path under
/// /proc/sys and a value, is written first, while /proc/sys is still writable (the caller's
/// capabilities in its namespaces decide whether the kernel takes it).
/// Errors: step `proc`, `proc_mask` or `sysctl` (naming the file), or a bind's.
pub(crate) fn mount_proc(proc_dir: &Path, sysctls: &[(&str, String)]) -> Result<(), StepError> {
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    // hidepid=invisible: the program cannot even see pid 1 (root of the namespace).
    step("proc", proc_dir, mount(Some("proc"), proc_dir, Some("proc"), nosuid_nodev | MsFlags::MS_NOEXEC, Some("hidepid=invisible")))?;
    for (name, value) in sysctls {
        let file = proc_dir.join("sys").join(name);
        step("sysctl", &file, fs::write(&file, value))?;
    }
    for name in PROC_MASKED {
        let target = proc_dir.join(name);
        match fs::metadata(&target) {
            Ok(m) if m.is_dir() => {
                let flags = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
                step("proc_mask", &target, mount(Some("tmpfs"), &target, Some("tmpfs"), flags, Some("size=4k,mode=0555")))?;
            }
            Ok(_) => step("proc_mask", &target, mount(Some("/dev/null"), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>))?,
            Err(_) => {}
        }
    }
    for sub in ["sys", "bus", "fs", "irq"] {
        let target = proc_dir.join(sub);
        if target.exists() {
            bind_ro(&target, &target, true)?;
        }
    }
    Ok(())
}

/// The mounts of a template's forked child, in the new mount namespace it just unshared (a copy
/// of the template's: the read-only root with the environment): its own execution's workspace
/// at /workspace, code at /code, /etc/passwd and /etc/group (detached copies of the engine's
/// mounts, on the descriptors [`WARM_TREES`] names), fresh /tmp and /dev/shm (the template's
/// /tmp leaves with the warm-start library's mount on it, [`WARM_LIB_DIR`]). /proc is mounted
/// later, by the child's pid 1 (it must be inside the new pid namespace).
pub(crate) fn warm_child(spec: &SpawnSpec) -> Result<(), StepError> {
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    step("make_private", Path::new("/"), mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>))?;
    // The template's own /workspace, /tmp and /dev/shm go; the execution's take their place.
    step("workspace", Path::new("/workspace"), umount2("/workspace", MntFlags::MNT_DETACH))?;
    for (fd, target) in WARM_TREES {
        let target = Path::new(target);
        let tree = step("warm_tree", target, crate::sys::take_fd(fd))?;
        step("warm_tree", target, crate::sys::move_mount_to(std::os::fd::AsFd::as_fd(&tree), target))?;
        let flags = if target == Path::new("/workspace") { nosuid_nodev } else { MsFlags::MS_RDONLY | nosuid_nodev };
        remount_bind(target, flags)?;
    }
    let size = format!("size={},mode=1777", spec.tmp_bytes);
    for tmp in ["/tmp", "/dev/shm"] {
        let flags = if tmp == "/tmp" { nosuid_nodev } else { nosuid_nodev | MsFlags::MS_NOEXEC };
        step("tmp", Path::new(tmp), umount2(tmp, MntFlags::MNT_DETACH))?;
        step("tmp", Path::new(tmp), mount(Some("tmpfs"), tmp, Some("tmpfs"), flags, Some(size.as_str())))?;
    }
    // The warm-start library's mount was on the template's /tmp, detached above with it (mounts
    // of the template's own user namespace, so not locked): neither it nor its mount point is left.
    // Checked: a child that could still reach the library fails rather than runs.
    if Path::new(WARM_LIB_DIR).symlink_metadata().is_ok() {
        return Err(StepError::new("hide", format!("{WARM_LIB_DIR}: still present after the template's /tmp was detached")));
    }
    step("chdir", Path::new(&spec.cwd), nix::unistd::chdir(spec.cwd.as_str()))?;
    Ok(())
}

fn build_dev(root: &Path, shm_bytes: u64) -> Result<(), StepError> {
    let dev = mkdir(root, "/dev")?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    step("dev", &dev, mount(Some("tmpfs"), &dev, Some("tmpfs"), flags, Some("size=64k,mode=0755")))?;
    for name in DEVICES {
        let target = dev.join(name);
        step("dev_node", &target, fs::write(&target, b""))?;
        let host = PathBuf::from("/dev").join(name);
        step("dev_node", &target, mount(Some(&host), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>))?;
    }
    for (link, to) in [("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")] {
        let path = dev.join(link);
        step("dev_link", &path, std::os::unix::fs::symlink(to, &path))?;
    }
    let shm = dev.join("shm");
    step("dev_shm", &shm, fs::DirBuilder::new().mode(0o1777).create(&shm))?;
    let size = format!("size={shm_bytes},mode=1777");
    step("dev_shm", &shm, mount(Some("tmpfs"), &shm, Some("tmpfs"), flags | MsFlags::MS_NODEV, Some(size.as_str())))?;
    Ok(())
}

/// `path` (absolute, as the sandbox sees it) below the host directory `from` (`/` for the host's own).
/// Whether `path` below `from` is a symbolic link or reached through one. A base's links (an
/// image's, whatever it says) are for the sandbox to resolve: on the host, `etc -> /root` would
/// bind the host's files.
fn through_symlink(from: &Path, path: &Path) -> bool {
    let mut at = from.to_owned();
    for part in path.components().filter(|c| matches!(c, std::path::Component::Normal(_))) {
        at.push(part);
        if fs::symlink_metadata(&at).map_or(true, |m| m.file_type().is_symlink()) {
            return true;
        }
    }
    false
}

fn source_of(from: &Path, path: &Path) -> PathBuf {
    from.join(path.strip_prefix("/").unwrap_or(path))
}

/// Binds the system directory `dir` of the root `from` (`/`: the host's) read-only at the same
/// path, or copies it as a symlink if it is one (merged-/usr systems have `/bin -> usr/bin`).
/// Missing directories are skipped. With `hider` (a base's directories), an overlay that does not
/// show the base's host path ([`PathHider`]) where the kernel allows one.
fn bind_system_dir(root: &Path, from: &Path, dir: &Path, hider: Option<&mut PathHider>) -> Result<(), StepError> {
    let source = source_of(from, dir);
    let Ok(meta) = fs::symlink_metadata(&source) else { return Ok(()) };
    let target = inside(root, dir.to_str().unwrap_or("/missing"));
    if meta.file_type().is_symlink() {
        // Copied as text, resolved inside the sandbox: a base's `/lib64 -> usr/lib64` names the
        // base's own /usr there, never a host path.
        let to = step("system_link", &source, fs::read_link(&source))?;
        if let Some(parent) = target.parent() {
            step("system_link", parent, fs::DirBuilder::new().recursive(true).mode(0o755).create(parent))?;
        }
        return step("system_link", &target, std::os::unix::fs::symlink(to, &target));
    }
    if let Some(h) = hider {
        step("mount_dir", &target, fs::DirBuilder::new().recursive(true).mode(0o755).create(&target))?;
        if h.mount_ro(&source, &target)? {
            return Ok(());
        }
    }
    bind_ro(&source, &target, true)
}

/// A base's `/etc` file up to this size (bytes) is copied into the sandbox's root rather than
/// bound (`mime.types` is ~60 KiB).
const BASE_ETC_FILE_COPY_MAX: u64 = 1 << 20;

/// Read-only mounts of host directories that do not show the host path in the sandbox's
/// `/proc/self/mountinfo`.
///
/// A bind mount's mountinfo line gives its root as the path inside the source filesystem (field
/// 4, proc(5)): binding `/var/lib/sandbox/environments/python-analysis-<hash>` tells the program
/// where the service keeps its data. An overlay (overlayfs(5)) is a filesystem of its own whose
/// root is `/`; its only record of the source is its `lowerdir=` option, which the kernel shows
/// as it was given: `/proc/self/fd/N`, a descriptor of init's that no longer exists once the
/// program runs. An overlay without an upper layer needs two lower layers, so the second
/// is an empty tmpfs mounted for the purpose and gone before the program starts.
///
/// Sources that are the root of their own filesystem (a tmpfs such as a pooled sandbox's code
/// directory, whose files are written after the mount) show only `/` and stay binds, as do
/// sources with submounts (an overlay would hide them). Where the kernel refuses overlayfs in a
/// user namespace (before 5.11) or on the source's filesystem, [`mount_ro`](Self::mount_ro)
/// answers `false` and the caller binds as before: the path shows, the isolation is the same.
struct PathHider {
    empty: PathBuf,
    /// The empty layer's descriptor, once mounted; `None` before the first use.
    empty_fd: Option<std::os::fd::OwnedFd>,
    /// The kernel refused an overlay once: bind the rest without trying again.
    refused: bool,
}

impl PathHider {
    fn new(root: &Path) -> Self {
        PathHider { empty: root.join(".sandbox-empty-layer"), empty_fd: None, refused: false }
    }

    /// Mounts `src` read-only (and nosuid, nodev) at `target` as an overlay; `Ok(false)` when
    /// the source must or can only be bound instead.
    fn mount_ro(&mut self, src: &Path, target: &Path) -> Result<bool, StepError> {
        use nix::fcntl::{open, OFlag};
        use nix::sys::stat::Mode;
        use std::os::fd::AsRawFd;
        if self.refused {
            return Ok(false);
        }
        let own_root = match (fs::metadata(src), fs::metadata(src.join(".."))) {
            (Ok(m), Ok(parent)) => std::os::unix::fs::MetadataExt::dev(&m) != std::os::unix::fs::MetadataExt::dev(&parent),
            _ => true,
        };
        if own_root || src == Path::new("/") || !submounts(src)?.is_empty() {
            return Ok(false);
        }
        let dir = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        if self.empty_fd.is_none() {
            step("empty_layer", &self.empty, fs::DirBuilder::new().mode(0o755).create(&self.empty))?;
            let flags = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            step("empty_layer", &self.empty, mount(Some("tmpfs"), &self.empty, Some("tmpfs"), flags, Some("size=4k,mode=0555")))?;
            self.empty_fd = Some(step("empty_layer", &self.empty, open(&self.empty, dir, Mode::empty()))?);
        }
        let empty_fd = self.empty_fd.as_ref().map(AsRawFd::as_raw_fd).unwrap_or(-1);
        let src_fd = step("overlay_source", src, open(src, dir, Mode::empty()))?;
        let data = format!("lowerdir=/proc/self/fd/{}:/proc/self/fd/{empty_fd}", src_fd.as_raw_fd());
        let flags = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        match mount(Some("overlay"), target, Some("overlay"), flags, Some(data.as_str())) {
            Ok(()) => Ok(true),
            Err(_) => {
                self.refused = true;
                Ok(false)
            }
        }
    }

    /// Removes the empty layer from the root (the overlays keep their own reference to it).
    fn finish(self) -> Result<(), StepError> {
        if self.empty_fd.is_some() {
            drop(self.empty_fd);
            step("empty_layer", &self.empty, umount2(&self.empty, MntFlags::MNT_DETACH))?;
            step("empty_layer", &self.empty, fs::remove_dir(&self.empty))?;
        }
        Ok(())
    }
}

/// Bind-mounts `src` on `target` (created as a directory or an empty file) and makes it read-only.
fn bind_ro(src: &Path, target: &Path, is_dir: bool) -> Result<(), StepError> {
    // The mount point: made here unless it exists; its parents only when missing.
    let make = || if is_dir { fs::DirBuilder::new().mode(0o755).create(target) } else { fs::File::create_new(target).map(drop) };
    match make() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = target.parent() {
                step("bind_target", parent, fs::DirBuilder::new().recursive(true).mode(0o755).create(parent))?;
            }
            step("bind_target", target, make())?;
        }
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(StepError::new("bind_target", format!("{}: {e}", target.display()))),
        _ => {}
    }
    step("bind", target, mount(Some(src), target, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>))?;
    // Read-only all the way down: a recursive bind copies the source's submounts with their own
    // flags (a writable mount under a read-only host directory would stay writable). One
    // recursive mount_setattr where the kernel has it; before 5.12, a remount of the bind and of
    // each submount /proc/self/mountinfo lists.
    const RDONLY_NOSUID_NODEV: u64 = 0x1 | 0x2 | 0x4;
    match crate::sys::mount_setattr_recursive(target, RDONLY_NOSUID_NODEV) {
        Ok(()) => return Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
        Err(e) => return Err(StepError::new("bind_readonly", format!("{}: {e}", target.display()))),
    }
    let ro = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    remount_bind(target, ro)?;
    if is_dir {
        for sub in submounts(target)? {
            remount_bind(&sub, ro)?;
        }
    }
    Ok(())
}

/// Mount points strictly below `dir`, from /proc/self/mountinfo (octal escapes decoded).
fn submounts(dir: &Path) -> Result<Vec<PathBuf>, StepError> {
    let info = step("mountinfo", Path::new("/proc/self/mountinfo"), fs::read_to_string("/proc/self/mountinfo"))?;
    let prefix = dir.as_os_str().as_encoded_bytes();
    let mut out = Vec::new();
    for line in info.lines() {
        let Some(field) = line.split(' ').nth(4) else { continue };
        let path = unescape_mountinfo(field);
        let bytes = path.as_os_str().as_encoded_bytes();
        if bytes.len() > prefix.len() && bytes.starts_with(prefix) && bytes[prefix.len()] == b'/' {
            out.push(path);
        }
    }
    Ok(out)
}

/// Decodes mountinfo's `\ooo` escapes (space, tab, newline, backslash).
fn unescape_mountinfo(field: &str) -> PathBuf {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = u16::from(b[i + 1] - b'0') * 64 + u16::from(b[i + 2] - b'0') * 8 + u16::from(b[i + 3] - b'0');
            out.push(u8::try_from(v).unwrap_or(b'?'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from(String::from_utf8_lossy(&out).into_owned()))
}

/// Remounts the bind mount at `target` adding `flags`, keeping the flags the kernel locked when
/// the mount entered our user namespace (a remount that drops them fails with EPERM).
fn remount_bind(target: &Path, flags: MsFlags) -> Result<(), StepError> {
    let current = step("statvfs", target, nix::sys::statvfs::statvfs(target))?;
    let locked = MsFlags::from_bits_truncate(
        libc::c_ulong::try_from(current.flags().bits()).unwrap_or(0)
            & (MsFlags::MS_RDONLY
                | MsFlags::MS_NOSUID
                | MsFlags::MS_NODEV
                | MsFlags::MS_NOEXEC
                | MsFlags::MS_NOATIME
                | MsFlags::MS_NODIRATIME
                | MsFlags::MS_RELATIME)
                .bits(),
    );
    step("remount", target, mount(None::<&str>, target, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REMOUNT | flags | locked, None::<&str>))
}

fn mkdir(root: &Path, path: &str) -> Result<PathBuf, StepError> {
    let p = inside(root, path);
    match fs::DirBuilder::new().mode(0o755).create(&p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => step("mkdir", &p, fs::DirBuilder::new().recursive(true).mode(0o755).create(&p))?,
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(StepError::new("mkdir", format!("{}: {e}", p.display()))),
        _ => {}
    }
    Ok(p)
}

/// `root` joined with the absolute sandbox path `path`.
fn inside(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}
