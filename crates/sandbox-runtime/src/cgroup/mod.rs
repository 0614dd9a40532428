//! Per-execution cgroups on cgroup v2 (unified) and v1/hybrid hosts: create with limits,
//! read usage, kill everything inside, remove. The controllers used are memory, cpu
//! (+cpuacct on v1) and pids. Layouts are plain directory paths, so the v2 file interface is
//! testable on any directory.

mod place;
mod v1;
mod v2;

pub use place::{place, Placement, EXECUTIONS, SERVICE_LEAF};

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Which cgroup hierarchy holds the controllers, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// Unified hierarchy mounted at `root` (e.g. `/sys/fs/cgroup`) with memory, cpu and pids available.
    V2 {
        /// Mount point of the cgroup2 filesystem.
        root: PathBuf,
    },
    /// Legacy hierarchies, one mount point per controller (they may be the same directory when co-mounted).
    V1 {
        /// Mount point holding the memory controller.
        memory: PathBuf,
        /// Mount point holding the cpu controller.
        cpu: PathBuf,
        /// Mount point holding the cpuacct controller.
        cpuacct: PathBuf,
        /// Mount point holding the pids controller.
        pids: PathBuf,
    },
}

/// What [`Layout::at_usual_places`] asks of the host (the test suite answers for a host it
/// describes).
pub struct UsualPlaces<'a> {
    /// The file system type (`statfs(2)`'s `f_type`) of the mount holding a path; `None` when it
    /// cannot be read.
    pub fs_type: &'a dyn Fn(&Path) -> Option<nix::sys::statfs::FsType>,
    /// Whether a path exists (not followed if it is a link).
    pub exists: &'a dyn Fn(&Path) -> bool,
    /// The target of a path that is a symbolic link; `None` for anything else.
    pub read_link: &'a dyn Fn(&Path) -> Option<PathBuf>,
    /// The text of a v2 root's `cgroup.controllers`.
    pub controllers: &'a dyn Fn(&Path) -> Option<String>,
    /// The text of `/proc/self/cgroup`.
    pub self_cgroup: &'a dyn Fn() -> Option<String>,
}

impl UsualPlaces<'static> {
    /// This host, through the system calls.
    pub const HOST: Self =
        Self { fs_type: &host_fs_type, exists: &host_exists, read_link: &host_read_link, controllers: &host_controllers, self_cgroup: &host_self_cgroup };
}

fn host_self_cgroup() -> Option<String> {
    fs::read_to_string("/proc/self/cgroup").ok()
}

fn host_fs_type(p: &Path) -> Option<nix::sys::statfs::FsType> {
    nix::sys::statfs::statfs(p).ok().map(|s| s.filesystem_type())
}

fn host_exists(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok()
}

fn host_read_link(p: &Path) -> Option<PathBuf> {
    fs::read_link(p).ok()
}

fn host_controllers(root: &Path) -> Option<String> {
    fs::read_to_string(root.join("cgroup.controllers")).ok()
}

/// Limits written when a cgroup is created.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Memory cap in bytes; swap is capped to 0 on top of it.
    pub memory_max_bytes: u64,
    /// CPU cap in cores (quota = cores × period).
    pub cpu_max: f64,
    /// Most tasks (processes and threads).
    pub pids_max: u32,
}

/// Usage read after a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// User + system CPU time, in ms.
    pub cpu_time_ms: u64,
    /// Peak memory, in bytes (0 when the kernel does not report it).
    pub peak_memory_bytes: u64,
    /// OOM kills inside the cgroup.
    pub oom_kills: u64,
    /// Times a fork or clone failed at `pids.max`.
    pub pids_limit_hits: u64,
}

/// A cgroup failure, naming the file the kernel refused.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No usable cgroup hierarchy with memory, cpu and pids was found.
    #[error("no cgroup hierarchy with the memory, cpu and pids controllers: {0}")]
    Unavailable(String),
    /// Writing a control file failed.
    #[error("cannot write {value:?} to {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// What was written.
        value: String,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// Reading a control file failed.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// Creating or removing a cgroup directory failed.
    #[error("cannot {op} cgroup {path}")]
    Dir {
        /// `create` or `remove`.
        op: &'static str,
        /// The directory.
        path: PathBuf,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// Processes were still alive after repeated SIGKILL.
    #[error("cgroup {path} still has processes after kill: {pids:?}")]
    NotEmpty {
        /// The directory.
        path: PathBuf,
        /// The survivors.
        pids: Vec<i32>,
    },
}

