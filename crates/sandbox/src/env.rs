//! `sandbox env`: list, install, verify and remove package environments.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use sandbox_core::profile::{Environment, Limits};
use sandbox_core::{Config, ExecutionRequest, Language, Profile, Status};
use sandbox_engine::environment::{BuildSandbox, Environments, Installed};

/// `sandbox env ...`.
#[derive(clap::Subcommand, Debug)]
pub enum EnvCommand {
    /// Each declared environment: installed or not, size, the profiles that use it.
    List,
    /// Build an environment (idempotent: an installed one is left as it is). Progress goes to stderr.
    Install {
        /// Environment name, e.g. `python-analysis`.
        name: String,
    },
    /// Check an installed environment: its files against the manifest's digest, then every
    /// package imported inside a real sandbox. Exit codes: 0 all good; 2 no such environment
    /// is declared (or another error, named on stderr); 3 it is not installed; 4 its files changed after install; 5 a package
    /// failed to import inside the sandbox; 6 the sandbox could not run the check (the host
    /// cannot run the profile, a limit ended it, an internal error).
    Verify {
        /// Environment name.
        name: String,
    },
    /// Write lock files for an environment's pins: `NAME.python-lock.txt` (uv pip compile
    /// --generate-hashes) and `NAME.package-lock.json` (npm), then name them in its
    /// `[environments.NAME]` as `python_lock` and `npm_lock` so installs check every hash.
    Lock {
        /// Environment name.
        name: String,
        /// Where to write them.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
    /// Remove what no declared environment needs: older versions of each declared environment
    /// and bases no installed environment names. A version or base a running execution uses
    /// is kept (and named). `install` removes the older versions of what it installs, but not
    /// under `[runtime] environments_dir` (configurations declaring a name differently may share it).
    Gc,
    /// Remove every installed version of an environment (its base, possibly shared, stays until
    /// `env gc`).
    Remove {
        /// Environment name.
        name: String,
    },
}

fn declared<'a>(config: &'a Config, name: &str) -> anyhow::Result<&'a Environment> {
    config.environments.get(name).with_context(|| {
        let known: Vec<&str> = config.environments.keys().map(String::as_str).collect();
        format!("no environment named {name:?}; declared: {}", known.join(", "))
    })
}

/// Installs `name`, printing progress on stderr. Used by `env install` and `run --install`.
/// A SIGINT or SIGTERM ends a sandboxed step that runs ([`crate::interrupt`]): the install then
/// fails, leaves nothing half-built, and the process ends by the signal before this returns.
pub fn install(config: &Config, data_dir: &Path, name: &str) -> anyhow::Result<()> {
    crate::interrupt::arm();
    let installed = install_armed(config, data_dir, name);
    match &installed {
        Ok(()) => crate::interrupt::exit_if_interrupted(None, "the install had completed; nothing after it ran"),
        Err(e) => crate::interrupt::exit_if_interrupted(Some(e), "the sandbox that ran was ended and removed; nothing was installed"),
    }
    installed
}

fn install_armed(config: &Config, data_dir: &Path, name: &str) -> anyhow::Result<()> {
    let env = declared(config, name)?;
    let envs = Environments::for_runtime(&config.runtime, data_dir);
    let sandbox = EngineSandbox { config, data_dir };
    let outcome = envs.install(name, env, &config.runtime, &sandbox, &mut |line| errln!("{line}"))?;
    if let Installed::Built(_, m) = outcome {
        errln!("python: {}", if m.python_installed.is_empty() { "-".into() } else { m.python_installed.join(" ") });
        errln!("npm: {}", if m.npm_installed.is_empty() { "-".into() } else { m.npm_installed.join(" ") });
    }
    Ok(())
}

/// Runs an install's steps that execute package code as executions through the engine, of a
/// profile made for the step (recorded in the audit log like any run, caller `cli:env-install`).
struct EngineSandbox<'a> {
    config: &'a Config,
    data_dir: &'a Path,
}

