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

/// The three libseccomp programs `build.rs` merges: the calls filter, the arguments filter and
/// the calls filter's stand-in for the calls whose arguments it reads.
fn exported() -> (Vec<merge::Insn>, Vec<merge::Insn>, Vec<merge::Insn>) {
    let insns = |f| merge::decode(&compile(&f).unwrap()).unwrap();
    (insns(calls_filter()), insns(arguments_filter()), insns(calls_with_arguments_filter()))
}

#[test]
fn the_embedded_program_is_what_this_hosts_libseccomp_builds_from_the_rules_merged() {
    // build.rs exported them from the same rules.rs; a libseccomp upgrade since the last build
    // (another syscall table) fails here until this crate is rebuilt.
    let (calls, arguments, stand_in) = exported();
    let merged = merge::merge(&calls, &arguments, Some(&stand_in)).unwrap();
    assert_eq!(merge::encode(&merged), program());
}

/// Argument values worth trying against `programs`: every constant they compare with, its
/// neighbours, in the low or the high half of a 64-bit argument, with junk in the other half,
/// and a few edges.
fn argument_values(programs: &[&[merge::Insn]]) -> Vec<u64> {
    let mut values: BTreeSet<u64> = [0, 1, u64::MAX, u64::from(u32::MAX), 1 << 32, 0x8000_0000, 0xdead_beef_0000_0000].into();
    for p in programs {
        for i in p.iter().filter(|i| matches!(i.code, 0x15 | 0x25 | 0x35 | 0x54)) {
            for k in [i.k.wrapping_sub(1), i.k, i.k.wrapping_add(1)] {
                let k = u64::from(k);
                values.extend([k, k << 32, k | (0x1234_5678 << 32), k | (u64::from(u32::MAX) << 32)]);
            }
        }
    }
    values.into_iter().collect()
}

/// What the kernel answers for `d` with `installed` loaded in that order, written apart from
/// `merge::combine` (kernel/seccomp.c, `seccomp_run_filters`): the filters run from the last
/// installed to the first, and an answer replaces the one kept only when its action, as a
/// signed number, is smaller; the kept answer starts as ALLOW.
fn kernel_answer(installed: &[&[merge::Insn]], d: &merge::Data) -> u32 {
    let action = |v: u32| i32::from_ne_bytes((v & 0xffff_0000).to_ne_bytes());
    let mut kept = 0x7fff_0000;
    for filter in installed.iter().rev() {
        let answer = merge::run(filter, d).unwrap().answer;
        if action(answer) < action(kept) {
            kept = answer;
        }
    }
    kept
}

#[test]
fn the_merged_program_answers_as_both_filters_loaded_together_would() {
    let (calls, arguments, stand_in) = exported();
    let merged = merge::merge(&calls, &arguments, Some(&stand_in)).unwrap();
    let arch = merge::prologue(&calls).unwrap().0;
    // What the kernel answers with the two loaded: arguments first, calls last (run first).
    let expected = |d: &merge::Data| kernel_answer(&[&arguments, &calls], d);
    let check = |d: merge::Data| {
        assert_eq!(merge::run(&merged, &d).unwrap().answer, expected(&d), "{d:?}");
    };
    // Call numbers: the native table and beyond, the x32 range, the edges of a 32-bit number.
    let mut numbers: Vec<u32> = (0..=2048).collect();
    numbers.extend((0x4000_0000..=0x4000_0000 + 1024).chain([0x3fff_ffff, 0x7fff_ffff, 0x8000_0000, u32::MAX - 1, u32::MAX]));
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut random = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    numbers.extend((0..20_000).map(|_| u32::try_from(random() >> 32).unwrap_or(0)));
    let values = argument_values(&[&calls, &arguments, &stand_in]);
    let mut reads_arguments = 0;
    for &nr in &numbers {
        for foreign in [0, 0x4000_0003, 0xc000_00b7, arch ^ 1] {
            check(merge::Data { nr, arch: foreign, args: [0; 6] });
        }
        let base = merge::Data { nr, arch, args: [0; 6] };
        check(base);
        let reads = merge::run(&calls, &base).unwrap().read_input || merge::run(&arguments, &base).unwrap().read_input;
        if reads {
            // Every interesting value in every argument, alone and beside others.
            reads_arguments += 1;
            for (n, &v) in values.iter().enumerate() {
                for pos in 0..6 {
                    let mut args = [0; 6];
                    args[pos] = v;
                    check(merge::Data { nr, arch, args });
                    args[(pos + 2) % 6] = values[(n * 7 + pos) % values.len()];
                    check(merge::Data { nr, arch, args });
                }
            }
        }
        for _ in 0..if reads { 2_000 } else { 3 } {
            check(merge::Data { nr, arch, args: std::array::from_fn(|_| random()) });
        }
    }
    // clone, socket, socketpair, ioctl, setrlimit, prlimit64, mmap, memfd_create, shmget and
    // personality.
    assert_eq!(reads_arguments, 10, "the calls whose arguments are read");
}

#[test]
fn the_merged_program_is_one_short_program_the_kernel_would_take() {
    let (calls, arguments, stand_in) = exported();
    let merged = merge::decode(program()).unwrap();
    // Every jump forward and inside, a ret last (the kernel's checks, bpf_check_classic).
    for (at, i) in merged.iter().enumerate() {
        let targets: Vec<usize> = match i.code {
            0x05 => vec![at + 1 + i.k as usize],
            0x15 | 0x25 | 0x35 => vec![at + 1 + usize::from(i.jt), at + 1 + usize::from(i.jf)],
            _ => vec![],
        };
        assert!(targets.iter().all(|&t| t < merged.len()), "instruction {at} jumps out: {i:?}");
    }
    assert_eq!(merged.last().map(|i| i.code), Some(0x06));
    // Shorter than the two it replaces together: the calls filter's one comparison per call
    // is gone, the stand-in replaces it where arguments are read.
    assert!(merged.len() <= arguments.len() + stand_in.len() + 120, "{} instructions", merged.len());
    assert!(merged.len() * 2 < calls.len() + arguments.len(), "{} instructions for {} + {}", merged.len(), calls.len(), arguments.len());
}

