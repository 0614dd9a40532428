//! Where execution cgroups live: under the service's own cgroup (cgroup v2), so that the limits
//! of whatever contains the service (a systemd unit with `Delegate=yes`, a container with its
//! own cgroup namespace, a Kubernetes pod) contain every execution too; or under a configured
//! parent; never directly in a hierarchy's root.

use std::fs;
use std::io;
use std::path::Path;

use super::{CgroupError, Layout};

/// The leaf the service's own processes move into on cgroup v2 ("no internal processes": a
/// cgroup that gives controllers to children holds no process itself). A service that finds
/// itself in a leaf of this name is already placed, and uses the leaf's parent.
pub const SERVICE_LEAF: &str = "sandbox-service";

/// Name of the cgroup, below the service's base, that holds one cgroup per execution.
pub const EXECUTIONS: &str = "sandbox";

/// Where execution cgroups go, as resolved by [`place`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Parent of the execution cgroups, relative to each hierarchy's root (`a/b/sandbox`).
    pub parent: String,
    /// One line for `doctor`: where, and why there.
    pub detail: String,
}

/// Resolves the parent of execution cgroups, and on cgroup v2 makes it usable.
///
/// - `configured` (`[runtime] cgroup_parent`, a path below the hierarchy root): used as is.
/// - v2, otherwise: `<own>/sandbox`, where `<own>` is the service's cgroup from
///   `/proc/self/cgroup` (its parent when that is already [`SERVICE_LEAF`]). Unless `<own>` is
///   the hierarchy's real root, the processes in it are moved into `<own>/sandbox-service` first,
///   as v2 requires before `<own>` can give its children controllers.
/// - v1: `sandbox` under each controller's mount, as the v1 hierarchies are not delegated.
///
/// `self_cgroup` is the text of `/proc/self/cgroup`.
/// Errors: [`CgroupError::Write`] or [`CgroupError::Dir`] naming what the kernel refused.
pub fn place(layout: &Layout, configured: Option<&str>, self_cgroup: &str) -> Result<Placement, CgroupError> {
    if let Some(c) = configured {
        let parent = c.trim_matches('/').to_owned();
        let detail = format!("executions under the configured parent /{parent} ([runtime] cgroup_parent)");
        return Ok(Placement { parent, detail });
    }
    let Layout::V2 { root } = layout else {
        return Ok(Placement { parent: EXECUTIONS.into(), detail: format!("v1: executions under /{EXECUTIONS} of each controller's hierarchy") });
    };
    let own = self_cgroup.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("/").trim().trim_matches('/');
    let base = match own.rsplit_once('/') {
        Some((parent, SERVICE_LEAF)) => parent,
        None if own == SERVICE_LEAF => "",
        _ => own,
    };
    let base_dir = root.join(base);
    // The real root has no cgroup.type; the root of a cgroup namespace (a container) does, and
    // like any other cgroup it may not hold processes while its children have controllers.
    let is_real_root = !base_dir.join("cgroup.type").exists();
    if is_real_root {
        return Ok(Placement { parent: EXECUTIONS.into(), detail: format!("the service runs in the root cgroup: executions under /{EXECUTIONS}") });
    }
    vacate(&base_dir)?;
    let parent = if base.is_empty() { EXECUTIONS.to_owned() } else { format!("{base}/{EXECUTIONS}") };
    Ok(Placement {
        detail: format!(
            "executions under the service's own cgroup: /{parent} (the service's processes in /{base}{}{SERVICE_LEAF})",
            if base.is_empty() { "" } else { "/" }
        ),
        parent,
    })
}

/// Moves every process of the v2 cgroup `dir` into `dir/sandbox-service` and enables memory,
/// cpu and pids for `dir`'s children; retries while processes arrive meanwhile (a fork racing
/// the move). A no-op when `dir` is already empty with the controllers enabled.
fn vacate(dir: &Path) -> Result<(), CgroupError> {
    let leaf = dir.join(SERVICE_LEAF);
    let mut tries = 0;
    loop {
        let procs_file = dir.join("cgroup.procs");
        let procs = super::read(&procs_file)?;
        if !procs.trim().is_empty() {
            if !leaf.exists() {
                fs::create_dir(&leaf)
                    .or_else(|e| if e.kind() == io::ErrorKind::AlreadyExists { Ok(()) } else { Err(e) })
                    .map_err(|source| CgroupError::Dir { op: "create", path: leaf.clone(), source })?;
            }
            for pid in procs.split_whitespace() {
                match fs::write(leaf.join("cgroup.procs"), pid) {
                    // Gone meanwhile.
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                    r => r.map_err(|source| CgroupError::Write { path: leaf.join("cgroup.procs"), value: pid.to_owned(), source })?,
                }
            }
        }
        match super::v2::enable_controllers(dir) {
            Err(CgroupError::Write { source, .. }) if source.raw_os_error() == Some(libc::EBUSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            r => return r,
        }
    }
}