impl BuildSandbox for EngineSandbox<'_> {
    fn run(&self, name: &str, build: &Path, language: Language, code: &str, outputs: &[&str]) -> Result<BTreeMap<String, Vec<u8>>, String> {
        let mut config = self.config.clone();
        let profile = format!("env-build-{name}");
        config.profiles.insert(profile.clone(), step_profile(name, language, format!("builds environment {name}")));
        let builds = BTreeMap::from([(name.to_owned(), build.to_owned())]);
        let (engine, _audit) = crate::audit::engine_building(config, self.data_dir.to_owned(), builds).map_err(|e| format!("{e:#}"))?;
        let engine = std::sync::Arc::new(engine);
        // A signal from here on ends this step's sandbox (one that came before starts none).
        let _running = crate::interrupt::running(&engine).map_err(|sig| format!("interrupted by {}", crate::run::signal_name(sig)))?;
        let service = std::sync::Arc::new(sandbox_engine::Service::new(engine, 1, 0, std::sync::Arc::new(sandbox_engine::NoHooks)));
        let caller = sandbox_engine::Caller::local("cli:env-install");
        let request = ExecutionRequest {
            profile: profile.clone(),
            code: code.to_owned(),
            outputs: outputs.iter().map(|o| (*o).to_owned()).collect(),
            ..Default::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        let r = match service.submit(&caller, request) {
            Ok(ticket) => rt.block_on(ticket.run(None)),
            Err(refusal) => refusal.into_result(&profile),
        };
        if r.status != Status::Ok {
            let error = r.error.as_ref().map(|e| format!(" ({}: {})", e.kind, e.message)).unwrap_or_default();
            return Err(format!("{} (execution {}){error}: {}", r.status.as_str(), r.execution_id, r.stderr.trim_end()));
        }
        use base64::Engine as _;
        r.files.into_iter().map(|(path, f)| base64::engine::general_purpose::STANDARD.decode(f.base64).map(|b| (path, b)).map_err(|e| e.to_string())).collect()
    }
}

/// The profile of a step run for environment `name` (install, verify): 2 GiB, 2 CPUs, 256
/// pids, 120 s, no network.
fn step_profile(name: &str, language: Language, description: String) -> Profile {
    Profile {
        language,
        description,
        harness: sandbox_core::Harness::Script,
        limits: Limits { memory_max_bytes: 2 << 30, cpu_max: 2.0, pids_max: 256, timeout_ms: 120_000, ..Limits::default() },
        // Room for what a step returns: the bytecode of an environment on a base is thousands of files.
        filesystem: sandbox_core::profile::Filesystem { workspace_max_bytes: 2 << 30, ..Default::default() },
        output: sandbox_core::profile::OutputCaps { files_max_count: 100_000, files_max_bytes: 2 << 30, ..Default::default() },
        network: Default::default(),
        env: Default::default(),
        environment: Some(name.to_owned()),
        node: None,
        warm: Default::default(),
        landlock_min_abi: sandbox_core::profile::LANDLOCK_MIN_ABI_DEFAULT,
    }
}

/// The bases of `config` and of the environments directory, as `doctor --json` reports them:
/// `[{ id, installed, bytes, packages, python, environments }]` (`bytes` and `packages`, a
/// count, are null when it is not installed).
pub fn bases_json(config: &Config, envs: &Environments) -> serde_json::Value {
    let bases = envs.bases();
    let mut ids: Vec<String> = config.environments.values().filter_map(sandbox_engine::base::base_of).collect();
    ids.extend(bases.list().into_iter().map(|b| b.id));
    ids.sort();
    ids.dedup();
    ids.into_iter()
        .map(|id| {
            let users: Vec<&str> =
                config.environments.iter().filter(|(_, e)| sandbox_engine::base::base_of(e).as_deref() == Some(id.as_str())).map(|(n, _)| n.as_str()).collect();
            let m = bases.installed(&id).and_then(|_| bases.manifest(&id).ok());
            serde_json::json!({
                "id": id, "installed": m.is_some(), "bytes": m.as_ref().map(|m| m.bytes),
                "packages": m.as_ref().map(|m| m.packages.len()), "python": m.and_then(|m| m.python_version), "environments": users,
            })
        })
        .collect()
}

/// The bases table of `env list` and `doctor`: each base declared or present, installed or
/// not, its size, package count and Python, and the environments that use it.
pub fn print_bases(config: &Config, envs: &Environments) {
    let bases = envs.bases();
    let base_of = |e: &sandbox_core::profile::Environment| sandbox_engine::base::base_of(e).map(|id| bases.resolve(&id));
    let mut ids: Vec<String> = config.environments.values().filter_map(base_of).collect();
    ids.extend(bases.list().into_iter().map(|b| b.id));
    ids.sort();
    ids.dedup();
    if ids.is_empty() {
        return;
    }
    let mut t = crate::table::new(&["BASE", "STATE", "SIZE", "PACKAGES", "PYTHON", "ENVIRONMENTS"]);
    for id in ids {
        let users: Vec<&str> = config.environments.iter().filter(|(_, e)| base_of(e).as_deref() == Some(id.as_str())).map(|(n, _)| n.as_str()).collect();
        let (state, size, packages, python) = match bases.installed(&id).and_then(|_| bases.manifest(&id).ok()) {
            Some(m) => {
                // An image's layers stand for its packages.
                let packages = m.oci.as_ref().map_or_else(|| m.packages.len().to_string(), |o| format!("{} layers", o.layers.len()));
                ("installed", format!("{}MiB", m.bytes >> 20), packages, m.python_version.unwrap_or_else(|| "-".into()))
            }
            None => ("not installed", "-".into(), "-".into(), "-".into()),
        };
        let used = if users.is_empty() { "- (unused: `sandbox env gc` removes it)".to_owned() } else { users.join(", ") };
        t.add_row(vec![id, state.to_owned(), size, packages, python, used]);
    }
    crate::table::print(t);
}

