//! The program's command line and environment, built from the profile (never inherited).

use std::collections::BTreeMap;

use sandbox_core::profile::{Profile, RuntimeConfig, ENV_MOUNT};
use sandbox_core::{Admitted, Config, Language};

/// The Python interpreter of `profile`'s runs, as the sandbox sees it: its environment's base's
/// (`/usr/bin/python3`, [`crate::base::BASE_PYTHON`], or an image's `[oci] python`), or
/// `[runtime] python` (a host path, bound at the same place) for the host base.
pub fn python_of(config: &Config, profile: &Profile) -> String {
    match profile.environment.as_ref().and_then(|e| config.environments.get(e)).and_then(crate::base::python_of) {
        Some(python) => python.to_owned(),
        None => config.runtime.python.display().to_string(),
    }
}

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

/// The harness the program runs under, by language: it runs `main.py` / `main.mjs` as a script
/// or calls its `main(input)`, and reports the return value or an uncaught error on the side
/// channel (fd 4, [`sandbox_runtime::spec::RESULT_FD`]).
pub fn harness_source(language: Language) -> (&'static str, &'static str) {
    harness_files(language)[0]
}

/// Every file of `language`'s harness as (file name under [`CODE_DIR`], source), the one the
/// interpreter runs first: Python's is split so that a cold script run compiles only what it
/// needs (`_sandbox_harness_lib.py` holds errors, the function harness and warm starts).
pub fn harness_files(language: Language) -> &'static [(&'static str, &'static str)] {
    match language {
        Language::Python => &[("_sandbox_harness.py", include_str!("harness/harness.py")), ("_sandbox_harness_lib.py", include_str!("harness/harness_lib.py"))],
        Language::Typescript => &[("_sandbox_harness.mjs", include_str!("harness/harness.mjs"))],
    }
}

/// Python's start when the harness has bytecode in [`CODE_DIR`] (`crate::bytecode`): run by
/// `python -B -c BOOT MODE`, it loads `_sandbox_harness.pyc` when its magic number is this
/// interpreter's (else compiles `_sandbox_harness.py`, there too) and runs it as the harness
/// script would run: in `__main__`, with [`CODE_DIR`] first on `sys.path` where `-c` put the
/// working directory (not at all under `PYTHONSAFEPATH`, as for a script).
pub const BOOT: &str = r#"import sys
if sys.path and sys.path[0] == '':
    sys.path[0] = '/code'
try:
    import marshal
    from _frozen_importlib_external import MAGIC_NUMBER
    with open('/code/_sandbox_harness.pyc', 'rb') as f:
        _code = f.read()
    _code = marshal.loads(memoryview(_code)[16:]) if _code[:4] == MAGIC_NUMBER else None
except Exception:
    _code = None
if _code is None:
    with open('/code/_sandbox_harness.py', encoding='utf-8') as f:
        _code = compile(f.read(), '/code/_sandbox_harness.py', 'exec', dont_inherit=True)
exec(_code)
"#;

/// `argv` of a Python harness run ([`program_command`]: `python -B /code/_sandbox_harness.py
/// MODE`) started by [`BOOT`] instead: `python -B -c BOOT MODE`.
pub(crate) fn booted(mut argv: Vec<String>) -> Vec<String> {
    if argv.len() == 4 && argv[1] == "-B" && argv[2] == format!("{CODE_DIR}/{}", harness_source(Language::Python).0) {
        argv.splice(2..3, ["-c".to_owned(), BOOT.to_owned()]);
    }
    argv
}

/// A warm template's script (Python): imports the environment's `preload` modules, then forks
/// one child per execution (see `harness/template.py`).
pub const TEMPLATE_SOURCE: (&str, &str) = ("_sandbox_template.py", include_str!("harness/template.py"));

/// Where the function harness's input (JSON) is placed inside the sandbox (read-only).
pub const INPUT_FILE: &str = "/code/input.json";