impl Layout {
    /// Finds the hierarchy from `/proc/self/mountinfo`: v1 when the memory controller sits on a
    /// legacy mount (hybrid hosts), else v2 when a cgroup2 mount offers memory, cpu and pids.
    /// Errors: [`CgroupError::Unavailable`] saying what is missing.
    ///
    /// The usual places are looked at first ([`Layout::at_usual_places`], a dozen `statfs` and
    /// `stat` calls): the kernel formats every mount of the host for a read of mountinfo (~0.1
    /// ms with 20 mounts, ~0.3 with 80, more on a node running many containers), and every
    /// `sandbox run` probes the host. Only a layout found there that differs from them reads it.
    pub fn detect() -> Result<Self, CgroupError> {
        if let Some(layout) = Self::at_usual_places(&UsualPlaces::HOST) {
            return Ok(layout);
        }
        let info = fs::read_to_string("/proc/self/mountinfo").map_err(|source| CgroupError::Read { path: "/proc/self/mountinfo".into(), source })?;
        Self::from_mountinfo(&info, |root| fs::read_to_string(root.join("cgroup.controllers")).ok())
    }

    /// The layout under `/sys/fs/cgroup`, where systemd and the mainstream distributions mount
    /// it, as [`Layout::from_mountinfo`] would find it there; `None` when it is not there as
    /// expected (the caller reads mountinfo):
    /// - `/sys/fs/cgroup` a cgroup2 mount whose `cgroup.controllers` offers memory, cpu and
    ///   pids: v2 there (no v1 hierarchy can hold memory then: a controller sits in one
    ///   hierarchy).
    /// - else, when `/sys/fs/cgroup` is a tmpfs and `/proc/self/cgroup` shows memory, cpu,
    ///   cpuacct and pids on v1 hierarchies,
    ///   `/sys/fs/cgroup/{memory,cpu,cpuacct,pids}` each a cgroup (v1) mount holding its
    ///   controller: v1. A root cgroup shows its controller by a control file only it has
    ///   (`memory.limit_in_bytes`, `cpu.cfs_quota_us`, `cpuacct.usage`); the pids controller
    ///   has none in its root, so its mount is known by its name alone. A name that is a
    ///   symbolic link to a sibling (Debian's `cpu -> cpu,cpuacct`) stands for the sibling, the
    ///   mount point mountinfo names, so that co-mounted controllers get one path (and one
    ///   directory per execution).
    pub fn at_usual_places(probe: &UsualPlaces<'_>) -> Option<Self> {
        use nix::sys::statfs::{CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC, TMPFS_MAGIC};
        let root = Path::new("/sys/fs/cgroup");
        let root_type = (probe.fs_type)(root)?;
        if root_type == CGROUP2_SUPER_MAGIC {
            let have = (probe.controllers)(root)?;
            let have: Vec<&str> = have.split_whitespace().collect();
            return ["memory", "cpu", "pids"].iter().all(|c| have.contains(c)).then(|| Self::V2 { root: root.to_owned() });
        }
        // v1 hierarchies are mounted on a tmpfs there; below anything else (one hierarchy
        // mounted at /sys/fs/cgroup itself), a directory of its type need not be a mount.
        if root_type != TMPFS_MAGIC {
            return None;
        }
        // "4:memory:/user.slice": hierarchy 0 is v2's.
        let on_v1 = (probe.self_cgroup)()?
            .lines()
            .filter_map(|l| l.split_once(':').filter(|(id, _)| *id != "0").and_then(|(_, rest)| rest.split_once(':')).map(|(c, _)| c.to_owned()))
            .collect::<Vec<_>>()
            .join(",");
        let mount = |name: &str, control: Option<&str>| -> Option<PathBuf> {
            if !on_v1.split(',').any(|c| c == name) {
                return None;
            }
            let mut dir = root.join(name);
            if let Some(target) = (probe.read_link)(&dir) {
                let sibling = target.to_str().filter(|t| !t.is_empty() && !t.contains('/') && *t != "." && *t != "..")?;
                dir = root.join(sibling);
            }
            ((probe.fs_type)(&dir)? == CGROUP_SUPER_MAGIC && control.is_none_or(|c| (probe.exists)(&dir.join(c)))).then_some(dir)
        };
        Some(Self::V1 {
            memory: mount("memory", Some("memory.limit_in_bytes"))?,
            cpu: mount("cpu", Some("cpu.cfs_quota_us"))?,
            cpuacct: mount("cpuacct", Some("cpuacct.usage"))?,
            pids: mount("pids", None)?,
        })
    }

