//! Host feature checks (`sandbox doctor`): what the runtime needs and whether this host has it.

use std::path::Path;

use serde::Serialize;

use crate::cgroup::Layout;

/// One checked host feature.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Short name, e.g. `user_namespaces`.
    pub name: &'static str,
    /// Whether it is usable.
    pub ok: bool,
    /// What was found, or why not.
    pub detail: String,
}

/// The host's features as the runtime needs them.
#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    /// Every check, in order.
    pub checks: Vec<Check>,
    /// The cgroup layout, when one is usable.
    #[serde(skip)]
    pub cgroup: Option<Layout>,
    /// Landlock ABI version (0: none).
    pub landlock_abi: u32,
}

impl HostReport {
    /// The first failed check, as "name: detail".
    pub fn first_failure(&self) -> Option<String> {
        self.checks.iter().find(|c| !c.ok).map(|c| format!("{}: {}", c.name, c.detail))
    }
}

/// Probes the running host. Reads /proc and /sys only; creates nothing.
pub fn probe() -> HostReport {
    let mut checks = Vec::new();
    let root = nix::unistd::geteuid().is_root();
    checks.push(Check {
        name: "root",
        ok: root,
        detail: if root {
            "running as root: can map an unprivileged uid range and create cgroups".into()
        } else {
            "the runtime must run as root (it maps a uid range and creates cgroups)".into()
        },
    });
    let max_userns = read_trim("/proc/sys/user/max_user_namespaces").and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    checks.push(Check { name: "user_namespaces", ok: max_userns > 0, detail: format!("user.max_user_namespaces = {max_userns}") });
    let cgroup = Layout::detect();
    checks.push(match &cgroup {
        Ok(l) => Check { name: "cgroups", ok: true, detail: describe_layout(l) },
        Err(e) => Check { name: "cgroups", ok: false, detail: e.to_string() },
    });
    let seccomp = Path::new("/proc/sys/kernel/seccomp/actions_avail").exists();
    checks.push(Check {
        name: "seccomp",
        ok: seccomp,
        detail: read_trim("/proc/sys/kernel/seccomp/actions_avail").unwrap_or_else(|| "seccomp filters unavailable".into()),
    });
    checks.push(core_pattern_check(read_trim("/proc/sys/kernel/core_pattern")));
    let landlock_abi = crate::sys::landlock_abi();
    checks.push(landlock_check(landlock_abi));
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    let overlay = filesystems.lines().any(|l| l.trim_end().ends_with("overlay"));
    checks.push(Check { name: "overlayfs", ok: true, detail: if overlay { "available (not needed yet)".into() } else { "absent (not needed yet)".into() } });
    // Newer kernel features: reported, none required.
    let v2 = matches!(cgroup, Ok(Layout::V2 { .. }));
    checks.push(Check {
        name: "clone3",
        ok: true,
        detail: match (crate::sys::has_clone3(), v2) {
            (true, true) => "present (Linux 5.3+): on cgroup v2 init is born in its cgroup (CLONE_INTO_CGROUP, Linux 5.7+; \
                             before 5.7 the helper joins the cgroup first)"
                .into(),
            (true, false) => "present (Linux 5.3+); not used on cgroup v1 (CLONE_INTO_CGROUP is v2 only): init joins each hierarchy itself".into(),
            (false, true) => "absent (ENOSYS): the helper joins the execution's cgroup, then clones init".into(),
            (false, false) => "absent (ENOSYS); not needed on cgroup v1: init joins each hierarchy itself".into(),
        },
    });
    checks.push(Check {
        name: "pidfd_open",
        ok: true,
        detail: if crate::sys::has_pidfd_open() {
            "present (Linux 5.3+): every signal to an execution's init goes through a pidfd".into()
        } else {
            "absent (ENOSYS): init is not signalled individually; timeouts and teardown kill its cgroup".into()
        },
    });
    checks.push(Check {
        name: "close_range",
        ok: true,
        detail: match crate::sys::close_range_support() {
            Some(true) => "present with CLOSE_RANGE_CLOEXEC (Linux 5.11+): the helper marks inherited descriptors close-on-exec with it".into(),
            Some(false) => "present without CLOSE_RANGE_CLOEXEC (Linux 5.9, 5.10): the helper's close-on-exec sweep fails".into(),
            None => "absent (ENOSYS): the helper's close-on-exec sweep fails".into(),
        },
    });
    let below_root = match &cgroup {
        Ok(Layout::V2 { root }) => Some(v2_cgroup_below_root(root)),
        _ => None,
    };
    checks.push(v2_file_check(
        "cgroup.kill",
        below_root.as_ref(),
        ["kills the whole cgroup at once at teardown (Linux 5.14+)", "teardown kills the cgroup's processes one by one", "v1 kills processes one by one"],
    ));
    checks.push(v2_file_check(
        "memory.peak",
        below_root.as_ref(),
        ["gives peakMemoryBytes (Linux 5.19+)", "peakMemoryBytes is reported as 0", "v1 reads memory.max_usage_in_bytes"],
    ));
    HostReport { checks, cgroup: cgroup.ok(), landlock_abi }
}

