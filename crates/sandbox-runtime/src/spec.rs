//! The helper's protocol: the [`SpawnSpec`] the engine writes to the helper's control socket
//! (fd 3) as one frame ([`SpawnSpec::frame`]: a JSON line, then the root files' bytes), and the
//! [`Event`] JSON lines the helper and init write back.

use std::io::BufRead;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// File descriptor number of the control socket in the helper.
pub const CONTROL_FD: i32 = 3;

/// File descriptor number of the harness's side channel: the write end of a pipe the engine
/// passes to the helper, inherited by init and the program. The harness writes one JSON
/// document to it (the function's return value or the structured error), so prints on stdout
/// never mix with return data.
pub const RESULT_FD: i32 = 4;

/// The first uid the program may run as inside the sandbox, and the gid it always runs as. Each
/// running execution gets its own uid `SANDBOX_UID + slot` (host `uid_base + SANDBOX_UID + slot`),
/// so the kernel's per-user counters (inotify instances, pending signals, message queues) are
/// never shared between executions or charged to host root. (A template's children share its
/// namespace's owner at the host level; each gets a share of the inotify limits there, see
/// [`SpawnSpec::template_children`].)
pub const SANDBOX_UID: u32 = 1000;

/// How many executions may run at once on one host per `uid_base`: each holds one uid slot.
pub const UID_SLOTS: u32 = 4096;

/// The descriptors a template's forked child finds its execution's own mounts on (detached
/// copies the engine made with `open_tree`), and where it attaches each: the workspace, the
/// code directory, and the synthesized /etc/passwd and /etc/group naming the execution's uid.
pub const WARM_TREES: [(i32, &str); 4] = [(5, "/workspace"), (6, "/code"), (7, "/etc/passwd"), (8, "/etc/group")];

/// Where a template's sandbox sees the warm-start library (`libsandbox_warm.so`): a read-only
/// bind on the template's own /tmp, so that it leaves with that /tmp when a forked child
/// replaces it (`crate::rootfs`'s `warm_child`), mount point and all: a child's root lists
/// exactly what a cold execution's does.
pub const WARM_LIB_DIR: &str = "/tmp/.sandbox-warm-lib";

