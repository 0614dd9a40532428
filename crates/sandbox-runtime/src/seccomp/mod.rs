//! The program's seccomp filters (libseccomp): an allowlist of system calls and the argument
//! rules that narrow some of them. Any call not listed fails with ENOSYS, so libc and runtimes
//! take their fallbacks and a call the kernel adds later is refused until someone lists it; the
//! calls a sandbox must never make fail with EPERM, so a refusal by policy is told apart from an
//! unknown call; any architecture other than the native one (32-bit or x32 calls on x86-64)
//! kills the process.
//!
//! Two filters are loaded, because libseccomp drops a conditional rule for a call that also has
//! an unconditional one (an allowed `ioctl` would swallow the TIOCSTI refusal): `ALLOWED` and
//! `DENIED` decide which calls exist, and a second filter, default allow, refuses arguments
//! (namespace flags of `clone`, socket families and netlink protocols, TIOCSTI, changes of
//! RLIMIT_CORE). The kernel runs both and keeps the most restrictive answer.
//!
//! The lists and both filters are in `rules.rs`; `build.rs` has libseccomp export them as BPF
//! programs when this crate is built, so the binary neither links libseccomp nor spends its
//! ~2 ms of CPU per process. A libseccomp upgrade on the build host takes effect at the next
//! build of this crate (`cargo clean -p sandbox-runtime`); the unit tests check that the embedded
//! programs are what this host's libseccomp builds from the rules.

#[cfg(test)]
mod rules;

/// The two filters as classic BPF programs (`struct sock_filter` arrays, 8 bytes an
/// instruction), argument rules first: exported by libseccomp from `rules.rs` when this crate
/// was built (`build.rs`; libseccomp takes ~2 ms of CPU for lists this long, which every
/// process that started sandboxes used to spend), embedded here and only loaded. The engine
/// passes them to every sandbox in its spec.
static ARGUMENTS_BPF: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/seccomp-arguments.bpf"));
static CALLS_BPF: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/seccomp-calls.bpf"));

/// Both filters as BPF programs (argument rules first), as built with this crate: the engine
/// passes them in every [`crate::spec::SpawnSpec`] (`seccomp_bpf`).
pub fn programs() -> [&'static [u8]; 2] {
    [ARGUMENTS_BPF, CALLS_BPF]
}

/// Loads both filters on the calling thread (no_new_privs must be set). The kernel gets exactly
/// the programs libseccomp exported (`seccomp_export_bpf` of the same contexts); libseccomp sets
/// no filter flag by default, and neither does this. Errors: the kernel's refusal.
pub(crate) fn install() -> Result<(), String> {
    install_programs(&programs())
}

/// Loads `given` (the spec's `seccomp_bpf`: both programs, from the engine), or, when it is
/// empty, what [`install`] loads. Errors: anything but two programs, or the kernel's refusal
/// (a malformed program fails its verifier: the set-up fails, nothing runs unfiltered).
pub(crate) fn install_given(given: &[Vec<u8>]) -> Result<(), String> {
    match given.len() {
        0 => install(),
        2 => install_programs(given),
        n => Err(format!("the spawn spec carries {n} seccomp programs, not 2")),
    }
}

fn install_programs<P: AsRef<[u8]>>(programs: &[P]) -> Result<(), String> {
    for program in programs {
        crate::sys::seccomp_load(program.as_ref()).map_err(|e| format!("seccomp(SECCOMP_SET_MODE_FILTER): {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
