//! cgroup v1 control files (Documentation/admin-guide/cgroup-v1/{memory,pids}.rst, scheduler/sched-bwc.rst).

use std::path::{Path, PathBuf};

use super::{cpu_quota_us, keyed, read_if_there, write, CgroupError, Limits, Usage, CPU_PERIOD_US};

pub(super) fn set_limits(memory: &Path, cpu: &Path, pids: &Path, l: Limits) -> Result<(), CgroupError> {
    let bytes = l.memory_max_bytes.to_string();
    write(&memory.join("memory.limit_in_bytes"), &bytes)?;
    // memsw = memory + swap; equal to the memory limit means no swap. Absent without swap accounting.
    if memory.join("memory.memsw.limit_in_bytes").exists() {
        write(&memory.join("memory.memsw.limit_in_bytes"), &bytes)?;
    }
    // TCP buffers: v1 charges them to a counter of their own, unlimited (and off) until a limit is
    // written, so a program's unread sockets could fill the host's tcp_mem (its pressure level,
    // then its hard maximum, for every TCP user of the host) past its memory limit. A quarter of
    // the memory limit: the two together stay within 1.25 times it (v2 charges socket memory to
    // memory.max itself); sends past it wait, as under the host's own TCP memory pressure.
    // Absent on a kernel without v1's kernel-memory accounting; Linux 6.x logs once that it is
    // deprecated (as v1 is): nothing else on v1 bounds these buffers.
    //
    // A cgroup's first such write turns the kernel's socket accounting on
    // (`memcg_sockets_enabled_key`, a static key: its flip patches kernel text on every CPU) and
    // the cgroup's end turns it off (mem_cgroup_css_free), so with only executions holding it
    // every run would flip it twice (not measured apart: the flips' cost falls on every CPU, not
    // on the run's processes). The parent holds it (an unlimited value, written each time it
    // reads unlimited: cheap once on, and it survives a parent made anew; a limit someone set
    // there is left as it is, and holds it on already), so an execution's write and end only
    // count.
    let tcp_limit = |dir: &Path, value: &str| match write(&dir.join("memory.kmem.tcp.limit_in_bytes"), value) {
        Err(CgroupError::Write { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    };
    if let Some(parent) = memory.parent() {
        let set = std::fs::read_to_string(parent.join("memory.kmem.tcp.limit_in_bytes")).ok().and_then(|v| v.trim().parse::<u64>().ok());
        if set.is_none_or(|v| v >= TCP_LIMIT_UNLIMITED) {
            tcp_limit(parent, "-1")?;
        }
    }
    tcp_limit(memory, &tcp_limit_bytes(l.memory_max_bytes).to_string())?;
    if memory.join("memory.swappiness").exists() {
        write(&memory.join("memory.swappiness"), "0")?;
    }
    write(&cpu.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
    write(&cpu.join("cpu.cfs_quota_us"), &cpu_quota_us(l.cpu_max).to_string())?;
    write(&pids.join("pids.max"), &l.pids_max.to_string())?;
    Ok(())
}

/// What a v1 limit file reads when unlimited: `PAGE_COUNTER_MAX` pages, in bytes (4 KiB pages,
/// 64-bit: 9223372036854771712); anything from there up reads as no limit.
const TCP_LIMIT_UNLIMITED: u64 = 9_223_372_036_854_771_712;

/// The TCP buffer limit of an execution whose memory limit is `memory_max_bytes`, on cgroup v1:
/// a quarter of it, in whole pages (the kernel counts pages; at least one).
pub(super) fn tcp_limit_bytes(memory_max_bytes: u64) -> u64 {
    (memory_max_bytes / 4 / 4096).max(1) * 4096
}

/// `dirs` holds the memory, cpu, cpuacct and pids directories (co-mounted ones once), found by their files.
/// Each file is read from the first directory that has it: an open that fails with `ENOENT`
/// is the probe (an existence check before each read cost a `statx` per directory tried, and
/// these reads are on the way from the program's end to the result).
pub(super) fn usage(dirs: &[PathBuf]) -> Result<Usage, CgroupError> {
    let find = |file: &str| -> Result<Option<String>, CgroupError> {
        for d in dirs {
            if let Some(text) = read_if_there(&d.join(file))? {
                return Ok(Some(text));
            }
        }
        Ok(None)
    };
    let mut u = Usage::default();
    if let Some(text) = find("cpuacct.usage")? {
        u.cpu_time_ms = text.trim().parse::<u64>().unwrap_or(0) / 1_000_000;
    }
    if let Some(text) = find("memory.max_usage_in_bytes")? {
        u.peak_memory_bytes = text.trim().parse().unwrap_or(0);
    }
    if let Some(text) = find("memory.oom_control")? {
        // "oom_kill N" is reported from Linux 4.13.
        u.oom_kills = keyed(&text, "oom_kill").unwrap_or(0);
    }
    if let Some(text) = find("pids.events")? {
        u.pids_limit_hits = keyed(&text, "max").unwrap_or(0);
    }
    Ok(u)
}
