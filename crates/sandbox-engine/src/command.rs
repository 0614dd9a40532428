//! The program's command line and environment, built from the profile (never inherited).

use sandbox_core::profile::RuntimeConfig;
use sandbox_core::{Admitted, Language};

/// Where the code is placed inside the sandbox (read-only).
pub const CODE_DIR: &str = "/code";

/// File name of the code inside [`CODE_DIR`] for `language`.
pub fn code_file(language: Language) -> &'static str {
    match language {
        Language::Python => "main.py",
        // Transpiled TypeScript, run as an ES module.
        Language::Typescript => "main.mjs",
    }
}

/// Argv and environment of the program. The environment is a documented allowlist:
/// `PATH`, `HOME=/tmp`, `TMPDIR=/tmp`, `USER`/`LOGNAME=sandbox`, `LANG`/`LC_ALL=C.UTF-8`, `TZ=UTC`,
/// for Python `PYTHONUNBUFFERED=1` (output written before a kill is kept), `PYTHONDONTWRITEBYTECODE=1`
/// and `PYTHONPATH=/workspace` (input files import), thread-pool sizes (`OMP_NUM_THREADS`,
/// `OPENBLAS_NUM_THREADS`, `MKL_NUM_THREADS`, `NUMEXPR_NUM_THREADS`) set to the profile's CPUs
/// rounded up, then the profile's `env`, then the request's.
pub fn program_command(a: &Admitted, rt: &RuntimeConfig) -> (Vec<String>, Vec<(String, String)>) {
    let code = format!("{CODE_DIR}/{}", code_file(a.language));
    let argv = match a.language {
        Language::Python => vec![rt.python.display().to_string(), "-B".into(), code],
        Language::Typescript => {
            // V8's heap limit below the cgroup's, so a heap overflow ends as V8's own
            // "heap out of memory" rather than a kill with no message.
            let heap_mib = (a.profile.limits.memory_max_bytes >> 20) * 3 / 4;
            vec![rt.node.display().to_string(), "--enable-source-maps".into(), format!("--max-old-space-size={}", heap_mib.max(16)), code]
        }
    };
    // cpu_max is validated to 0.01..=1024, so the rounded-up value fits.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let threads = (a.profile.limits.cpu_max.ceil().max(1.0) as u64).to_string();
    let mut env: Vec<(String, String)> = [
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("HOME", "/tmp"),
        ("TMPDIR", "/tmp"),
        ("USER", "sandbox"),
        ("LOGNAME", "sandbox"),
        ("LANG", "C.UTF-8"),
        ("LC_ALL", "C.UTF-8"),
        ("TZ", "UTC"),
        ("OMP_NUM_THREADS", threads.as_str()),
        ("OPENBLAS_NUM_THREADS", threads.as_str()),
        ("MKL_NUM_THREADS", threads.as_str()),
        ("NUMEXPR_NUM_THREADS", threads.as_str()),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    if a.language == Language::Python {
        for (k, v) in [("PYTHONUNBUFFERED", "1"), ("PYTHONDONTWRITEBYTECODE", "1"), ("PYTHONPATH", "/workspace")] {
            env.push((k.to_owned(), v.to_owned()));
        }
    }
    for (k, v) in a.profile.env.iter().chain(a.env.iter()) {
        env.retain(|(name, _)| name != k);
        env.push((k.clone(), v.clone()));
    }
    (argv, env)
}
