//! The filters are built here without being loaded; what they do to a real program is tested by
//! the integration tests (`crates/sandbox/tests/it/attacks.rs`).

use std::collections::BTreeSet;

use libseccomp::{ScmpFilterContext, ScmpSyscall};

use super::rules::*;
use super::*;

/// One filter context exported as BPF (through a memfd: this libseccomp has no in-memory export).
fn compile(filter: &Result<ScmpFilterContext, libseccomp::error::SeccompError>) -> Result<Vec<u8>, String> {
    use std::io::{Read, Seek};

    let filter = filter.as_ref().map_err(ToString::to_string)?;
    let fd = nix::sys::memfd::memfd_create(c"seccomp-bpf", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).map_err(|e| format!("memfd_create: {e}"))?;
    let mut file = std::fs::File::from(fd);
    filter.export_bpf(&file).map_err(|e| e.to_string())?;
    let mut program = Vec::new();
    file.rewind().and_then(|()| file.read_to_end(&mut program)).map_err(|e| format!("reading the exported filter: {e}"))?;
    Ok(program)
}

#[test]
fn the_embedded_programs_are_what_this_hosts_libseccomp_builds_from_the_rules() {
    // build.rs exported them from the same rules.rs; a libseccomp upgrade since the last build
    // (another syscall table) fails here until this crate is rebuilt.
    let [arguments, calls] = programs();
    assert_eq!(compile(&arguments_filter()).unwrap(), arguments, "the arguments filter");
    assert_eq!(compile(&calls_filter()).unwrap(), calls, "the calls filter");
}

#[test]
fn lists_are_disjoint_and_without_duplicates() {
    let allowed: BTreeSet<&str> = ALLOWED.iter().copied().collect();
    let denied: BTreeSet<&str> = DENIED.iter().copied().collect();
    assert_eq!(allowed.len(), ALLOWED.len(), "a name is listed twice in ALLOWED");
    assert_eq!(denied.len(), DENIED.len(), "a name is listed twice in DENIED");
    let both: Vec<&&str> = allowed.intersection(&denied).collect();
    assert!(both.is_empty(), "allowed and denied at once: {both:?}");
}

#[test]
fn never_allowed() {
    // clone3 must stay ENOSYS (libc then uses clone, whose flags are checked); personality goes
    // through its value list; the rest are newer than this review or never needed.
    for name in [
        "clone3",
        "personality",
        "listmount",
        "statmount",
        "mseal",
        "open_tree_attr",
        "file_setattr",
        "file_getattr",
        "lsm_get_self_attr",
        "lsm_set_self_attr",
        "lsm_list_modules",
        "setxattrat",
        "memfd_secret",
        "modify_ldt",
        "get_mempolicy",
        "set_mempolicy",
        "mbind",
        "move_pages",
        "migrate_pages",
    ] {
        assert!(!ALLOWED.contains(&name), "{name} is allowed");
    }
    assert!(!DENIED.contains(&"clone3"), "clone3 must get ENOSYS, not EPERM");
}

#[test]
fn every_allowed_name_this_libseccomp_knows_is_a_native_call() {
    // Names must be native 64-bit calls: a pseudo number (negative) means a 32-bit-only name.
    for name in ALLOWED {
        if let Ok(sc) = ScmpSyscall::from_name(name) {
            assert!(sc.as_raw_syscall() >= 0, "{name} is not a native system call here");
        }
    }
    // The dangerous ones this libseccomp knows really get their EPERM rule.
    for name in ["mount", "unshare", "setns", "bpf", "keyctl", "io_uring_setup", "perf_event_open", "userfaultfd", "ptrace"] {
        assert!(ScmpSyscall::from_name(name).is_ok(), "libseccomp does not know {name}");
    }
}

#[test]
fn both_filters_build() {
    calls_filter().expect("the calls filter builds");
    arguments_filter().expect("the arguments filter builds");
}

#[test]
fn both_filters_build_into_whole_bpf_programs() {
    let [arguments, calls] = programs();
    for program in [arguments, calls] {
        assert!(!program.is_empty() && program.len().is_multiple_of(8) && program.len() / 8 <= 4096, "{} bytes", program.len());
    }
    // The calls filter is the long one: every allowed name is a comparison.
    assert!(calls.len() / 8 > ALLOWED.len() / 2, "{} instructions for {} allowed calls", calls.len() / 8, ALLOWED.len());
}

#[test]
fn a_spec_with_other_than_two_programs_is_refused_before_anything_loads() {
    let one = programs()[0].to_vec();
    let err = install_given(&[one]).unwrap_err();
    assert!(err.contains("1 seccomp programs, not 2"), "{err}");
}

#[test]
fn the_programs_the_engine_passes_survive_the_spawn_spec() {
    let spec = crate::spec::SpawnSpec { seccomp_bpf: programs().iter().map(|p| p.to_vec()).collect(), ..Default::default() };
    let back: crate::spec::SpawnSpec = serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
    assert_eq!(back.seccomp_bpf, spec.seccomp_bpf);
    let without: crate::spec::SpawnSpec = serde_json::from_str(&serde_json::to_string(&crate::spec::SpawnSpec::default()).unwrap()).unwrap();
    assert!(without.seccomp_bpf.is_empty());
}