/// Argv and environment of the program. The environment is a documented allowlist:
/// `PATH`, `HOME=/tmp`, `TMPDIR=/tmp`, `USER`/`LOGNAME=sandbox`, `LANG`/`LC_ALL=C.UTF-8`, `TZ=UTC`,
/// for Python `PYTHONUNBUFFERED=1` (output written before a kill is kept), `PYTHONDONTWRITEBYTECODE=1`,
/// with an environment `PYTHONPATH` = its site directory (the harness appends `/workspace` to
/// `sys.path` last, so input files import but never shadow the standard library or a package),
/// `MPLBACKEND=Agg` with matplotlib's config and cache under /tmp (`MPLCONFIGDIR`,
/// `XDG_CONFIG_HOME`, `XDG_CACHE_HOME`), for TypeScript with an environment `NODE_PATH=/node_modules`
/// and `NODE_COMPILE_CACHE` = its compile cache ([`crate::environment::NODE_COMPILE_CACHE_DIR`]),
/// thread-pool sizes (`OMP_NUM_THREADS`,
/// `OPENBLAS_NUM_THREADS`, `MKL_NUM_THREADS`, `NUMEXPR_NUM_THREADS`) set to the profile's CPUs
/// rounded up, then the profile's `env`, then the request's.
/// The interpreter is `python_of`.
pub fn program_command(a: &Admitted, config: &Config) -> (Vec<String>, Vec<(String, String)>) {
    let rt = &config.runtime;
    let harness = format!("{CODE_DIR}/{}", harness_source(a.language).0);
    let mode = a.harness.as_str().to_owned();
    let argv = match a.language {
        Language::Python => vec![python_of(config, &a.profile), "-B".into(), harness, mode],
        Language::Typescript => {
            let mut argv = node_flags(&a.profile, rt);
            argv.extend([harness, mode]);
            argv
        }
    };
    (argv, program_env(&a.profile, a.language, on_base(config, &a.profile), &a.env))
}

/// The argv and environment of a pooled sandbox of `profile` (see [`crate::pool`]): the
/// program's, with the harness in `pool` mode and no request's variables (the harness sets
/// those it is handed with the code).
pub fn pool_command(profile: &Profile, config: &Config) -> (Vec<String>, Vec<(String, String)>) {
    let rt = &config.runtime;
    let harness = format!("{CODE_DIR}/{}", harness_source(profile.language).0);
    let argv = match profile.language {
        Language::Python => vec![python_of(config, profile), "-B".into(), harness, "pool".into()],
        Language::Typescript => {
            let mut argv = node_flags(profile, rt);
            argv.extend([harness, "pool".into()]);
            argv
        }
    };
    (argv, program_env(profile, profile.language, on_base(config, profile), &BTreeMap::new()))
}

/// Whether a request's environment variable `name` is one the interpreter reads only as it
/// starts (`NODE_OPTIONS`, `UV_THREADPOOL_SIZE`, `PYTHONPATH`, ...): a pooled sandbox, started
/// before the request, could not honour it, so such a request starts cold.
pub fn read_at_start(language: Language, name: &str) -> bool {
    let locale = name == "TZ" || name == "LANG" || name.starts_with("LC_");
    locale
        || match language {
            Language::Python => name.starts_with("PYTHON"),
            Language::Typescript => name.starts_with("NODE_") || name.starts_with("UV_"),
        }
}

/// The node binary and flags of every TypeScript program of `profile`.
fn node_flags(profile: &Profile, rt: &RuntimeConfig) -> Vec<String> {
    // V8's heap limit below the cgroup's, so a heap overflow ends as V8's own
    // "heap out of memory" rather than a kill with no message.
    let heap_mib = (profile.limits.memory_max_bytes >> 20) * 3 / 4;
    vec![rt.node_binary(profile.node.as_deref()).display().to_string(), "--enable-source-maps".into(), format!("--max-old-space-size={}", heap_mib.max(16))]
}

