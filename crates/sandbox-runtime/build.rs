//! Exports the sandbox's seccomp filters (`src/seccomp/rules.rs`) as classic BPF programs with
//! libseccomp and merges them into the one program `src/seccomp/mod.rs` embeds
//! (`OUT_DIR/seccomp.bpf`, see `src/seccomp/merge.rs`): libseccomp runs here, once per build,
//! instead of in every process that starts sandboxes.

#[path = "src/seccomp/rules.rs"]
#[allow(dead_code)]
mod rules;

#[path = "src/seccomp/merge.rs"]
#[allow(dead_code)]
mod merge;

/// `filter` exported as BPF by libseccomp, through a file in `OUT_DIR` (this libseccomp has no
/// in-memory export).
fn export(name: &str, filter: Result<libseccomp::ScmpFilterContext, libseccomp::error::SeccompError>, out: &std::path::Path) -> Vec<merge::Insn> {
    let filter = filter.unwrap_or_else(|e| panic!("libseccomp cannot build the {name} filter: {e}"));
    let path = out.join(format!("seccomp-{name}.bpf"));
    let file = std::fs::File::create(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    filter.export_bpf(&file).unwrap_or_else(|e| panic!("libseccomp cannot export the {name} filter: {e}"));
    drop(file);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    merge::decode(&bytes).unwrap_or_else(|e| panic!("libseccomp exported no BPF program for the {name} filter: {e}"))
}

fn main() {
    println!("cargo::rerun-if-changed=src/seccomp/rules.rs");
    println!("cargo::rerun-if-changed=src/seccomp/merge.rs");
    // The syscall numbers are the build host's architecture's (libseccomp's native table); the
    // C library does not matter (x86_64-unknown-linux-musl shares x86_64-unknown-linux-gnu's).
    let host = std::env::var("HOST").unwrap_or_default();
    let target_arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    assert_eq!(
        host.split('-').next(),
        Some(target_arch.as_str()),
        "the seccomp filters are built for the build host's architecture: build sandbox-runtime on {target_arch}, not on {host}"
    );
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let calls = export("calls", rules::calls_filter(), &out);
    let arguments = export("arguments", rules::arguments_filter(), &out);
    let stand_in = export("calls-with-arguments", rules::calls_with_arguments_filter(), &out);
    // Loaded as they were before the merge: the arguments filter first, the calls filter last.
    let merged = merge::merge(&calls, &arguments, Some(&stand_in)).unwrap_or_else(|e| panic!("the seccomp filters cannot be merged: {e}"));
    let path = out.join("seccomp.bpf");
    std::fs::write(&path, merge::encode(&merged)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}