/// Runs `sandbox env COMMAND`.
pub fn run(config: Config, data_dir: &Path, command: EnvCommand) -> anyhow::Result<ExitCode> {
    let envs = Environments::for_runtime(&config.runtime, data_dir);
    match command {
        EnvCommand::List => {
            let mut t = crate::table::new(&["NAME", "STATE", "SIZE", "SPEC", "BASE", "PROFILES"]);
            let mut stale = Vec::new();
            for (name, env) in &config.environments {
                let st = envs.status(name, env, &config.runtime);
                let (state, size) = match &st.current {
                    Some((_, m)) => ("installed", format!("{}MiB", m.bytes >> 20)),
                    None => ("not installed", "-".into()),
                };
                let users: Vec<&str> = config.profiles.iter().filter(|(_, p)| p.environment.as_deref() == Some(name)).map(|(n, _)| n.as_str()).collect();
                let base = sandbox_engine::base::base_of(env).map_or_else(|| "host".into(), |id| envs.bases().resolve(&id));
                t.add_row(vec![name.clone(), state.to_owned(), size, Environments::spec_hash(env, &config.runtime), base, users.join(", ")]);
                stale.extend(st.stale.into_iter().map(|s| (name.clone(), s)));
            }
            crate::table::print(t);
            print_bases(&config, &envs);
            for (name, s) in stale {
                outln!("stale: {} (an older spec of {name}; `{} env remove {name}` removes every version)", s.display(), crate::command());
            }
            outln!("(installed under {})", envs.dir().display());
            Ok(ExitCode::SUCCESS)
        }
        EnvCommand::Install { name } => {
            install(&config, data_dir, &name)?;
            Ok(ExitCode::SUCCESS)
        }
        EnvCommand::Lock { name, dir } => {
            let env = declared(&config, &name)?;
            // An environment on a base is locked for the base's interpreter: the base is built first.
            let base = envs.install_base(env, &config.runtime, &mut |line| errln!("{line}"))?;
            let locks = Environments::lock(&name, env, &config.runtime, base.as_ref(), &mut |line| errln!("{line}"))?;
            std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
            for (text, file, key) in
                [(&locks.python, format!("{name}.python-lock.txt"), "python_lock"), (&locks.npm, format!("{name}.package-lock.json"), "npm_lock")]
            {
                let Some(text) = text else { continue };
                let path = dir.join(&file);
                std::fs::write(&path, text.as_bytes()).with_context(|| format!("cannot write {}", path.display()))?;
                errln!("wrote {}", path.display());
                outln!("{key} = {:?}", path.display().to_string());
            }
            if locks == Default::default() {
                errln!("{name} pins no packages: nothing to lock");
            }
            Ok(ExitCode::SUCCESS)
        }
        EnvCommand::Gc => {
            let report = envs.gc(&config)?;
            for p in &report.removed {
                errln!("removed {}", p.display());
            }
            for p in &report.in_use {
                errln!("kept {} (a running execution uses it)", p.display());
            }
            if report.removed.is_empty() && report.in_use.is_empty() {
                errln!("nothing to remove");
            }
            Ok(ExitCode::SUCCESS)
        }
        EnvCommand::Remove { name } => {
            let base = sandbox_engine::base::base_of(declared(&config, &name)?);
            let removed = envs.remove(&name)?;
            if removed.is_empty() {
                errln!("{name} was not installed");
            }
            for p in removed {
                errln!("removed {}", p.display());
            }
            if let Some(id) = base.filter(|id| envs.bases().installed(id).is_some()) {
                // Other environments may share it; gc knows which are still named.
                errln!("its base {id} stays until `{} env gc` finds no environment naming it", crate::command());
            }
            Ok(ExitCode::SUCCESS)
        }
        EnvCommand::Verify { name } => verify(config, data_dir, &name),
    }
}

/// `env verify` exit code: the environment is not installed.
const VERIFY_NOT_INSTALLED: u8 = 3;
/// `env verify` exit code: its files changed after install.
const VERIFY_TAMPERED: u8 = 4;
/// `env verify` exit code: a package failed to import inside the sandbox.
const VERIFY_IMPORT_FAILED: u8 = 5;
/// `env verify` exit code: the sandbox could not run the check.
const VERIFY_NOT_RUN: u8 = 6;