    /// [`Layout::detect`] on given mountinfo text; `controllers` reads a v2 root's `cgroup.controllers`.
    pub fn from_mountinfo(info: &str, controllers: impl Fn(&Path) -> Option<String>) -> Result<Self, CgroupError> {
        let mut v1 = std::collections::HashMap::new();
        let mut v2_roots = Vec::new();
        for line in info.lines() {
            // "36 25 0:31 / /sys/fs/cgroup/memory rw,... - cgroup cgroup rw,memory"
            let Some((left, right)) = line.split_once(" - ") else { continue };
            let mount_point = left.split(' ').nth(4).map(unescape_mountinfo);
            let mut r = right.split(' ');
            let (fstype, _source, options) = (r.next(), r.next(), r.next().unwrap_or(""));
            let Some(mp) = mount_point else { continue };
            match fstype {
                Some("cgroup") => {
                    for opt in options.split(',') {
                        if matches!(opt, "memory" | "cpu" | "cpuacct" | "pids") {
                            v1.entry(opt.to_owned()).or_insert_with(|| PathBuf::from(&mp));
                        }
                    }
                }
                Some("cgroup2") => v2_roots.push(PathBuf::from(mp)),
                _ => {}
            }
        }
        if v1.contains_key("memory") {
            let get = |c: &str| v1.get(c).cloned().ok_or_else(|| CgroupError::Unavailable(format!("the v1 {c} controller is not mounted")));
            return Ok(Self::V1 { memory: get("memory")?, cpu: get("cpu")?, cpuacct: get("cpuacct")?, pids: get("pids")? });
        }
        for root in v2_roots {
            let have = controllers(&root).unwrap_or_default();
            let have: Vec<&str> = have.split_whitespace().collect();
            if ["memory", "cpu", "pids"].iter().all(|c| have.contains(c)) {
                return Ok(Self::V2 { root });
            }
        }
        Err(CgroupError::Unavailable("neither a v1 memory hierarchy nor a cgroup2 mount with memory, cpu and pids".into()))
    }

    /// `v1` or `v2`.
    pub fn version(&self) -> &'static str {
        match self {
            Self::V1 { .. } => "v1",
            Self::V2 { .. } => "v2",
        }
    }
}

