//! cgroup v2 control files (Documentation/admin-guide/cgroup-v2.rst).

use std::path::Path;

use super::{cpu_quota_us, keyed, read, read_if_there, write, CgroupError, Limits, Usage, CPU_PERIOD_US};

/// Creates `parent` under `root` and enables memory, cpu and pids for the children of `root`,
/// of `parent` and of every cgroup between them (`cgroup.subtree_control`), as v2's "no
/// internal processes" rule requires. A level that already has them is not written (a
/// delegated subtree may not own its ancestors' files).
pub(super) fn prepare_parent(root: &Path, parent: &Path) -> Result<(), CgroupError> {
    if !parent.exists() {
        std::fs::create_dir_all(parent).map_err(|source| CgroupError::Dir { op: "create", path: parent.to_owned(), source })?;
    }
    let below = parent.strip_prefix(root).unwrap_or(Path::new(""));
    let mut dir = root.to_owned();
    enable_controllers(&dir)?;
    for part in below.components() {
        dir.push(part);
        enable_controllers(&dir)?;
    }
    Ok(())
}

/// Enables memory, cpu and pids for the children of `dir` where they are not yet.
/// Errors: [`CgroupError::Write`] (EBUSY: `dir` holds processes).
pub(super) fn enable_controllers(dir: &Path) -> Result<(), CgroupError> {
    let file = dir.join("cgroup.subtree_control");
    let current = std::fs::read_to_string(&file).unwrap_or_default();
    let missing: Vec<&str> = ["memory", "cpu", "pids"].into_iter().filter(|c| !current.split_whitespace().any(|x| x == *c)).collect();
    if !missing.is_empty() {
        let value = missing.iter().map(|c| format!("+{c}")).collect::<Vec<_>>().join(" ");
        write(&file, &value)?;
    }
    Ok(())
}

pub(super) fn set_limits(dir: &Path, l: Limits) -> Result<(), CgroupError> {
    write(&dir.join("memory.max"), &l.memory_max_bytes.to_string())?;
    // Swap off: a sandbox never pages out to the host's swap.
    if dir.join("memory.swap.max").exists() {
        write(&dir.join("memory.swap.max"), "0")?;
    }
    write(&dir.join("cpu.max"), &format!("{} {CPU_PERIOD_US}", cpu_quota_us(l.cpu_max)))?;
    write(&dir.join("pids.max"), &l.pids_max.to_string())?;
    Ok(())
}

pub(super) fn usage(dir: &Path) -> Result<Usage, CgroupError> {
    let cpu = read(&dir.join("cpu.stat"))?;
    let events = read(&dir.join("memory.events"))?;
    // memory.peak exists from Linux 5.19; older kernels report no peak.
    let peak = read_if_there(&dir.join("memory.peak")).ok().flatten().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    let pids_events = read_if_there(&dir.join("pids.events")).ok().flatten().unwrap_or_default();
    Ok(Usage {
        cpu_time_ms: keyed(&cpu, "usage_usec").unwrap_or(0) / 1000,
        peak_memory_bytes: peak,
        oom_kills: keyed(&events, "oom_kill").unwrap_or(0),
        pids_limit_hits: keyed(&pids_events, "max").unwrap_or(0),
    })
}