/// Integrity first (nothing changed since install), then imports inside a sandbox, per language.
fn verify(config: Config, data_dir: &Path, name: &str) -> anyhow::Result<ExitCode> {
    let env = declared(&config, name)?.clone();
    let envs = Environments::for_runtime(&config.runtime, data_dir);
    if envs.installed(name, &env, &config.runtime).is_none() {
        errln!(
            "sandbox: error[environment_not_installed]: {name} is not installed in {}; install it with `{} env install {name}`",
            Environments::place(&config.runtime, data_dir),
            crate::command()
        );
        return Ok(ExitCode::from(VERIFY_NOT_INSTALLED));
    }
    let (path, manifest) = match envs.check_integrity(name, &env, &config.runtime) {
        Ok(v) => v,
        Err(e @ sandbox_engine::environment::EnvError::Tampered { .. }) => {
            errln!("sandbox: error: {e}");
            return Ok(ExitCode::from(VERIFY_TAMPERED));
        }
        Err(e) => return Err(e.into()),
    };
    errln!("files: {} files, {} bytes match the manifest ({})", manifest.files, manifest.bytes, path.display());
    // The base it was built on (an image's source link may name a newer image's by now).
    if let Some(base) = manifest.base.clone().or_else(|| sandbox_engine::base::base_of(&env).map(|id| envs.bases().resolve(&id))) {
        match envs.bases().check_integrity(&base) {
            Ok(m) => {
                let what = m.oci.as_ref().map_or_else(|| format!("{} packages", m.packages.len()), |o| format!("image {}", o.manifest_digest));
                errln!("base {base}: {} files, {} bytes match its manifest ({what})", m.files, m.bytes)
            }
            Err(e @ sandbox_engine::environment::EnvError::Tampered { .. }) => {
                errln!("sandbox: error: {e}");
                return Ok(ExitCode::from(VERIFY_TAMPERED));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let mut checks: Vec<(Language, String)> = Vec::new();
    if !env.python_imports.is_empty() {
        let modules = serde_json::to_string(&env.python_imports)?;
        checks.push((
            Language::Python,
            format!(
                "import importlib, importlib.metadata as md\nfor m in {modules}:\n    mod = importlib.import_module(m)\n    \
                 print(m, getattr(mod, '__version__', ''))\n"
            ),
        ));
    }
    if !manifest.npm_installed.is_empty() {
        let names: Vec<String> = env.npm.iter().filter_map(|p| sandbox_core::profile::split_npm_pin(p).map(|(n, _)| n.to_owned())).collect();
        let names = serde_json::to_string(&names)?;
        checks.push((
            Language::Typescript,
            format!("for (const p of {names}) {{ const m = await import(p); console.log(p, Object.keys(m).length, 'exports'); }}\n"),
        ));
    }
    let mut config = config;
    for (language, _) in &checks {
        let profile = step_profile(name, *language, format!("verifies environment {name}"));
        config.profiles.insert(format!("env-verify-{}", language.as_str()), profile);
    }
    let (engine, _audit) = crate::audit::engine(config, data_dir.to_owned())?;
    let engine = std::sync::Arc::new(engine);
    // A SIGINT or SIGTERM ends the check's sandbox (torn down, recorded), then the command by
    // that signal ([`crate::interrupt`]).
    crate::interrupt::arm();
    let running = crate::interrupt::running(&engine);
    let service = std::sync::Arc::new(sandbox_engine::Service::new(engine, 1, 0, std::sync::Arc::new(sandbox_engine::NoHooks)));
    let caller = sandbox_engine::Caller::local("cli:env-verify");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // The worst failure decides the exit code: the sandbox not running the check at all, then
    // an import that failed.
    let mut exit = 0;
    for (language, code) in checks {
        if running.is_err() || crate::interrupt::interrupted().is_some() {
            break;
        }
        let request = ExecutionRequest { profile: format!("env-verify-{}", language.as_str()), code, ..Default::default() };
        let profile = request.profile.clone();
        let r = match service.submit(&caller, request) {
            Ok(ticket) => rt.block_on(ticket.run(None)),
            Err(refusal) => refusal.into_result(&profile),
        };
        out!("{}", r.stdout);
        if r.status != Status::Ok {
            exit = exit.max(if r.status == Status::Error { VERIFY_IMPORT_FAILED } else { VERIFY_NOT_RUN });
            errln!("{}: {} in the sandbox: {}", language.as_str(), r.status.as_str(), r.stderr.trim_end());
            if let Some(e) = &r.error {
                errln!("  {}: {}", e.kind, e.message);
            }
        } else {
            errln!("{}: every package imports inside the sandbox ({} ms)", language.as_str(), r.timing.run_ms);
        }
    }
    drop(running);
    crate::interrupt::exit_if_interrupted(None, "the check's sandbox was ended and removed");
    Ok(ExitCode::from(exit))
}