fn unescape_mountinfo(s: &str) -> String {
    s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

/// One execution's cgroup (one directory on v2, one per controller hierarchy on v1).
#[derive(Debug)]
pub struct Cgroup {
    layout: Layout,
    /// The directories, memory's first.
    dirs: Vec<PathBuf>,
}

impl Cgroup {
    /// Creates `<parent>/<name>` in each hierarchy of `layout` and writes `limits`
    /// (v2: `memory.max`, `memory.swap.max`, `cpu.max`, `pids.max`; v1: `memory.limit_in_bytes`,
    /// `memory.memsw.limit_in_bytes` where swap accounting exists, `cpu.cfs_quota_us`, `pids.max`).
    /// `parent` is created if missing (on v2 with the controllers enabled for its children).
    /// Errors: [`CgroupError::Dir`] or [`CgroupError::Write`]; a half-made cgroup is removed.
    pub fn create(layout: &Layout, parent: &str, name: &str, limits: Limits) -> Result<Self, CgroupError> {
        let dirs = match layout {
            Layout::V2 { root } => vec![root.join(parent).join(name)],
            Layout::V1 { memory, cpu, cpuacct, pids } => {
                let mut d: Vec<PathBuf> = Vec::new();
                for m in [memory, cpu, cpuacct, pids] {
                    let p = m.join(parent).join(name);
                    if !d.contains(&p) {
                        d.push(p);
                    }
                }
                d
            }
        };
        if let Layout::V2 { root } = layout {
            v2::prepare_parent(root, &root.join(parent))?;
        }
        let cg = Self { layout: layout.clone(), dirs };
        let made = (|| {
            for d in &cg.dirs {
                fs::create_dir_all(d).map_err(|source| CgroupError::Dir { op: "create", path: d.clone(), source })?;
            }
            match layout {
                Layout::V2 { .. } => v2::set_limits(&cg.dirs[0], limits),
                Layout::V1 { memory, cpu, pids, .. } => {
                    v1::set_limits(&memory.join(parent).join(name), &cpu.join(parent).join(name), &pids.join(parent).join(name), limits)
                }
            }
        })();
        if let Err(e) = made {
            let _ = cg.remove();
            return Err(e);
        }
        Ok(cg)
    }

    /// The cgroup `<parent>/<name>` as [`Cgroup::create`] would have made it, without touching
    /// anything (to kill and remove what a dead service left). Missing directories are fine.
    pub fn existing(layout: &Layout, parent: &str, name: &str) -> Self {
        let mut dirs: Vec<PathBuf> = Vec::new();
        let roots: Vec<&PathBuf> = match layout {
            Layout::V2 { root } => vec![root],
            Layout::V1 { memory, cpu, cpuacct, pids } => vec![memory, cpu, cpuacct, pids],
        };
        for r in roots {
            let p = r.join(parent).join(name);
            if !dirs.contains(&p) {
                dirs.push(p);
            }
        }
        Self { layout: layout.clone(), dirs }
    }

    /// The directories whose `cgroup.procs` a process writes its pid to, to join.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// The files a single-threaded process writes `0` to, to move itself in (its children are
    /// then born inside). On v1 that is each hierarchy's `tasks`: moving only the calling thread
    /// lets the kernel skip the `cgroup_threadgroup_rwsem` write lock, whose RCU grace period
    /// costs 9-20 ms per `cgroup.procs` write on this kind of host (init, single-threaded when it
    /// joins, moves its one thread: the whole process). On v2, domain cgroups take whole processes only:
    /// `cgroup.procs` (the helper avoids that write with `clone3(CLONE_INTO_CGROUP)`, see [`Cgroup::v2_dir`];
    /// it is the fallback on kernels before 5.7, and what a warm child does).
    pub fn join_files(&self) -> Vec<PathBuf> {
        let file = match self.layout {
            Layout::V1 { .. } => "tasks",
            Layout::V2 { .. } => "cgroup.procs",
        };
        self.dirs.iter().map(|d| d.join(file)).collect()
    }

    /// On cgroup v2, the cgroup's directory, for `clone3(CLONE_INTO_CGROUP)`; `None` on v1
    /// (a process is born in several hierarchies there, and must join them).
    pub fn v2_dir(&self) -> Option<&Path> {
        match self.layout {
            Layout::V2 { .. } => self.dirs.first().map(PathBuf::as_path),
            Layout::V1 { .. } => None,
        }
    }

    /// The layout this cgroup lives in.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Pids in the cgroup (from the first directory's `cgroup.procs`).
    /// Errors: [`CgroupError::Read`].
    pub fn pids(&self) -> Result<Vec<i32>, CgroupError> {
        let path = self.dirs[0].join("cgroup.procs");
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            // A cgroup that is gone holds nothing.
            Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
            Err(source) => return Err(CgroupError::Read { path, source }),
        };
        Ok(text.split_whitespace().filter_map(|p| p.parse().ok()).collect())
    }

    /// Reads CPU time, peak memory, OOM kills and pids-limit hits.
    /// Errors: [`CgroupError::Read`] for a file that must exist.
    pub fn usage(&self) -> Result<Usage, CgroupError> {
        match &self.layout {
            Layout::V2 { .. } => v2::usage(&self.dirs[0]),
            Layout::V1 { .. } => v1::usage(&self.dirs),
        }
    }

    /// SIGKILLs every process in the cgroup until `cgroup.procs` is empty, up to `patience`
    /// (v2 with `cgroup.kill` kills atomically; otherwise pids are killed one by one, repeatedly, since
    /// a fork may race the read).
    /// Errors: [`CgroupError::NotEmpty`] if processes survive.
    pub fn kill_all(&self, patience: Duration) -> Result<(), CgroupError> {
        let start = Instant::now();
        let kill_file = self.dirs[0].join("cgroup.kill");
        let has_kill_file = matches!(self.layout, Layout::V2 { .. }) && kill_file.exists();
        loop {
            let pids = self.pids()?;
            if pids.is_empty() {
                return Ok(());
            }
            if has_kill_file {
                write(&kill_file, "1")?;
            } else {
                for p in &pids {
                    let _ = kill(Pid::from_raw(*p), Signal::SIGKILL);
                }
            }
            if start.elapsed() > patience {
                return Err(CgroupError::NotEmpty { path: self.dirs[0].clone(), pids });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Removes the directories (after [`Cgroup::kill_all`]); retries, for up to
    /// [`REMOVE_PATIENCE`], while the kernel finishes tearing down exited tasks (`EBUSY`: after a
    /// fork bomb on a loaded host, a hundred killed processes may take seconds to be released).
    /// A missing directory counts as removed.
    /// Errors: [`CgroupError::Dir`] with the last failure.
    pub fn remove(&self) -> Result<(), CgroupError> {
        let mut last = None;
        let deadline = Instant::now() + REMOVE_PATIENCE;
        for d in self.dirs.iter().rev() {
            let mut pause = Duration::from_millis(2);
            loop {
                match fs::remove_dir(d) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) if Instant::now() < deadline && e.raw_os_error() == Some(libc::EBUSY) => {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_millis(50));
                    }
                    Err(source) => {
                        last = Some(CgroupError::Dir { op: "remove", path: d.clone(), source });
                        break;
                    }
                }
            }
        }
        last.map_or(Ok(()), Err)
    }
}

