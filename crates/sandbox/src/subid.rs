//! The start-up check that no local user was delegated the sandboxes' host ids in
//! `/etc/subuid` or `/etc/subgid` (such a user could own sandbox processes and workspaces
//! through `newuidmap`): `doctor` reports it, `serve` refuses to start.

use std::path::PathBuf;

use sandbox_core::subid::{overlaps, sandbox_ids};

/// For tests only: a directory whose `subuid` and `subgid` files are read instead of
/// `/etc/subuid` and `/etc/subgid`.
pub const TEST_DIR_ENV: &str = "SANDBOX_TEST_SUBID_DIR";

/// `Ok(what was checked)`, or `Err` naming every overlapping line of either file. A missing
/// file delegates nothing; an unreadable one is an error.
pub fn check(uid_base: u32) -> Result<String, String> {
    let dir = std::env::var_os(TEST_DIR_ENV).map_or_else(|| PathBuf::from("/etc"), PathBuf::from);
    let ids = sandbox_ids(uid_base);
    let mut found = Vec::new();
    for name in ["subuid", "subgid"] {
        let path = dir.join(name);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        found.extend(overlaps(&text, &ids).into_iter().map(|o| format!("{} {o}", path.display())));
    }
    if found.is_empty() {
        Ok(format!("uid_base {} (ids {}..{}) is in no range of {}/subuid or subgid", uid_base, ids.start, ids.end, dir.display()))
    } else {
        Err(format!(
            "[runtime] uid_base {uid_base}: the sandboxes' host ids {}..{} overlap ids delegated to local users ({}); choose a uid_base outside them",
            ids.start,
            ids.end,
            found.join("; ")
        ))
    }
}
