//! The program's seccomp filter (libseccomp's, merged): an allowlist of system calls and the argument
//! rules that narrow some of them. Any call not listed fails with ENOSYS, so libc and runtimes
//! take their fallbacks and a call the kernel adds later is refused until someone lists it; the
//! calls a sandbox must never make fail with EPERM, so a refusal by policy is told apart from an
//! unknown call; any architecture other than the native one (32-bit or x32 calls on x86-64)
//! kills the process.
//!
//! The rules are two libseccomp filters, because libseccomp drops a conditional rule for a call
//! that also has an unconditional one (an allowed `ioctl` would swallow the TIOCSTI refusal):
//! `ALLOWED` and `DENIED` decide which calls exist (the calls filter), and a second filter,
//! default allow, refuses arguments (namespace flags of `clone`, socket families and netlink
//! protocols, TIOCSTI, changes of RLIMIT_CORE). Loaded both, the kernel would run both and keep
//! the most restrictive answer. They are not loaded as they are: `merge.rs` turns them into one
//! program that answers exactly that (a search over ranges of call numbers, with a jump to the
//! argument rules where there are some), loaded in one `seccomp(2)` call.
//!
//! The lists and both filters are in `rules.rs`; `build.rs` has libseccomp export them as BPF
//! programs and merges them when this crate is built, so the binary neither links libseccomp nor
//! spends its ~2 ms of CPU per process. A libseccomp upgrade on the build host takes effect at
//! the next build of this crate (`cargo clean -p sandbox-runtime`); the unit tests check that the
//! embedded program is what this host's libseccomp builds from the rules, merged, and that it
//! answers as the two filters loaded together would on call numbers 0-2048, the first 1,025 of
//! the x32 range, the edges of a 32-bit number and 20,000 random ones, and on the arguments the
//! rules look at. Why that is the whole story: `merge.rs`.

#[cfg(test)]
mod rules;

#[cfg(test)]
mod merge;

/// The filter as one classic BPF program (a `struct sock_filter` array, 8 bytes an
/// instruction): libseccomp's two filters exported and merged when this crate was built
/// (`build.rs`, `merge.rs`), embedded here and only loaded. The engine passes it to every
/// sandbox in its spec. Loading it took ~0.04 ms on this machine kind, the two filters it
/// replaces ~0.11 ms (the kernel converts, compiles and runs a filter per call number when it
/// is loaded: the time follows its length, 648 instructions then, 201 now).
static PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/seccomp.bpf"));

/// The filter as built with this crate: the engine passes it in every
/// [`crate::spec::SpawnSpec`] (`seccomp_bpf`).
pub fn program() -> &'static [u8] {
    PROGRAM
}

/// Loads the filter on the calling thread (no_new_privs must be set): `given` (the spec's
/// `seccomp_bpf`, from the engine), or, when it is empty, the one built with this crate
/// ([`program`]). No filter flag is set, as libseccomp sets none by default.
/// Errors: the kernel's refusal (a malformed program fails its verifier: the set-up fails,
/// nothing runs unfiltered).
pub(crate) fn install_given(given: &[u8]) -> Result<(), String> {
    let program = if given.is_empty() { PROGRAM } else { given };
    crate::sys::seccomp_load(program).map_err(|e| format!("seccomp(SECCOMP_SET_MODE_FILTER): {e}"))
}

#[cfg(test)]
mod tests;