/// Everything the helper needs to build and enter one container. All paths are host paths
/// unless named `sandbox_*`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SpawnSpec {
    /// Execution id, for messages.
    pub execution_id: String,
    /// The engine's pid (the helper's parent): while the helper's parent is this process the
    /// engine lives. 0: unknown (then a parent of pid 1 means the engine is gone).
    #[serde(default)]
    pub engine_pid: u32,
    /// Host uid/gid of root inside (never 0); the program's uid `u` inside is host `uid_base + u`.
    pub uid_base: u32,
    /// The uid the program runs as inside ([`SANDBOX_UID`] + the execution's slot); its gid is
    /// [`SANDBOX_UID`]. Only this uid, the gid and root are mapped.
    #[serde(default = "default_program_uid")]
    pub program_uid: u32,
    /// Non-zero: this sandbox is a template (a warm-start fork server): its user namespace maps
    /// uids `SANDBOX_UID .. SANDBOX_UID + template_slots` for its children, and its program
    /// keeps root and its capabilities inside (it never runs caller code).
    #[serde(default)]
    pub template_slots: u32,
    /// A template's children at most at once, over every template of the service (they share
    /// one namespace owner, [`SpawnSpec::namespace_owner`]): the template's init gives each
    /// child a share of the host's per-user inotify limits (`rootfs::template_sysctls`). 0: no
    /// share is set (not a template).
    #[serde(default)]
    pub template_children: u32,
    /// Cgroup files a process writes "0" (itself) to, to join, from
    /// [`crate::cgroup::Cgroup::join_files`]: on v1 init, first thing, through the files the
    /// helper opened (the helper never joins); on a v2 kernel without `CLONE_INTO_CGROUP` the
    /// helper, before cloning init; a template's child, through files the engine opened.
    pub cgroup_join: Vec<PathBuf>,
    /// On cgroup v2, the execution's cgroup directory: the helper creates init directly in it
    /// (`clone3` with `CLONE_INTO_CGROUP`, Linux 5.7+) and stays outside itself; on a kernel
    /// without it, it falls back to `cgroup_join`. `None` on v1.
    #[serde(default)]
    pub cgroup_dir: Option<PathBuf>,
    /// An empty host directory to mount the new root tmpfs on.
    pub root_dir: PathBuf,
    /// The host directory (a size-capped tmpfs) that becomes /workspace.
    pub workspace_dir: PathBuf,
    /// System directories bound read-only at the same path (symlinks are copied as symlinks),
    /// taken from the host, or from [`SpawnSpec::system_root`] when it is set.
    pub system_dirs: Vec<PathBuf>,
    /// Files or directories under /etc bound read-only (e.g. `/etc/ld.so.cache`, `/etc/ssl`),
    /// taken from the host, or from [`SpawnSpec::system_root`] when it is set.
    pub etc_binds: Vec<PathBuf>,
    /// A host directory holding an unpacked root filesystem (an environment's base, e.g. a
    /// Debian one): `system_dirs` and `etc_binds` are taken below it instead of from the
    /// host's `/` (`/usr` is `<system_root>/usr`), still read-only, nosuid and nodev. `None`: the
    /// host's own.
    #[serde(default)]
    pub system_root: Option<PathBuf>,
    /// Files written into the read-only root (synthesized /etc files, the program's code).
    pub root_files: Vec<RootFile>,
    /// Size of /tmp (and of /dev/shm), in bytes.
    pub tmp_bytes: u64,
    /// Extra host directories bound into the sandbox.
    pub mounts: Vec<BindMount>,
    /// Directories inside the sandbox hidden under an empty read-only tmpfs (e.g. the host's
    /// Python package directories); those that do not exist are skipped.
    #[serde(default)]
    pub masked_dirs: Vec<String>,
    /// Hostname inside.
    pub hostname: String,
    /// Program and arguments; `argv[0]` is the absolute path to execute.
    pub argv: Vec<String>,
    /// The program's whole environment (nothing is inherited).
    pub env: Vec<(String, String)>,
    /// Working directory inside, e.g. `/workspace`.
    pub cwd: String,
    /// Resource limits applied to the program.
    pub rlimits: Rlimits,
    /// Create a TUN device as the sandbox's network and send its descriptor to the engine on
    /// [`crate::tun::NET_FD`] (allowlist profiles); `false` leaves loopback only.
    #[serde(default)]
    pub tun: bool,
    /// The oldest landlock ABI the run accepts: init and the program refuse to start on a
    /// kernel offering less (0: a kernel without landlock may run it). The best ABI the kernel
    /// offers is enforced either way.
    pub landlock_min_abi: u32,
    /// The program's seccomp filter as one classic BPF program, a `struct sock_filter` array (8
    /// bytes an instruction): the engine's [`crate::seccomp_program`] (a template and its
    /// children load exactly the engine's, whatever build of the warm library they run). Empty:
    /// the program's init loads its own build's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seccomp_bpf: Vec<u8>,
    /// Init (a cold start's, or a template's child, which is its sandbox's init) builds the
    /// sandbox, then waits for one byte on the program's stdin before it starts the program:
    /// the engine's go, sent once the execution's audit `begin` is durable, so that the set-up
    /// overlaps that write. The byte is not the program's. EOF instead (the
    /// execution was refused or abandoned): init ends, failing step `go`, and nothing ran.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hold: bool,
}

fn default_program_uid() -> u32 {
    SANDBOX_UID
}

