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
    checks.push(Check {
        name: "user_namespaces",
        ok: max_userns > 0,
        detail: format!("user.max_user_namespaces = {max_userns}"),
    });
    let cgroup = Layout::detect();
    checks.push(match &cgroup {
        Ok(l) => Check { name: "cgroups", ok: true, detail: format!("{} with memory, cpu, pids ({l:?})", l.version()) },
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
    checks.push(Check {
        name: "landlock",
        ok: landlock_abi >= crate::wall::ABI_REQUIRED,
        detail: format!("ABI {landlock_abi} (need {})", crate::wall::ABI_REQUIRED),
    });
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    let overlay = filesystems.lines().any(|l| l.trim_end().ends_with("overlay"));
    checks.push(Check {
        name: "overlayfs",
        ok: true,
        detail: if overlay { "available (not needed yet)".into() } else { "absent (not needed yet)".into() },
    });
    HostReport { checks, cgroup: cgroup.ok(), landlock_abi }
}

/// What the host does with a crash (`kernel.core_pattern`) and what reaches it from a sandbox.
/// Informational: the program's RLIMIT_CORE is pinned to 1, which keeps every crash from a file
/// or a pipe handler; only a socket (`@`, Linux 6.16+) is still told of the crash.
fn core_pattern_check(pattern: Option<String>) -> Check {
    let detail = match pattern {
        None => "unreadable".to_owned(),
        Some(p) if p.starts_with('|') => {
            format!("{p:?}: a pipe handler run as host root; a sandbox's crash never starts it (RLIMIT_CORE 1)")
        }
        Some(p) if p.starts_with('@') => {
            format!("{p:?}: a socket; its server is told of a sandbox's crash, RLIMIT_CORE 1 does not stop that")
        }
        Some(p) => format!("{p:?}: a file; a sandbox's crash writes none (RLIMIT_CORE 1)"),
    };
    Check { name: "core_pattern", ok: true, detail }
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}