/// Writes `value` to the control file `path`.
/// Errors: [`CgroupError::Write`].
fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    fs::write(path, value).map_err(|source| CgroupError::Write { path: path.to_owned(), value: value.to_owned(), source })
}

fn read(path: &Path) -> Result<String, CgroupError> {
    read_if_there(path)?.ok_or_else(|| CgroupError::Read { path: path.to_owned(), source: std::io::ErrorKind::NotFound.into() })
}

/// A control file's text, `None` when the file does not exist; read with a buffer sized for a
/// control file (a 4 kB page: a kernfs file's `seq_file` gives it in one read), without the
/// `statx` that [`fs::read_to_string`] makes to size its buffer.
/// Errors: [`CgroupError::Read`] for any failure but `ENOENT`.
fn read_if_there(path: &Path) -> Result<Option<String>, CgroupError> {
    use std::io::Read as _;
    let err = |source| CgroupError::Read { path: path.to_owned(), source };
    let mut f = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err(e)),
    };
    let (mut bytes, mut buf) = (Vec::new(), [0u8; 4096]);
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(err(e)),
        }
    }
    String::from_utf8(bytes).map(Some).map_err(|e| err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

/// Value of `key` in a flat-keyed file such as `memory.events` ("oom_kill 3").
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

/// How long [`Cgroup::remove`] retries a cgroup the kernel still holds busy.
pub const REMOVE_PATIENCE: Duration = Duration::from_secs(10);

/// The CFS period used for CPU quotas, in µs.
pub const CPU_PERIOD_US: u64 = 100_000;

/// CPU quota in µs per [`CPU_PERIOD_US`] for `cores` (at least 1000 µs, the kernel's minimum).
pub fn cpu_quota_us(cores: f64) -> u64 {
    let q = (cores * CPU_PERIOD_US as f64).round();
    if q < 1000.0 {
        1000
    } else {
        // cores is validated to at most 1024, so the quota fits u64.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let q = q as u64;
        q
    }
}

#[cfg(test)]
mod tests;