/// What the host does with a crash (`kernel.core_pattern`) and what reaches it from a sandbox.
/// Informational: the program's RLIMIT_CORE is pinned to 1, which keeps every crash from a file
/// or a pipe handler; only a socket (`@`, Linux 6.16+) is still sent a cold program's crash.
fn core_pattern_check(pattern: Option<String>) -> Check {
    let detail = match pattern {
        None => "unreadable".to_owned(),
        Some(p) if p.starts_with('|') => {
            format!("{p:?}: a pipe handler run as host root; a sandbox's crash never starts it (RLIMIT_CORE 1)")
        }
        Some(p) if p.starts_with('@') => {
            format!("{p:?}: a socket; its server is sent a cold sandbox's crash (its core image), RLIMIT_CORE 1 does not stop that")
        }
        Some(p) => format!("{p:?}: a file; a sandbox's crash writes none (RLIMIT_CORE 1)"),
    };
    Check { name: "core_pattern", ok: true, detail }
}

/// The landlock check: never a failure on its own (each profile's `landlock_min_abi` decides
/// whether it runs); says which ABI is enforced and what it lacks.
fn landlock_check(abi: u32) -> Check {
    use crate::wall::{missing_features, ABI_NEWEST};
    let enforced = abi.min(ABI_NEWEST);
    let lacks = missing_features(enforced);
    let detail = match (abi, lacks.is_empty()) {
        (0, _) => format!("absent or disabled: only profiles with landlock_min_abi = 0 run; lacks {}", lacks.join("; ")),
        (_, true) => format!("ABI {abi}, enforced as ABI {enforced} (everything the runtime uses)"),
        (_, false) => format!("ABI {abi}, enforced; lacks {}", lacks.join("; ")),
    };
    Check { name: "landlock", ok: true, detail }
}

/// A cgroup directory below the v2 root to look for per-cgroup files in (the root has neither
/// `cgroup.kill` nor `memory.peak`): our own cgroup, else any child of the root.
fn v2_cgroup_below_root(root: &Path) -> Option<std::path::PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("0::")).map(|p| p.trim_start_matches('/').to_owned()));
    if let Some(own) = own.filter(|p| !p.is_empty()) {
        return Some(root.join(own));
    }
    let mut children: Vec<_> = std::fs::read_dir(root).ok()?.filter_map(Result::ok).filter(|e| e.path().is_dir()).map(|e| e.path()).collect();
    children.sort();
    children.into_iter().next()
}

/// Reports whether the v2 interface `file` exists; `[present, absent, v1]` say what the
/// runtime does in each case. `below_root` is `None` off cgroup v2 and `Some(None)` when no
/// cgroup below the root exists to look in.
fn v2_file_check(file: &'static str, below_root: Option<&Option<std::path::PathBuf>>, [present, absent, v1]: [&str; 3]) -> Check {
    let detail = match below_root {
        None => format!("not on cgroup v2: {v1}"),
        Some(None) => format!("unknown: no cgroup below the v2 root to look in (when present it {present})"),
        Some(Some(dir)) if dir.join(file).exists() => format!("present: it {present}"),
        Some(Some(dir)) => format!("absent from {}: {absent}", dir.display()),
    };
    Check { name: file, ok: true, detail }
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

/// The cgroup layout in words for `sandbox doctor`, e.g. `v2 at /sys/fs/cgroup with memory, cpu,
/// pids` or `v1: memory at /sys/fs/cgroup/memory, cpu at ..., cpuacct at ..., pids at ...`.
fn describe_layout(layout: &Layout) -> String {
    match layout {
        Layout::V2 { root } => format!("v2 at {} with memory, cpu, pids", root.display()),
        Layout::V1 { memory, cpu, cpuacct, pids } => {
            format!("v1: memory at {}, cpu at {}, cpuacct at {}, pids at {}", memory.display(), cpu.display(), cpuacct.display(), pids.display())
        }
    }
}
