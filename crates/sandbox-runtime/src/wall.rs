//! Landlock: a second filesystem wall behind the read-only mounts. The program may read and
//! execute the system directories, /etc and /code, read and write /workspace, /tmp and
//! /dev/shm, and use the device nodes; nothing else, whatever a mount mistake would allow.

use landlock::{
    path_beneath_rules, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, ABI,
};

use crate::spec::SpawnSpec;

/// The landlock ABI the runtime requires (3: file truncation is controlled). A kernel with less
/// makes the run fail; isolation is never silently weaker.
pub(crate) const ABI_REQUIRED: u32 = 3;

/// Restricts the calling process (and its future children) to the rules above.
/// Errors: the landlock error as text, including "not fully enforced" on an older kernel.
pub(crate) fn restrict(spec: &SpawnSpec) -> Result<(), String> {
    let abi = ABI::V3;
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    let mut read_paths: Vec<String> = spec
        .system_dirs
        .iter()
        .filter(|d| d.exists())
        .filter_map(|d| d.to_str().map(str::to_owned))
        .collect();
    read_paths.extend(["/etc".to_owned(), "/code".to_owned()]);
    let mut write_paths: Vec<String> = vec!["/workspace".into(), "/tmp".into(), "/dev/shm".into()];
    for m in &spec.mounts {
        if m.read_only {
            read_paths.push(m.sandbox_path.clone());
        } else {
            write_paths.push(m.sandbox_path.clone());
        }
    }
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(&read_paths, read)))
        .and_then(|r| r.add_rules(path_beneath_rules(&write_paths, all)))
        .and_then(|r| r.add_rules(path_beneath_rules(["/dev", "/proc"], read | AccessFs::WriteFile)))
        .and_then(|r| r.add_rules(path_beneath_rules(["/"], AccessFs::ReadDir)))
        .and_then(|r| r.restrict_self())
        .map_err(|e| e.to_string())?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(()),
        other => Err(format!("landlock ABI {ABI_REQUIRED} not fully enforced ({other:?})")),
    }
}
