//! Exports the sandbox's seccomp filters (`src/seccomp/rules.rs`) as classic BPF programs into
//! `OUT_DIR` (`seccomp-arguments.bpf`, `seccomp-calls.bpf`), which `src/seccomp/mod.rs` embeds:
//! libseccomp runs here, once per build, instead of in every process that starts sandboxes.

#[path = "src/seccomp/rules.rs"]
#[allow(dead_code)]
mod rules;

fn main() {
    println!("cargo::rerun-if-changed=src/seccomp/rules.rs");
    // The syscall numbers are the build host's (libseccomp's native table).
    let (host, target) = (std::env::var("HOST").unwrap_or_default(), std::env::var("TARGET").unwrap_or_default());
    assert_eq!(host, target, "the seccomp filters are built for the build host's architecture: build sandbox-runtime on {target}, not across");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for (name, filter) in [("arguments", rules::arguments_filter()), ("calls", rules::calls_filter())] {
        let filter = filter.unwrap_or_else(|e| panic!("libseccomp cannot build the {name} filter: {e}"));
        let path = out.join(format!("seccomp-{name}.bpf"));
        let file = std::fs::File::create(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        filter.export_bpf(&file).unwrap_or_else(|e| panic!("libseccomp cannot export the {name} filter: {e}"));
        drop(file);
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        // `struct sock_filter` is 8 bytes; the kernel takes at most 4096 instructions.
        assert!(len > 0 && len % 8 == 0 && len / 8 <= 4096, "libseccomp exported {len} bytes for the {name} filter, not a BPF program");
    }
}
