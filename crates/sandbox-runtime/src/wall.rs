//! Landlock: a second filesystem wall behind the read-only mounts. The program may read and
//! execute the system directories, /etc and /code, read and write /workspace, /tmp and
//! /dev/shm, and use the device nodes; nothing else, whatever a mount mistake would allow.
//! The ruleset asks for every filesystem right and scope up to [`ABI_NEWEST`] and the kernel
//! enforces what its ABI knows (best effort); the ABI enforced is reported, and a run whose
//! profile demands more than the kernel offers is refused.

use landlock::{
    path_beneath_rules, Access, AccessFs, CompatLevel, Compatible, LandlockStatus, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

use crate::spec::SpawnSpec;

/// The newest landlock ABI whose rights the runtime asks for (10, Linux 7.2). TCP rights
/// (ABI 4) are never handled: the network is a namespace of its own.
pub const ABI_NEWEST: u32 = 10;

/// What each landlock ABI adds, from 2 on: `(abi, what a kernel below it lacks)`.
pub const ABI_FEATURES: [(u32, &str); 9] = [
    (2, "file rename/link across directories control (REFER; below it such renames are always refused)"),
    (3, "truncate control (TRUNCATE)"),
    (4, "TCP bind/connect control (not used: the network is namespaced)"),
    (5, "device ioctl control (IOCTL_DEV)"),
    (6, "signal and abstract unix socket scoping"),
    (7, "denial audit logging flags"),
    (8, "thread-synchronized restriction (not needed: the program is single-threaded when restricted)"),
    (9, "named unix socket connect control (RESOLVE_UNIX)"),
    (10, "quiet (unlogged) denials"),
];

/// The landlock ABI `restrict` enforces on this kernel: the kernel's, capped at
/// [`ABI_NEWEST`]; 0 when landlock is absent or disabled.
pub fn enforceable_abi() -> u32 {
    crate::sys::landlock_abi().min(ABI_NEWEST)
}

/// What a kernel offering landlock `abi` lacks compared with [`ABI_NEWEST`], one entry per
/// missing ABI (`"ABI 3: truncate control (TRUNCATE)"`); empty when nothing is missing.
pub fn missing_features(abi: u32) -> Vec<String> {
    let mut missing = Vec::new();
    if abi == 0 {
        missing.push("ABI 1: landlock itself (filesystem access control)".to_owned());
    }
    missing.extend(ABI_FEATURES.iter().filter(|(v, _)| *v > abi).map(|(v, what)| format!("ABI {v}: {what}")));
    missing
}

/// Restricts the calling process (and its future children) to the rules above, at the best
/// ABI the kernel offers, and returns that ABI (0: landlock absent, nothing enforced).
/// Errors: as text, when the kernel offers less than `spec.landlock_min_abi`, when landlock
/// fails, or when what was enforced is not exactly [`enforceable_abi`].
pub(crate) fn restrict(spec: &SpawnSpec) -> Result<u32, String> {
    let want = enforceable_abi();
    if want < spec.landlock_min_abi {
        return Err(below_minimum(want, spec.landlock_min_abi));
    }
    if want == 0 {
        // The profile allows a kernel without landlock; the mounts are the only wall.
        return Ok(0);
    }
    let abi = ABI::V10;
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    let mut read_paths: Vec<String> = spec.system_dirs.iter().filter(|d| d.exists()).filter_map(|d| d.to_str().map(str::to_owned)).collect();
    read_paths.extend(["/etc".to_owned(), "/code".to_owned()]);
    let mut write_paths: Vec<String> = vec!["/workspace".into(), "/tmp".into(), "/dev/shm".into()];
    for m in &spec.mounts {
        if m.read_only {
            read_paths.push(m.sandbox_path.clone());
        } else {
            write_paths.push(m.sandbox_path.clone());
        }
    }
    // Best effort: the kernel drops the rights its ABI does not know; the status says which ABI it used.
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .and_then(|r| r.scope(Scope::from_all(abi)))
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(&read_paths, read)))
        .and_then(|r| r.add_rules(path_beneath_rules(&write_paths, all)))
        .and_then(|r| r.add_rules(path_beneath_rules(["/dev", "/proc"], read | AccessFs::WriteFile)))
        .and_then(|r| r.add_rules(path_beneath_rules(["/"], AccessFs::ReadDir)))
        .and_then(|r| r.restrict_self())
        .map_err(|e| e.to_string())?;
    let expected = ABI::from(i32::try_from(want).expect("an ABI up to ABI_NEWEST fits an i32"));
    let enforced_as_expected = match (&status.ruleset, &status.landlock) {
        (RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced, LandlockStatus::Available { effective_abi, .. }) => *effective_abi == expected,
        _ => false,
    };
    if !enforced_as_expected {
        return Err(format!("expected ABI {want} enforced, the kernel reports {:?} ({:?})", status.landlock, status.ruleset));
    }
    Ok(want)
}

/// The refusal of a kernel offering ABI `found` to a profile that needs `needed`.
pub fn below_minimum(found: u32, needed: u32) -> String {
    if found == 0 {
        format!("landlock: absent or disabled on this kernel (ABI 0, need {needed})")
    } else {
        format!("landlock: ABI {found} (need {needed})")
    }
}