#[test]
fn sockets_of_the_allowed_families_only_whatever_the_high_half_holds() {
    let merged = merge::decode(program()).unwrap();
    let arch = merge::prologue(&exported().0).unwrap().0;
    for (call, nr) in [("socket", libc::SYS_socket), ("socketpair", libc::SYS_socketpair)] {
        let nr = u32::try_from(nr).unwrap();
        for family in (0..300u64).chain([u64::from(u32::MAX), 1 << 32, (1 << 32) | 1, (1 << 32) | 2, u64::MAX]) {
            // A datagram socket, protocol 0 (a netlink one gets NETLINK_ROUTE).
            let answer = merge::run(&merged, &merge::Data { nr, arch, args: [family, 2, 0, 0, 0, 0] }).unwrap().answer;
            let allowed = [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6, libc::AF_NETLINK].iter().any(|&f| u64::try_from(f) == Ok(family));
            let expected = if allowed { merge::ALLOW } else { 0x0005_0000 | libc::EAFNOSUPPORT as u32 };
            assert_eq!(answer, expected, "{call}({family:#x}, ...)");
        }
    }
}

#[test]
fn a_merge_refuses_what_it_cannot_read_as_thresholds() {
    let (calls, arguments, _) = exported();
    let ld = |k| merge::Insn { code: 0x20, jt: 0, jf: 0, k };
    let ret = |k| merge::Insn { code: 0x06, jt: 0, jf: 0, k };
    let arch = merge::prologue(&calls).unwrap().0;
    // The call number masked, then compared: not a threshold comparison.
    let masked = [
        ld(4),
        merge::Insn { code: 0x15, jt: 0, jf: 4, k: arch },
        ld(0),
        merge::Insn { code: 0x54, jt: 0, jf: 0, k: 1 },
        merge::Insn { code: 0x15, jt: 0, jf: 1, k: 1 },
        ret(merge::ALLOW),
        ret(0),
    ];
    assert!(merge::merge(&masked, &arguments, None).unwrap_err().contains("masked"));
    // A second look at the architecture, or a prologue whose other branch is not a ret: other
    // architectures might get other answers than the prologue's.
    let mut twice = masked.to_vec();
    twice[2] = ld(4);
    assert!(merge::merge(&twice, &arguments, None).unwrap_err().contains("architecture again"));
    let mut no_ret = masked.to_vec();
    no_ret[1].jf = 1;
    assert!(merge::merge(&no_ret, &arguments, None).unwrap_err().contains("architecture check"));
    // A filter that reads the instruction pointer (getpid refused unless it is 0) is not
    // constant on getpid: the merged program keeps its read.
    let by_ip = [
        ld(4),
        merge::Insn { code: 0x15, jt: 0, jf: 6, k: arch },
        ld(0),
        merge::Insn { code: 0x15, jt: 0, jf: 3, k: 39 },
        ld(8),
        merge::Insn { code: 0x15, jt: 1, jf: 0, k: 0 },
        ret(0x0005_0001),
        ret(merge::ALLOW),
        ret(0x8000_0000),
    ];
    let merged = merge::merge(&by_ip, &arguments, None).unwrap();
    assert!(merged.iter().any(|i| *i == ld(8)), "{merged:?}");
    // A stand-in that does not answer as the filter it stands in for.
    let wrong = [ld(4), merge::Insn { code: 0x15, jt: 0, jf: 1, k: arch }, ret(0x0005_0026), ret(0x8000_0000)];
    assert!(merge::merge(&calls, &arguments, Some(&wrong)).unwrap_err().contains("stand-in answers otherwise"));
    // Both read the arguments of the same call: no single program to jump to.
    assert!(merge::merge(&arguments, &arguments, None).unwrap_err().contains("cannot be merged"));
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
        "io_setup",
        "io_submit",
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
fn the_filters_build() {
    calls_filter().expect("the calls filter builds");
    arguments_filter().expect("the arguments filter builds");
    calls_with_arguments_filter().expect("the stand-in builds");
}

#[test]
fn a_program_that_is_not_whole_instructions_is_refused_before_anything_loads() {
    // One whole instruction (ret ALLOW) and 3 bytes more: the kernel itself would load it (as
    // one instruction) if the length were not checked first.
    let mut given = merge::encode(&[merge::Insn { code: 0x06, jt: 0, jf: 0, k: merge::ALLOW }]);
    given.extend_from_slice(&[0, 0, 0]);
    let err = install_given(&given).unwrap_err();
    assert!(err.contains("Invalid argument"), "{err}");
}

#[test]
fn the_program_the_engine_passes_survives_the_spawn_spec() {
    let spec = crate::spec::SpawnSpec { seccomp_bpf: program().to_vec(), ..Default::default() };
    let back: crate::spec::SpawnSpec = serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
    assert_eq!(back.seccomp_bpf, spec.seccomp_bpf);
    let without: crate::spec::SpawnSpec = serde_json::from_str(&serde_json::to_string(&crate::spec::SpawnSpec::default()).unwrap()).unwrap();
    assert!(without.seccomp_bpf.is_empty());
}