impl SpawnSpec {
    /// The spec a template's forked child is sent (`sandbox_runtime::warm`): only what it reads
    /// (the uid, hostname, /tmp size, working directory, rlimits, the landlock paths inside the
    /// sandbox, the seccomp program, `hold`, and how many cgroup files the engine passed as
    /// descriptors). No host path, host pid, execution id (the name of its host directory and
    /// cgroup), code or environment: the child is the program's own init and its program a fork
    /// of it, so whatever the child parsed stays readable in the program's heap (freed memory
    /// is not cleared). A cold helper gets the whole spec and its program execs.
    pub fn for_warm_child(&self) -> SpawnSpec {
        SpawnSpec {
            program_uid: self.program_uid,
            // Only their number: the files themselves come as descriptors.
            cgroup_join: vec![PathBuf::new(); self.cgroup_join.len()],
            system_dirs: self.system_dirs.clone(),
            tmp_bytes: self.tmp_bytes,
            mounts: self.mounts.iter().map(|m| BindMount { host: PathBuf::new(), sandbox_path: m.sandbox_path.clone(), read_only: m.read_only }).collect(),
            hostname: self.hostname.clone(),
            cwd: self.cwd.clone(),
            rlimits: self.rlimits,
            landlock_min_abi: self.landlock_min_abi,
            seccomp_bpf: self.seccomp_bpf.clone(),
            hold: self.hold,
            ..SpawnSpec::default()
        }
    }

    /// The uid map init's user namespace gets, as written to `/proc/<pid>/uid_map`: root and
    /// the program's uid, or root and every child uid of a template.
    pub fn uid_map(&self) -> String {
        if self.template_slots > 0 {
            format!("0 {} 1\n{SANDBOX_UID} {} {}\n", self.uid_base, self.uid_base + SANDBOX_UID, self.template_slots)
        } else {
            format!("0 {} 1\n{} {} 1\n", self.uid_base, self.program_uid, self.uid_base + self.program_uid)
        }
    }

    /// The host uid that creates (owns) the sandbox's user namespace, and so is charged at the
    /// host level for the kernel's per-user counters of everything inside (inotify instances
    /// and watches, pending signals, message queues, locked memory, processes): the program's
    /// own host uid, which no other running execution has; for a template, its root's host uid
    /// (`uid_base`), shared by the template's children.
    pub fn namespace_owner(&self) -> u32 {
        if self.template_slots > 0 {
            self.uid_base
        } else {
            self.uid_base + self.program_uid
        }
    }

    /// The gid map: root and the program's gid [`SANDBOX_UID`].
    pub fn gid_map(&self) -> String {
        format!("0 {} 1\n{SANDBOX_UID} {} 1\n", self.uid_base, self.uid_base + SANDBOX_UID)
    }
}

/// A file created in the sandbox's root before it is made read-only.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RootFile {
    /// Absolute path inside the sandbox, e.g. `/etc/passwd`.
    pub sandbox_path: String,
    /// Content, any bytes. The spec's JSON holds only its length in bytes (`"len"`); the bytes
    /// follow the JSON line ([`SpawnSpec::frame`]), so that neither side escapes, encodes or
    /// parses them (the code, the harness and its bytecode: ~40 kB of every cold start).
    #[serde(rename = "len", with = "length_only")]
    pub content: Vec<u8>,
    /// Permission bits, e.g. `0o444`.
    pub mode: u32,
}

/// [`RootFile::content`] in the spec's JSON: its length only; [`SpawnSpec::read_frame`] reads
/// the bytes into the buffer the length made.
mod length_only {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(bytes.len() as u64)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let len = u64::deserialize(d)?;
        match usize::try_from(len) {
            Ok(len) if len <= super::ROOT_FILES_MAX_BYTES => Ok(vec![0; len]),
            _ => Err(serde::de::Error::custom(format!("a root file of {len} bytes (at most {} in all)", super::ROOT_FILES_MAX_BYTES))),
        }
    }
}

/// The most bytes a spec's root files may hold in all (1 GiB): far above anything the engine
/// sends (a profile's code and input limits are megabytes), so that a corrupt length fails the
/// frame's reading (the helper's, or [`SpawnSpec::from_frame`]) before any of the files' bytes
/// is read (a file's length past it, before its buffer is allocated).
pub const ROOT_FILES_MAX_BYTES: usize = 1 << 30;

impl SpawnSpec {
    /// This spec as the engine writes it to a helper or a warm child: its JSON (root files'
    /// contents as their lengths) and a newline, then every root file's bytes, in order.
    /// Read back by the helper or a warm child (`read_frame`), or by [`SpawnSpec::from_frame`].
    pub fn frame(&self) -> Vec<u8> {
        let mut frame = serde_json::to_vec(self).expect("the spawn spec always serializes");
        frame.push(b'\n');
        let held: usize = self.root_files.iter().map(|f| f.content.len()).sum();
        frame.reserve(held);
        for f in &self.root_files {
            frame.extend_from_slice(&f.content);
        }
        frame
    }

