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
    let landlock_abi = crate::sys::landlock_abi();
    checks.push(landlock_check(landlock_abi));
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    let overlay = filesystems.lines().any(|l| l.trim_end().ends_with("overlay"));
    checks.push(Check {
        name: "overlayfs",
        ok: true,
        detail: if overlay { "available (not needed yet)".into() } else { "absent (not needed yet)".into() },
    });
    HostReport { checks, cgroup: cgroup.ok(), landlock_abi }
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

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}
