//! Links the stack unwinder into `sandbox` statically on glibc targets (libgcc_eh.a, what
//! `gcc -static-libgcc` links into a C++ program) instead of loading libgcc_s.so.1 at every start.
//!
//! Why: `sandbox run` is a process per execution, and every start of a program linked against
//! libgcc_s.so.1 runs its constructor `__cpu_indicator_init`, which probes the CPU with a few
//! `cpuid` instructions: each is a VM exit on a virtual machine (7.4 µs on this machine kind).
//! With the loader's work for one library less, an empty Rust `main` took 0.89 ms of CPU against
//! 1.02 (`wait4` rusage, 400 interleaved runs): ~0.14 ms of every `sandbox run`'s start.
//! Nothing else changes: panics unwind and backtraces resolve through the same code (libgcc's
//! DWARF unwinder, which finds each loaded object's `.eh_frame_hdr` through `dl_iterate_phdr`),
//! and the binary never calls `pthread_cancel` or `pthread_exit` (glibc loads libgcc_s.so.1 for
//! those by itself). libgcc is under the GCC Runtime Library Exception, which allows this.
//!
//! How: Rust's standard library asks for `-lgcc_s`, and rustc passes `--as-needed`, so the
//! library is left out once nothing needs it. The whole archive is linked because the crates
//! that call the unwinder come after this one on the link line, and an archive member is only
//! taken for symbols already wanted. Not for the musl target (Rust links its own unwinder there
//! statically) or a `crt-static` build (the C runtime is static already).

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let crt_static = var("CARGO_CFG_TARGET_FEATURE").split(',').any(|f| f == "crt-static");
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu" && !crt_static {
        println!("cargo::rustc-link-lib=static:+whole-archive=gcc_eh");
    }
}