    /// Reads one [`SpawnSpec::frame`] from `r`: nothing after it is read.
    /// Errors: step `read_spec` (the line or the bytes could not be read, or ended early) or
    /// `parse_spec` (not a spec's JSON, or root files past [`ROOT_FILES_MAX_BYTES`]).
    pub(crate) fn read_frame(r: &mut impl BufRead) -> Result<Self, crate::step::StepError> {
        use crate::step::{step, StepError};
        let mut line = Vec::new();
        step("read_spec", r.read_until(b'\n', &mut line))?;
        if line.pop() != Some(b'\n') {
            return Err(StepError::new("read_spec", "the control socket closed before the spec's line ended"));
        }
        let mut spec: Self = step("parse_spec", serde_json::from_slice(&line))?;
        let held = spec.root_files.iter().try_fold(0usize, |all, f| all.checked_add(f.content.len()).filter(|&n| n <= ROOT_FILES_MAX_BYTES));
        if held.is_none() {
            return Err(StepError::new("parse_spec", format!("root files past {ROOT_FILES_MAX_BYTES} bytes in all")));
        }
        for f in &mut spec.root_files {
            step("read_spec", r.read_exact(&mut f.content).map_err(|e| format!("{}: {e}", f.sandbox_path)))?;
        }
        Ok(spec)
    }

    /// The spec `frame` holds, all of it, read as the helper reads its control socket.
    /// Errors: `read_spec: …` (the line or the bytes end early), `parse_spec: …` (not a spec's
    /// JSON, or root files past [`ROOT_FILES_MAX_BYTES`]), or bytes left after the frame.
    pub fn from_frame(frame: &[u8]) -> Result<Self, String> {
        let mut r = frame;
        let spec = Self::read_frame(&mut r).map_err(|e| e.to_string())?;
        match r.len() {
            0 => Ok(spec),
            n => Err(format!("{n} bytes after the spec's frame")),
        }
    }
}

/// An extra host directory bound into the sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BindMount {
    /// Host directory.
    pub host: PathBuf,
    /// Absolute path inside the sandbox.
    pub sandbox_path: String,
    /// Bound read-only.
    pub read_only: bool,
}

/// Per-process limits (setrlimit(2)) that come from the profile. Every other rlimit the
/// program starts with is a fixed value of the runtime (`init::FIXED_RLIMITS`), never what the
/// service inherited.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Rlimits {
    /// `RLIMIT_NOFILE`.
    pub nofile: u64,
    /// `RLIMIT_FSIZE`, in bytes.
    pub fsize_bytes: u64,
    /// `RLIMIT_NPROC`: processes and threads of the program's uid (its own per execution); the
    /// profile's `pids_max`, so the per-uid count can never pass the cgroup's. A template's own
    /// program leaves it as inherited (its forked children and their inits share its uid).
    #[serde(default)]
    pub nproc: u64,
}

/// What the helper and init report, one JSON object per line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The container's init exists; `init_pid` is its host pid (signal it to stop the sandbox).
    Started {
        /// Host pid of init (pid 1 inside).
        init_pid: i32,
    },
    /// The program was forked and is about to exec; set-up is over.
    Spawned {
        /// The landlock ABI the program enforces (0: none); the program fails rather than
        /// enforce anything else.
        landlock_abi: u32,
    },
    /// A set-up step failed; nothing ran.
    Failed {
        /// The step, e.g. `pivot_root`.
        step: String,
        /// The error chain.
        message: String,
    },
    /// The program's main process ended and everything else in the sandbox was killed.
    Exited {
        /// Exit code, if it exited.
        code: Option<i32>,
        /// Signal number, if a signal ended it.
        signal: Option<i32>,
        /// Processes still alive when it ended, killed at teardown.
        killed_at_teardown: u32,
    },
}

#[cfg(test)]
mod tests;
