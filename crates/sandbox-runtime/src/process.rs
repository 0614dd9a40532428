//! Host processes as `/proc/<pid>/stat` shows them: a process known by its pid *and* start time
//! ([`Owner`]), so that a recycled pid is never mistaken for the process that owned an execution
//! (the engine's execution directories, the audit log's running executions), and a process's parent.

use std::fmt;
use std::sync::OnceLock;

/// A process by pid and start time (clock ticks since boot, field 22 of `/proc/<pid>/stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks since boot.
    pub start: u64,
}

impl Owner {
    /// This process (read from /proc once: it cannot change). Start time 0 if /proc cannot be
    /// read, which no live process matches.
    pub fn current() -> Self {
        static CURRENT: OnceLock<Owner> = OnceLock::new();
        *CURRENT.get_or_init(|| {
            let pid = std::process::id();
            Self { pid, start: start_time(pid).unwrap_or(0) }
        })
    }

    /// Whether this process still runs: its pid exists and started at the same time.
    pub fn alive(&self) -> bool {
        self.pid != 0 && start_time(self.pid) == Some(self.start)
    }

    /// Reads the form [`Owner`]'s `Display` writes, `"<pid> <start>"` (surrounding white space
    /// ignored). `None` if it is not two numbers.
    pub fn parse(line: &str) -> Option<Self> {
        let mut parts = line.split_whitespace();
        let owner = Self { pid: parts.next()?.parse().ok()?, start: parts.next()?.parse().ok()? };
        parts.next().is_none().then_some(owner)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.pid, self.start)
    }
}

/// Start time of process `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`);
/// `None` if there is no such process.
pub fn start_time(pid: u32) -> Option<u64> {
    stat_field(pid, 22)?.parse().ok()
}

/// Parent pid of process `pid` (field 4 of `/proc/<pid>/stat`); `None` if there is no such process.
pub fn parent_of(pid: u32) -> Option<u32> {
    stat_field(pid, 4)?.parse().ok()
}

/// Field `n` (1-based, as proc(5) numbers them) of `/proc/<pid>/stat`. The command name (field
/// 2) may hold spaces and parentheses, so fields are counted after its last `)`.
fn stat_field(pid: u32, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = stat.get(stat.rfind(')')? + 2..)?;
    after_comm.split(' ').nth(n.checked_sub(3)?).map(str::to_owned)
}

#[cfg(test)]
mod tests;