/// The argv and environment of a warm template for `profile` (Python): the program's
/// environment without any request's variables, BLAS and OpenMP pools single-threaded (a
/// template must be single-threaded when it forks; each child gets the profile's count back),
/// plus `SANDBOX_PRELOAD` (modules to import) and `SANDBOX_WARM_LIB` (the library to load).
pub fn template_command(profile: &Profile, config: &Config, preload: &[String], warm_lib: &str) -> (Vec<String>, Vec<(String, String)>) {
    let script = format!("{CODE_DIR}/{}", TEMPLATE_SOURCE.0);
    let argv = vec![python_of(config, profile), "-B".into(), script];
    let mut env = program_env(profile, Language::Python, on_base(config, profile), &BTreeMap::new());
    for (k, v) in env.iter_mut() {
        if matches!(k.as_str(), "OMP_NUM_THREADS" | "OPENBLAS_NUM_THREADS" | "MKL_NUM_THREADS" | "NUMEXPR_NUM_THREADS") {
            *v = "1".into();
        }
    }
    // OpenBLAS reads this once, when numpy loads it in the template: the worker threads a child
    // starts (`blas_threads` in template.py, the profile's count) sleep as soon as they are idle
    // instead of spinning for ~0.1 s (its default). A thread spinning on the other core made
    // every copy-on-write fault of the child a cross-core TLB shootdown: ~4x the kernel time,
    // +70 ms on the data-analyst job's first run in a child.
    env.push(("OPENBLAS_THREAD_TIMEOUT".into(), "4".into()));
    env.push(("SANDBOX_PRELOAD".into(), preload.join(",")));
    env.push(("SANDBOX_WARM_LIB".into(), warm_lib.into()));
    (argv, env)
}

/// The host interpreter that runs `profile`'s Python programs, bound at the same path: `[runtime]
/// python` unless the profile's environment sits on a base (whose interpreter is inside its
/// root, never run on the host).
pub(crate) fn host_python(config: &Config, profile: &Profile) -> Option<std::path::PathBuf> {
    (!on_base(config, profile)).then(|| config.runtime.python.clone())
}

/// Whether `profile`'s environment sits on a base other than the host's.
fn on_base(config: &Config, profile: &Profile) -> bool {
    profile.environment.as_ref().and_then(|e| config.environments.get(e)).and_then(crate::base::base_of).is_some()
}

/// The program's environment (see [`program_command`]) for `profile`, with `request_env` last.
/// `on_base`: the environment sits on a base, whose bytecode it carries
/// ([`crate::environment::PYCACHE_DIR`], named by `PYTHONPYCACHEPREFIX`).
fn program_env(profile: &Profile, language: Language, on_base: bool, request_env: &BTreeMap<String, String>) -> Vec<(String, String)> {
    // cpu_max is validated to 0.01..=1024, so the rounded-up value fits.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let threads = (profile.limits.cpu_max.ceil().max(1.0) as u64).to_string();
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
    let with_env = profile.environment.is_some();
    match language {
        Language::Python => {
            // /workspace is not on PYTHONPATH, which comes before the standard library: the
            // harness appends it to sys.path, after the standard library and the environment,
            // so an input named json.py imports but cannot replace a module in use.
            if with_env {
                env.push(("PYTHONPATH".to_owned(), format!("{ENV_MOUNT}/python")));
            }
            if on_base {
                env.push(("PYTHONPYCACHEPREFIX".to_owned(), format!("{ENV_MOUNT}/{}", crate::environment::PYCACHE_DIR)));
            }
            for (k, v) in [
                ("PYTHONUNBUFFERED", "1"),
                ("PYTHONDONTWRITEBYTECODE", "1"),
                // matplotlib: no display, and its config and font cache in the writable /tmp.
                ("MPLBACKEND", "Agg"),
                ("MPLCONFIGDIR", "/tmp/.config/matplotlib"),
                ("XDG_CONFIG_HOME", "/tmp/.config"),
                ("XDG_CACHE_HOME", "/tmp/.cache"),
            ] {
                env.push((k.to_owned(), v.to_owned()));
            }
        }
        Language::Typescript if with_env => {
            env.push(("NODE_PATH".to_owned(), "/node_modules".to_owned()));
            // Read-only: the environment's prebuilt code cache of its packages (an environment
            // without one leaves Node.js compiling as without it).
            env.push(("NODE_COMPILE_CACHE".to_owned(), format!("{ENV_MOUNT}/{}", crate::environment::NODE_COMPILE_CACHE_DIR)));
        }
        Language::Typescript => {}
    }
    for (k, v) in profile.env.iter().chain(request_env.iter()) {
        env.retain(|(name, _)| name != k);
        env.push((k.clone(), v.clone()));
    }
    env
}
