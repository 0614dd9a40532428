//! The execution service and lifecycle (DESIGN.md steps 1-7). Every front door submits through
//! [`Service`] (authorization, admission, availability, refusal auditing, slots and queue,
//! metrics hooks); a [`Ticket`] then runs prepare → spawn → supervise → collect → clean up here.
//! Step 6 (record) is the [`Recorder`] seam the audit log plugs into.
//!
//! One [`Engine`] serves many concurrent executions; each gets its own workspace tmpfs, cgroup
//! and helper process. Dropping an execution's future (a client that went away) still tears
//! everything down: the per-execution state cleans up in `Drop`.

pub mod base;
mod bytecode;
mod collect;
mod command;
pub mod environment;
pub mod pool;
mod prepare;
pub mod service;
mod spare;
mod supervise;
pub mod typescript;
pub mod warm;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use sandbox_core::wire::{Enforcement, ExecError, WarmStart};
use sandbox_core::{Admitted, Config, ErrorCode, ExecutionRequest, ExecutionResult, Language, Status};
use sandbox_runtime::probe::HostReport;
use tokio::sync::mpsc;

pub use command::program_command;
pub use service::{Caller, Hooks, NoHooks, Refusal, Service, Ticket};
pub use spare::EarlySpare;
pub use supervise::{Chunk, StreamKind};

/// Where the engine keeps state and how it reaches the helper.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Profiles and runtime settings.
    pub config: Config,
    /// State directory; executions live in `<data_dir>/executions/<id>` while they run.
    /// Every ancestor must be searchable by others (mode o+x): the container's init, an
    /// unprivileged host uid, walks it to mount the workspace.
    pub data_dir: PathBuf,
    /// The `sandbox` binary, re-executed as the helper (normally `std::env::current_exe()`).
    pub helper: PathBuf,
    /// Parent cgroup of the executions, below each hierarchy's root. [`Engine::new`] replaces
    /// it with the placement it resolves ([`sandbox_runtime::cgroup::place`]: `[runtime]
    /// cgroup_parent`, else `sandbox` under the service's own cgroup on v2, `sandbox` on v1).
    pub cgroup_parent: String,
    /// How a person runs this binary on the same configuration and data directory, e.g.
    /// `sandbox --data-dir /tmp/d`: the commands that messages suggest as a fix start with it,
    /// so that each works as written. Empty: `sandbox`.
    pub command: String,
    /// Environments under construction, by name: a run whose profile names one binds this
    /// directory (an install's build directory) instead of the installed one. Set only by the
    /// engine that runs an install's sandboxed steps ([`environment::BuildSandbox`]); empty
    /// otherwise.
    pub environment_builds: std::collections::BTreeMap<String, PathBuf>,
}

impl EngineOptions {
    /// The command a message suggests: [`EngineOptions::command`] followed by `args`.
    pub fn suggest(&self, args: &str) -> String {
        let command = if self.command.is_empty() { "sandbox" } else { self.command.as_str() };
        format!("{command} {args}")
    }

    /// Where the environments of this configuration and data directory are looked up, in words
    /// for a message ([`environment::Environments::place`]).
    pub fn environments_place(&self) -> String {
        environment::Environments::place(&self.config.runtime, &self.data_dir)
    }

    /// The directory bound as environment `name`: its build while one is under construction
    /// ([`EngineOptions::environment_builds`]), else its installed current spec, if any.
    pub fn environment_dir(&self, name: &str) -> Option<PathBuf> {
        if let Some(build) = self.environment_builds.get(name) {
            return Some(build.clone());
        }
        environment::Environments::for_runtime(&self.config.runtime, &self.data_dir).installed_in(&self.config, name)
    }
}

pub use sandbox_core::record::{BeginError, NoRecorder, Quota, Recorder};

/// Why a profile cannot run here: [`ErrorCode::RuntimeUnavailable`] or
/// [`ErrorCode::EnvironmentNotInstalled`], and the reason with its fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Unavailable {
    /// Stable code.
    pub code: ErrorCode,
    /// What is missing and how to fix it.
    pub reason: String,
}

/// How [`Engine::enable_warm_for`] starts a profile warm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarmFor {
    /// The language's own way, at the execution's start: a Python profile forks from a
    /// template, a TypeScript one takes a pooled sandbox.
    Fork,
    /// A Python profile takes a child forked from its template before the execution (a pool of
    /// one); a TypeScript one a pooled sandbox.
    Prefork,
    /// A pooled sandbox with its own interpreter, for either language.
    Pool,
}

/// The execution engine.
pub struct Engine {
    /// Shared with the blocking threads that prepare executions.
    opts: Arc<EngineOptions>,
    host: HostReport,
    recorder: Arc<dyn Recorder>,
    /// Set by [`Engine::abort_all`]: running executions end as `internal_error`.
    abort: tokio::sync::watch::Sender<bool>,
    /// Warm templates, once [`Engine::enable_warm`] started them.
    templates: std::sync::OnceLock<Arc<warm::Templates>>,
    /// Warm pools, once [`Engine::enable_warm`] started them.
    pools: std::sync::OnceLock<Arc<pool::Pools>>,
    /// The last self-test's verdict and when it ran ([`Engine::readiness`]).
    readiness: std::sync::Mutex<Option<(Instant, Result<(), String>)>>,
    /// A helper started ahead for the next cold start ([`Engine::with_spare`],
    /// [`Engine::keep_spare_helper`]).
    spare: spare::Spare,
    /// Executions whose sandbox teardown failed, since start ([`Engine::teardown_failures`]).
    teardown_failures: Arc<std::sync::atomic::AtomicU64>,
    /// Executions of profiles kept warm that started cold, since start
    /// ([`Engine::warm_cold_fallbacks`]).
    warm_cold_fallbacks: std::sync::atomic::AtomicU64,
}

/// How long a self-test's verdict stands for [`Engine::readiness`].
const READINESS_TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// What [`Engine::new`] learns of the host before the engine exists: the host checks and, on
/// cgroup v2, where execution cgroups go. Made apart from the engine ([`HostProbe::run`],
/// [`Engine::probed`]) so that `sandbox run` probes while its audit log opens on another thread:
/// both are on its critical path (~0.6 and ~0.7 ms on this machine kind).
pub struct HostProbe {
    host: HostReport,
    /// The parent of execution cgroups [`sandbox_runtime::cgroup::place`] chose, if it succeeded.
    cgroup_parent: Option<String>,
}

impl HostProbe {
    /// Probes the host ([`sandbox_runtime::probe::probe`]) and, with a cgroup hierarchy, places
    /// the execution cgroups ([`sandbox_runtime::cgroup::place`], after `[runtime]
    /// cgroup_parent` of `config`): on cgroup v2 the service's processes may move into a leaf
    /// of its own cgroup; a failure is the failing host check `cgroup_placement`. Never fails.
    /// Blocks (reads of /proc and /sys, a few probing system calls).
    pub fn run(config: &Config) -> Self {
        let mut host = sandbox_runtime::probe::probe();
        let mut cgroup_parent = None;
        if let Some(layout) = &host.cgroup {
            let self_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
            let check = match sandbox_runtime::cgroup::place(layout, config.runtime.cgroup_parent.as_deref(), &self_cgroup) {
                Ok(p) => {
                    tracing::debug!(parent = %p.parent, "execution cgroups placed");
                    cgroup_parent = Some(p.parent);
                    sandbox_runtime::probe::Check { name: "cgroup_placement", ok: true, detail: p.detail }
                }
                Err(e) => sandbox_runtime::probe::Check { name: "cgroup_placement", ok: false, detail: sandbox_runtime::selftest::chain(&e) },
            };
            host.checks.push(check);
        }
        Self { host, cgroup_parent }
    }
}

impl Engine {
    /// Probes the host once ([`HostProbe::run`]) and keeps the options. Never fails: a host that
    /// lacks a feature makes each execution fail with `runtime_unavailable` and the reason.
    /// On cgroup v2 this also places the service (see [`EngineOptions::cgroup_parent`]): its
    /// processes may move into a leaf of its own cgroup; a failure is the failing host check
    /// `cgroup_placement`.
    pub fn new(opts: EngineOptions, recorder: Arc<dyn Recorder>) -> Self {
        let probe = HostProbe::run(&opts.config);
        Self::probed(opts, recorder, probe)
    }

    /// [`Engine::new`] with the host already probed, by [`HostProbe::run`] on the same
    /// configuration.
    pub fn probed(mut opts: EngineOptions, recorder: Arc<dyn Recorder>, probe: HostProbe) -> Self {
        let HostProbe { host, cgroup_parent } = probe;
        if let Some(parent) = cgroup_parent {
            opts.cgroup_parent = parent;
        }
        let spare = spare::Spare::new(opts.helper.clone());
        Self {
            opts: Arc::new(opts),
            host,
            recorder,
            abort: tokio::sync::watch::channel(false).0,
            templates: std::sync::OnceLock::new(),
            pools: std::sync::OnceLock::new(),
            readiness: std::sync::Mutex::new(None),
            teardown_failures: Arc::default(),
            warm_cold_fallbacks: std::sync::atomic::AtomicU64::new(0),
            spare,
        }
    }

    /// Takes `early` as the helper for the next cold start (`sandbox run`, which started it
    /// before this engine existed). Where it runs another binary than
    /// [`EngineOptions::helper`], or the host cannot run executions (a failing check), it is
    /// dropped, killing its helper, and the cold start starts its own.
    #[must_use]
    pub fn with_spare(mut self, early: EarlySpare) -> Self {
        if early.helper() == self.opts.helper && self.host.first_failure().is_none() {
            // The replaced slot never started one.
            self.spare = early.into_inner();
        }
        self
    }

    /// Keeps one helper started for the next cold start from now on (`serve`, `mcp`): a thread
    /// of its own starts another after each is taken. Until [`Engine::stop_warm`].
    pub fn keep_spare_helper(&self) {
        if self.host.first_failure().is_none() {
            self.spare.keep(None);
        }
    }

    /// Runs the readiness self-test now ([`sandbox_runtime::selftest`]): a cgroup with limits
    /// under the execution parent, the namespaces, a fresh /proc, landlock and seccomp as an
    /// execution gets them, and `/dev/net/tun` when a profile has an allowlist network. Blocks
    /// (tens of ms; a process is started): call it off the async threads.
    pub fn self_test(&self) -> Vec<sandbox_runtime::selftest::Step> {
        let tun = self.opts.config.profiles.values().any(|p| !matches!(p.network, sandbox_core::network::Network::None));
        sandbox_runtime::selftest::run(&self.opts.helper, self.host.cgroup.as_ref(), &self.opts.cgroup_parent, self.opts.config.runtime.uid_base, tun)
    }

    /// Whether this node can run executions: every host check passes and the self-test does
    /// (re-run when the last verdict is older than 30 s). Blocks like [`Engine::self_test`].
    /// Errors: the failing check or self-test step, named ("self-test step seccomp: ...").
    pub fn readiness(&self) -> Result<(), String> {
        if let Some(why) = self.host.first_failure() {
            return Err(why);
        }
        let mut last = self.readiness.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, verdict)) = last.as_ref() {
            if at.elapsed() < READINESS_TTL {
                return verdict.clone();
            }
        }
        let steps = self.self_test();
        let verdict = sandbox_runtime::selftest::first_failure(&steps).map_or(Ok(()), Err);
        if let Err(why) = &verdict {
            tracing::warn!(reason = %why, "readiness self-test failed: not ready");
        }
        *last = Some((Instant::now(), verdict.clone()));
        verdict
    }

    /// Starts, in the background, warm starts for every profile that can run on this host: a
    /// template for each with `[warm] mode = "template"`, a pool of pre-started sandboxes for
    /// each with `mode = "pool"`. Until one is ready (and whenever it is not), that profile's
    /// executions start cold. For long-running services (`serve`, `mcp`) and `sandbox run
    /// --warm`. Returns whether any profile is warm.
    /// Errors: warm starts are configured but cannot work here (the warm-start library is not
    /// built, no cgroup layout); executions then all run cold.
    pub fn enable_warm(&self) -> Result<bool, String> {
        self.start_warm(EngineOptions::clone(&self.opts))
    }

    /// Like [`Engine::enable_warm`], for `profile` alone, started as `how` says (`sandbox run
    /// --warm`, and the tests that run the attack suite warm); the pool that `how` uses holds
    /// one sandbox. An allowlist profile, which no template serves, takes a pooled sandbox
    /// whatever `how` says. Returns false when `profile` is not configured.
    /// Errors: as [`Engine::enable_warm`].
    pub fn enable_warm_for(&self, profile: &str, how: WarmFor) -> Result<bool, String> {
        use sandbox_core::profile::WarmMode;
        let mut opts = EngineOptions::clone(&self.opts);
        for (name, p) in &mut opts.config.profiles {
            let python = p.language == Language::Python && matches!(p.network, sandbox_core::network::Network::None);
            (p.warm.mode, p.warm.pool_size) = match how {
                _ if name != profile => (WarmMode::Off, 0),
                WarmFor::Fork if python => (WarmMode::Template, 0),
                WarmFor::Prefork if python => (WarmMode::Template, 1),
                WarmFor::Fork | WarmFor::Prefork | WarmFor::Pool => (WarmMode::Pool, 1),
            };
        }
        if opts.config.profiles.values().all(|p| p.warm.mode == WarmMode::Off) {
            return Ok(false);
        }
        self.start_warm(opts)
    }

    /// Blocks until `profile`'s template and pool are ready, or `patience` passes (`sandbox run
    /// --warm`, `doctor`, tests). Returns whether they are; `Ok(false)` for a profile that is not warm.
    /// Errors: its last template or pooled-sandbox start failed (the reason).
    pub fn wait_warm(&self, profile: &str, patience: std::time::Duration) -> Result<bool, String> {
        let until = std::time::Instant::now() + patience;
        let template = self.templates.get().filter(|t| t.serves(profile));
        if let Some(t) = template {
            if !t.wait_ready(profile, patience)? {
                return Ok(false);
            }
        }
        match self.pools.get().filter(|p| p.serves(profile)) {
            Some(p) => p.wait_ready(profile, until.saturating_duration_since(std::time::Instant::now())),
            None => Ok(template.is_some()),
        }
    }

    fn start_warm(&self, opts: EngineOptions) -> Result<bool, String> {
        if self.templates.get().is_some() || self.pools.get().is_some() {
            return Ok(true);
        }
        let templates = warm::Templates::new(opts.clone(), self.host.cgroup.clone())?;
        if let Some(t) = &templates {
            t.start(|profile| self.availability(profile).is_ok());
            let _ = self.templates.set(t.clone());
        }
        let pools = pool::Pools::start(opts, self.host.cgroup.clone(), templates.clone(), |profile| self.availability(profile).is_ok())?;
        let any_pool = pools.is_some();
        if let Some(p) = pools {
            let _ = self.pools.set(p);
        }
        Ok(templates.is_some() || any_pool)
    }

    /// The warm templates, if [`Engine::enable_warm`] started them (for `doctor`, `/metrics`
    /// and waiting until one is ready).
    pub fn templates(&self) -> Option<&Arc<warm::Templates>> {
        self.templates.get()
    }

    /// The warm pools, if [`Engine::enable_warm`] started any (for `doctor` and `/metrics`).
    pub fn pools(&self) -> Option<&Arc<pool::Pools>> {
        self.pools.get()
    }

    /// Stops every warm template and pool and the spare helper (after the service drained):
    /// nothing of them is left.
    pub fn stop_warm(&self) {
        self.spare.stop();
        if let Some(p) = self.pools.get() {
            p.shutdown();
        }
        if let Some(t) = self.templates.get() {
            t.shutdown();
        }
    }

    /// Ends every running execution now (service shutdown past its grace period, `sandbox run`
    /// interrupted): each is killed, torn down, and reported as `internal_error` saying so.
    /// Executions started afterwards end the same way at once.
    pub fn abort_all(&self) {
        self.abort.send_replace(true);
    }

    /// Executions whose sandbox could not be torn down (an unmount or a cgroup removal refused
    /// after its retries), since this engine started; `/metrics` exports it as
    /// `sandbox_teardown_failures`. Each is in the service's log with its execution id; what
    /// it left is swept by [`Engine::recover`] at the next start.
    pub fn teardown_failures(&self) -> u64 {
        self.teardown_failures.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Executions of a profile this engine keeps warm (a template or a pool) that started cold
    /// all the same (nothing ready, a start that failed, a variable the interpreter reads only
    /// as it starts), since this engine started, each counted once; `/metrics` exports it as
    /// `sandbox_warm_cold_fallbacks`.
    pub fn warm_cold_fallbacks(&self) -> u64 {
        self.warm_cold_fallbacks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Counts how `run` of `a` started, for `/metrics`: a child its template forked for it is a
    /// template hit; a cold start of a profile kept warm here is a cold fallback.
    fn count_warm(&self, a: &Admitted, run: &supervise::RunOutcome) {
        use std::sync::atomic::Ordering::Relaxed;
        let templates = self.templates.get().filter(|t| t.serves(&a.profile_name));
        if let (Some(t), Some(WarmStart::Template)) = (templates, run.warm_start) {
            t.counters.hits.fetch_add(1, Relaxed);
        }
        let kept_warm = templates.is_some() || self.pools.get().is_some_and(|p| p.serves(&a.profile_name));
        if kept_warm && run.started_cold {
            self.warm_cold_fallbacks.fetch_add(1, Relaxed);
        }
    }

    /// Sweeps what executions of a dead service left on the host (cgroups, workspace mounts,
    /// directories); executions of live processes are untouched. Returns the ids swept. Call it
    /// at start, next to the audit log's recovery.
    pub fn recover(&self) -> Vec<String> {
        prepare::sweep(&self.opts, self.host.cgroup.as_ref())
    }

    /// Removes the cgroups of readiness self-tests whose process died before removing them (a
    /// `doctor` or service killed mid-test): `selftest-<pid>-<n>` under the cgroup parent, of
    /// any data directory. Apart from [`Engine::recover`] to keep a cold `sandbox run`'s start
    /// from reading the cgroup parents; the commands that run self-tests call it.
    pub fn recover_self_tests(&self) {
        if let Some(layout) = self.host.cgroup.as_ref() {
            prepare::sweep_selftests(layout, &self.opts.cgroup_parent);
        }
    }

    /// What the host offers (for `sandbox doctor`).
    pub fn host(&self) -> &HostReport {
        &self.host
    }

    /// The audit recorder (the [`Service`] records refusals through it).
    pub fn recorder(&self) -> &dyn Recorder {
        self.recorder.as_ref()
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.opts.config
    }

    /// Whether `profile` can run on this host: the one place that decides, for every door,
    /// `doctor`, `/readyz`, `/v1/profiles` and the warm templates.
    /// Errors: [`Unavailable`] with [`ErrorCode::RuntimeUnavailable`] (a failed host check, an
    /// unmet landlock minimum, a missing runtime binary, mount or tun driver, a directory the
    /// sandbox cannot reach) or [`ErrorCode::EnvironmentNotInstalled`] (naming the install
    /// command); [`ErrorCode::ProfileNotFound`] for a name that is not configured.
    pub fn availability(&self, profile: &str) -> Result<(), Unavailable> {
        let runtime = |reason: String| Unavailable { code: ErrorCode::RuntimeUnavailable, reason };
        if let Some(f) = self.host.first_failure() {
            return Err(runtime(f));
        }
        let Some(p) = self.opts.config.profiles.get(profile) else {
            return Err(Unavailable { code: ErrorCode::ProfileNotFound, reason: format!("no profile named {profile:?}") });
        };
        if let Some(why) = self.data_dir_unreachable() {
            return Err(runtime(why));
        }
        if let Some(why) = landlock_unmet(&self.host, profile, p) {
            return Err(runtime(why));
        }
        for m in &p.filesystem.mounts {
            if !m.host.is_dir() {
                return Err(runtime(format!(
                    "profile {profile:?} mounts host directory {}, which does not exist, at {}",
                    m.host.display(),
                    m.sandbox.display()
                )));
            }
        }
        if matches!(p.network, sandbox_core::network::Network::Allowlist(_)) && !std::path::Path::new("/dev/net/tun").exists() {
            return Err(runtime(format!("profile {profile:?} has a network allowlist, which needs the tun driver (/dev/net/tun: modprobe tun)")));
        }
        let on_base = p.environment.as_ref().and_then(|e| self.opts.config.environments.get(e)).and_then(base::base_of).is_some();
        let bin = match p.language {
            Language::Python => self.opts.config.runtime.python.clone(),
            Language::Typescript => self.opts.config.runtime.node_binary(p.node.as_deref()),
        };
        // A base's interpreter is checked with the base (installed with the environment).
        if !on_base && !bin.is_file() {
            let hint = match (p.language, &p.node) {
                (Language::Python, _) => "install python3 or set [runtime] python".to_owned(),
                (Language::Typescript, None) => "scripts/install-node.sh installs it, or set [runtime] node".to_owned(),
                (Language::Typescript, Some(line)) => {
                    format!("`bash scripts/install-node.sh {line}` installs the release of that line pinned there, from the npm registry")
                }
            };
            return Err(runtime(format!("{} runtime {} not found ({hint})", p.language.as_str(), bin.display())));
        }
        let Some(name) = p.environment.as_ref() else { return Ok(()) };
        let envs = environment::Environments::for_runtime(&self.opts.config.runtime, &self.opts.data_dir);
        match self.opts.environment_dir(name) {
            Some(_) => match envs.unsearchable_ancestor() {
                None => Ok(()),
                Some(a) => Err(runtime(format!(
                    "environment {name:?} is installed under {}, which is not searchable by others (mode o+x on every \
                     ancestor is needed for the sandbox to mount it)",
                    a.display()
                ))),
            },
            None => Err(Unavailable {
                code: ErrorCode::EnvironmentNotInstalled,
                reason: format!(
                    "profile {profile:?} runs in environment {name:?}, which is not installed in {}; install it with `{}` \
                     (or add --install to `sandbox run`)",
                    self.opts.environments_place(),
                    self.opts.suggest(&format!("env install {name}"))
                ),
            }),
        }
    }

    /// Why no sandbox can use the data directory, if none can: an ancestor (or the directory
    /// itself, e.g. one made by `mktemp -d`, mode 0700) that others may not search. The
    /// container's init, an unprivileged host uid, passes through it to mount the workspace.
    pub fn data_dir_unreachable(&self) -> Option<String> {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = &self.opts.data_dir;
        let (blocked, mode) = dir.ancestors().find_map(|a| {
            let mode = std::fs::metadata(a).ok()?.permissions().mode() & 0o7777;
            (mode & 0o001 == 0).then_some((a, mode))
        })?;
        Some(format!(
            "the data directory {} cannot hold sandboxes: {} (mode {mode:o}) is not searchable by others, and the \
             sandbox's unprivileged init must pass through it; fix: `chmod o+x {}`, or choose a --data-dir whose \
             every ancestor has mode o+x",
            dir.display(),
            blocked.display(),
            blocked.display()
        ))
    }

    /// Runs one admitted request to its end (only [`service::Ticket::run`] calls it): the audit
    /// record's `begin` (with `quota`, the caller's limit of running executions), the
    /// lifecycle, and its `finish` with the final result; `queue_ms` is the time it waited for
    /// a slot. A `begin` that is refused gives a `rejected` result without running:
    /// `concurrency_limited` (recorded as a `rejected` event) or `audit_unavailable` (nothing can
    /// be recorded, so nothing runs). Never panics on what the caller sent. The audit writes (an
    /// fsync, or a PostgreSQL round trip) run on blocking threads.
    ///
    /// An execution without a quota starts its sandbox while the `begin` is written (a cold
    /// one is built, a template forks its child, a pooled sandbox or a child forked ahead is
    /// taken): its program waits in the sandbox for the go that follows a durable `begin` (so
    /// nothing of the caller's runs unrecorded), and a refused `begin` ends it before it
    /// started, with no fallback started after it (a refusal then costs that sandbox: a pooled
    /// one or a child forked ahead is used up). With a quota the `begin` comes first, so that
    /// the refusals a caller can cause (`concurrency_limited`) cost no sandbox.
    #[expect(clippy::too_many_arguments, reason = "one execution's parts, passed once by its ticket")]
    pub(crate) async fn execute_admitted(
        &self,
        id: &str,
        caller: &str,
        quota: Option<sandbox_core::record::Quota>,
        request: Arc<ExecutionRequest>,
        admitted: Admitted,
        queue_ms: u64,
        output: Option<mpsc::UnboundedSender<Chunk>>,
    ) -> ExecutionResult {
        let started = Instant::now();
        let overlap = quota.is_none();
        let language = admitted.language;
        let (on_record, recorded) = tokio::sync::watch::channel(None);
        // Until its finish is written, a dropped future abandons the execution (its lease then
        // expires and it is marked interrupted): the `Begun` the task returns says so when
        // dropped, also when this future is gone before the task ends.
        let begin = {
            let (recorder, id, caller, request) = (self.recorder.clone(), id.to_owned(), caller.to_owned(), request.clone());
            tokio::task::spawn_blocking(move || {
                let r = recorder.begin(&id, &caller, &request, quota.as_ref()).map(|()| Begun { recorder: recorder.clone(), id, finished: false });
                on_record.send_replace(Some(r.is_ok()));
                r
            })
        };
        let join = |joined: Result<_, tokio::task::JoinError>| match joined {
            Ok(r) => r,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        let ran = if overlap {
            let (result, teardown) = self.run_admitted(id, admitted, started, output, Some(recorded)).await;
            match join(begin.await) {
                Ok(b) => Ok((b, result, teardown)),
                Err(e) => Err((e, teardown)),
            }
        } else {
            match join(begin.await) {
                Ok(b) => {
                    let (result, teardown) = self.run_admitted(id, admitted, started, output, None).await;
                    Ok((b, result, teardown))
                }
                Err(e) => Err((e, None)),
            }
        };
        let (mut begun, mut result, teardown) = match ran {
            Ok(ran) => ran,
            // Refused: nothing ran (an overlapped sandbox ended at its go, and is torn down).
            Err((e, teardown)) => {
                if let Some(teardown) = teardown {
                    teardown.wait(id, &self.teardown_failures).await;
                }
                let mut result = self.refused_at_begin(id, caller, &request, language, e).await;
                result.timing.queue_ms = queue_ms;
                result.duration_ms = queue_ms.saturating_add(ms(started.elapsed()));
                return result;
            }
        };
        result.timing.queue_ms = queue_ms;
        result.duration_ms = queue_ms.saturating_add(ms(started.elapsed()));
        let (recorder, who) = (self.recorder.clone(), caller.to_owned());
        // A local log's append takes milliseconds: `sandbox run` waits for it on its own thread.
        let finish = off_worker_unless_alone(self.recorder.local(), move || {
            let r = recorder.finish(&who, &result);
            (result, r)
        });
        // The deferred refills go when this returns, with the result complete.
        let ((mut result, finished), _refills) = tokio::join!(finish, async {
            match teardown {
                Some(teardown) => teardown.wait(id, &self.teardown_failures).await,
                None => Vec::new(),
            }
        });
        begun.finished = true;
        if let Err(e) = finished {
            tracing::error!(error = %e.chain(), "audit record could not be completed");
            result = internal(id, &request, e.chain());
            result.timing.queue_ms = queue_ms;
            result.duration_ms = queue_ms.saturating_add(ms(started.elapsed()));
        }
        result
    }

    /// The `rejected` result of an execution whose `begin` was refused: `concurrency_limited`
    /// (recorded as a `rejected` event under `id`) or `audit_unavailable` (not recordable).
    async fn refused_at_begin(
        &self,
        id: &str,
        caller: &str,
        request: &Arc<ExecutionRequest>,
        admitted_language: Language,
        e: sandbox_core::record::BeginError,
    ) -> ExecutionResult {
        use sandbox_core::record::BeginError;
        let (code, message) = match &e {
            BeginError::ConcurrencyLimited { .. } => (ErrorCode::ConcurrencyLimited, e.to_string()),
            BeginError::Record(r) => {
                tracing::error!(error = %r.chain(), "the audit log cannot be written: refusing the execution");
                (ErrorCode::AuditUnavailable, "the audit log cannot be written, so nothing runs; retry later".to_owned())
            }
        };
        if code == ErrorCode::ConcurrencyLimited {
            let (recorder, id, caller, request, message) = (self.recorder.clone(), id.to_owned(), caller.to_owned(), request.clone(), message.clone());
            let written = off_worker(move || recorder.rejected(&id, &caller, Some(&request), code.as_str(), &message)).await;
            if let Err(e) = written {
                tracing::error!(error = %e.chain(), "could not record a refused request");
            }
        }
        tracing::info!(code = code.as_str(), "execution refused at begin");
        ExecutionResult {
            execution_id: id.to_owned(),
            status: Status::Rejected,
            profile: request.profile.clone(),
            language: Some(admitted_language),
            error: Some(ExecError::new(code.as_str(), message)),
            ..Default::default()
        }
    }

    async fn run_admitted(
        &self,
        id: &str,
        admitted: Admitted,
        received: Instant,
        output: Option<mpsc::UnboundedSender<Chunk>>,
        recorded: Option<supervise::Recorded>,
    ) -> (ExecutionResult, Option<Teardown>) {
        let mut result =
            ExecutionResult { execution_id: id.to_owned(), profile: admitted.profile_name.clone(), language: Some(admitted.language), ..Default::default() };
        let transpiled = match admitted.language {
            Language::Python => None,
            Language::Typescript => {
                let source = admitted.code.clone();
                // Parsing and code generation are CPU work: not on a worker thread.
                Some(off_worker(move || typescript::transpile_with_map(&source, "main.ts")).await)
            }
        };
        let code = match transpiled {
            None => admitted.code.clone(),
            Some(transpiled) => match transpiled {
                // The inline source map lets `node --enable-source-maps` report the caller's lines.
                Ok((js, Some(map))) => {
                    use base64::Engine as _;
                    format!("{js}\n//# sourceMappingURL=data:application/json;base64,{}\n", base64::engine::general_purpose::STANDARD.encode(map))
                }
                Ok((js, None)) => js,
                Err(e) => {
                    result.status = Status::Error;
                    result.stderr = e.to_string();
                    result.error = Some(ExecError {
                        kind: "SyntaxError".into(),
                        message: e.message().to_owned(),
                        field: Some("code".into()),
                        line: e.line(),
                        column: e.column(),
                        traceback: None,
                    });
                    return (result, None);
                }
            },
        };
        let layout = self.host.cgroup.clone().expect("host checks passed, so a cgroup layout exists");
        // A pooled sandbox when the profile has one ready, else a child of its template forked
        // now when it has one, else a cold sandbox. Directories, the workspace mount, input
        // files, cgroup writes, the fork and the child's set-up: on a blocking thread.
        let (prepared, member, mut admitted, code) = {
            let (opts, layout, id, pools, templates) =
                (self.opts.clone(), layout.clone(), id.to_owned(), self.pools.get().cloned(), self.templates.get().cloned());
            // Without pools or templates (`sandbox run`, cold), and with the harness's bytecode
            // known (else its compile may wait on an interpreter), nothing here waits on another
            // process: milliseconds, which `sandbox run`'s own thread spends without a hop.
            let compiles = || {
                admitted.language == Language::Python
                    && command::host_python(&opts.config, &admitted.profile).is_some_and(|python| !bytecode::ready(&opts.data_dir, &python))
            };
            let short = pools.is_none() && templates.is_none() && !compiles();
            off_worker_unless_alone(short, move || {
                if let Some((pools, mut m)) = pools.as_ref().and_then(|p| Some((p, p.checkout(&admitted)?))) {
                    match m.prepared_mut().fill_member(&opts, &admitted, &code) {
                        Ok(()) => {
                            let (p, launch) = m.into_parts();
                            return (Ok(prepare::DropOffWorker::new(p)), Some(launch), admitted, code);
                        }
                        // The member is destroyed; the execution starts cold.
                        Err(e) => {
                            tracing::warn!(error = %e, "a pooled sandbox could not take the execution; starting it cold");
                            pools.ended_unstarted(&admitted.profile_name);
                        }
                    }
                }
                if let Some(m) = templates.as_ref().and_then(|t| fork_for(t, &opts, &layout, &id, &admitted, &code)) {
                    let (p, launch) = m.into_parts();
                    return (Ok(prepare::DropOffWorker::new(p)), Some(launch), admitted, code);
                }
                // Dropped on this thread too if the execution was abandoned meanwhile.
                let p = prepare::Prepared::new(&opts, &layout, &id, &admitted, &code).map(prepare::DropOffWorker::new);
                (p, None, admitted, code)
            })
            .await
        };
        let mut prepared = match prepared {
            Ok(p) => p,
            Err(e) => return (prepare_failed(result, id, &e), None),
        };
        result.enforcement = Some(Enforcement { cgroup: cgroup_version(&layout), landlock_abi: 0, seccomp: true, network: admitted.profile.network.mode() });
        let member_how = member.as_ref().map(|m| m.how);
        let mut run =
            supervise::run(&self.opts, &self.spare, recorded.clone(), &mut prepared, &admitted, received, output.clone(), self.abort.subscribe(), member).await;
        // The pool member it took served it (else it ended unstarted: a miss, counted below).
        if let (Some(pools), Some(WarmStart::Pool | WarmStart::Prefork), false) = (self.pools.get(), member_how, run.start_cold) {
            pools.ran_in_member(&admitted.profile_name);
        }
        if run.start_cold {
            // The pooled sandbox or template's child ended before its go byte was read (killed,
            // or its template gone): nothing of the execution ran there. It is torn down and the
            // execution starts cold, in a sandbox of its own, as a warm profile does without a
            // template.
            if let (Some(pools), Some(WarmStart::Pool | WarmStart::Prefork)) = (self.pools.get(), member_how) {
                pools.ended_unstarted(&admitted.profile_name);
            }
            let member = prepared.into_inner();
            let (opts, layout, id2) = (self.opts.clone(), layout.clone(), id.to_owned());
            let (fresh, back) = off_worker(move || {
                let mut member = member;
                member.stop_everything();
                if let Err(e) = member.teardown() {
                    tracing::error!(error = %e, "tearing down a pooled sandbox that ended unstarted failed");
                }
                (prepare::Prepared::new(&opts, &layout, &id2, &admitted, &code).map(prepare::DropOffWorker::new), admitted)
            })
            .await;
            admitted = back;
            prepared = match fresh {
                Ok(p) => p,
                Err(e) => return (prepare_failed(result, id, &e), None),
            };
            run = supervise::run(&self.opts, &self.spare, recorded.clone(), &mut prepared, &admitted, received, output, self.abort.subscribe(), None).await;
        }
        // A refused `begin` or a shutdown started nothing: no start to count.
        if !supervise::refused(recorded.as_ref()) && !*self.abort.borrow() {
            self.count_warm(&admitted, &run);
        }
        let collect_start = Instant::now();
        // The cgroup kill loop, usage and reading output files: on a blocking thread, so a slow
        // file system stalls only this execution (on `sandbox run`'s own thread when init
        // reported the end: no kill loop then, only reads).
        let prepared = prepared.into_inner();
        let ending = run.ending.take();
        let unreported = ending.is_none();
        let (usage, files, prepared, admitted) = off_worker_unless_alone(!unreported, move || {
            // After init's `Exited` no process of the sandbox but init runs (it reaped them
            // all): the usage and the files are final, and are read while init ends. Else
            // whatever still runs is killed first.
            if unreported {
                prepared.stop_everything();
            }
            let usage = prepared.usage();
            let files = prepared.collect_files(&admitted);
            (usage, files, prepared, admitted)
        })
        .await;
        // The sandbox's end (init and the helper gone, anything left killed) and its teardown
        // (unmounts, rmdir retries) run beside the `finish` append, whose result they no longer
        // change: see [`Teardown`].
        let teardown = Teardown(tokio::task::spawn_blocking(move || {
            let mut prepared = prepared;
            let refills = std::mem::take(&mut prepared.refills);
            let helper = supervise::RunOutcome::finish_ending(ending, &prepared);
            let torn_down = prepared.teardown();
            if let Some(mut helper) = helper {
                helper.kill_and_wait();
            }
            (torn_down, refills)
        }));
        supervise::fill_result(&mut result, &admitted, run, usage);
        match files {
            Ok((files, skipped)) => {
                result.files = files;
                result.skipped_files = skipped;
            }
            Err(e) => {
                result.status = Status::InternalError;
                result.error = Some(internal_error(id, format!("collecting output files failed: {e}")));
            }
        }
        result.timing.collect_ms = ms(collect_start.elapsed());
        (result, Some(teardown))
    }
}

/// The end and teardown of an execution's sandbox, running on tokio's blocking pool while its
/// `finish` is appended ([`Engine::execute_admitted`] waits for both, so the execution's slot
/// is held until the sandbox is gone; the caller's quota lease, released by the `finish`, may
/// end first: a quota counts executions between their `begin` and `finish`). They start once
/// the usage and the output files are read: nothing they do changes the result. A teardown
/// that fails (an unmount or a cgroup removal refused after its retries) is the host's fault,
/// not the execution's: the service's log says so at error level with the execution's id,
/// [`Engine::teardown_failures`] counts it, what is left is swept at the service's next start
/// (`Engine::recover`), and the result and the audit record keep the program's outcome. Once
/// started it runs to its end even if the execution's future is dropped.
/// It hands back the sandbox's deferred refills (`Prepared::refills`): the caller drops them
/// once the result is complete, so that what replaces the pooled sandbox or the waiting helper
/// the execution took starts after the execution's `finish`, not beside it.
struct Teardown(tokio::task::JoinHandle<(Result<(), prepare::PrepareError>, Vec<prepare::Refill>)>);

impl Teardown {
    /// Waits for the teardown and returns the deferred refills, after a failed teardown too (a
    /// panic loses them, and dropping them there wakes their pool or spare at once). A failure,
    /// or a panic in it (which the execution's result, complete already, does not share), is
    /// logged for execution `id` and counted in `failures`.
    async fn wait(self, id: &str, failures: &std::sync::atomic::AtomicU64) -> Vec<prepare::Refill> {
        let (failed, refills) = match self.0.await {
            Ok((Ok(()), refills)) => return refills,
            Ok((Err(e), refills)) => (e.to_string(), refills),
            Err(e) => (format!("the teardown panicked: {e}"), Vec::new()),
        };
        failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::error!(execution_id = id, error = %failed, "tearing the sandbox down failed; the service's next start sweeps what is left");
        refills
    }
}

// A profile cannot demand an ABI the runtime does not know.
const _: () = assert!(sandbox_core::profile::LANDLOCK_ABI_MAX == sandbox_runtime::wall::ABI_NEWEST);

/// The landlock ABI every run enforces on `host`: the kernel's, capped at the newest the
/// runtime knows; 0 without landlock.
pub fn landlock_abi(host: &HostReport) -> u32 {
    host.landlock_abi.min(sandbox_runtime::wall::ABI_NEWEST)
}

/// Why profile `name` (`p`) cannot run on `host` for landlock: the kernel offers less than its
/// `landlock_min_abi`; `None` when the minimum is met.
pub fn landlock_unmet(host: &HostReport, name: &str, p: &sandbox_core::Profile) -> Option<String> {
    let found = landlock_abi(host);
    (found < p.landlock_min_abi)
        .then(|| format!("landlock: this kernel offers ABI {found}, profile {name:?} needs ABI {} (landlock_min_abi)", p.landlock_min_abi))
}

/// An execution whose `begin` was recorded; dropped before its `finish` was written (the future
/// was dropped), it tells the recorder the execution was abandoned.
struct Begun {
    recorder: Arc<dyn Recorder>,
    id: String,
    finished: bool,
}

impl Drop for Begun {
    fn drop(&mut self) {
        if !self.finished {
            self.recorder.abandoned(&self.id);
        }
    }
}

/// `result` as an `internal_error` whose message names `e` and its causes: preparing execution
/// `id`'s sandbox failed.
fn prepare_failed(mut result: ExecutionResult, id: &str, e: &(dyn std::error::Error + 'static)) -> ExecutionResult {
    tracing::error!(error = %e, "prepare failed");
    result.status = Status::InternalError;
    let chain = std::iter::successors(e.source(), |c| c.source()).map(ToString::to_string).collect::<Vec<_>>();
    result.error = Some(internal_error(id, format!("preparing the sandbox failed: {e}: {}", chain.join(": "))));
    result
}

fn internal_error(id: &str, message: String) -> ExecError {
    ExecError::new(ErrorCode::InternalError.as_str(), format!("{message} (execution {id})"))
}

fn internal(id: &str, request: &ExecutionRequest, message: String) -> ExecutionResult {
    ExecutionResult {
        execution_id: id.to_owned(),
        status: Status::InternalError,
        profile: request.profile.clone(),
        error: Some(internal_error(id, message)),
        ..Default::default()
    }
}

/// The wire name of the cgroup hierarchy `layout` (the runtime knows no wire types).
fn cgroup_version(layout: &sandbox_runtime::cgroup::Layout) -> sandbox_core::wire::CgroupVersion {
    match layout {
        sandbox_runtime::cgroup::Layout::V1 { .. } => sandbox_core::wire::CgroupVersion::V1,
        sandbox_runtime::cgroup::Layout::V2 { .. } => sandbox_core::wire::CgroupVersion::V2,
    }
}

/// How long a child forked for its execution may take, for each of its two waits (its set-up
/// events, then its ready byte), to be sandboxed and ready: milliseconds normally, seconds on a
/// host under load. Past it the execution starts cold rather than hold its slot outside its own
/// timeout (a pool's member, started ahead, may take a minute).
const FORK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(20);

/// A child of `templates`' template for `a`'s profile, forked for this execution and given it
/// (inputs, code, environment) once sandboxed ([`pool::fork_member`]: the template process is
/// never handed the request); `None` when the profile has no ready template, the request sets
/// a variable the interpreter reads only as it starts ([`command::read_at_start`]), or the fork or the
/// child's set-up failed or took longer than [`FORK_PATIENCE`] (logged: the execution starts
/// cold). Blocks: call it off the async workers.
fn fork_for(
    templates: &Arc<warm::Templates>,
    opts: &EngineOptions,
    layout: &sandbox_runtime::cgroup::Layout,
    id: &str,
    a: &Admitted,
    code: &str,
) -> Option<pool::Member> {
    if a.env.keys().any(|k| command::read_at_start(a.language, k)) {
        return None;
    }
    let template = templates.checkout(&a.profile_name)?;
    let forked = pool::fork_member(opts, layout, id, &a.profile, template, 0, WarmStart::Template, FORK_PATIENCE).and_then(|mut m| {
        m.prepared_mut().fill_member(opts, a, code).map_err(|e| e.to_string())?;
        Ok(m)
    });
    forked.map_err(|e| tracing::warn!(reason = %e, "the template could not start the execution; starting it cold")).ok()
}

/// Runs blocking `f` (a file system, cgroup or database call) on tokio's blocking pool, so the
/// runtime's workers keep serving other executions, streams and health probes meanwhile.
/// A panic in `f` is resumed here.
pub(crate) async fn off_worker<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Runs blocking `f` ([`off_worker`]) on this thread instead when `short` (it ends in
/// milliseconds) and the runtime is single-threaded: `sandbox run`'s, which serves its one
/// execution, and that waits for `f` anyway. A hop to a blocking thread and back, each a
/// wake-up of a thread on the other core, cost a cold `sandbox run` ~0.2 ms on this machine
/// kind (`bench/startup.sh`). Meanwhile the runtime's other tasks wait: `sandbox run` handles
/// a SIGINT once `f` returns.
pub(crate) async fn off_worker_unless_alone<T: Send + 'static>(short: bool, f: impl FnOnce() -> T + Send + 'static) -> T {
    if short && tokio::runtime::Handle::try_current().is_ok_and(|rt| rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread) {
        return f();
    }
    off_worker(f).await
}

/// Runs blocking `f` where it is called without copying its inputs, first letting a
/// multi-threaded runtime move this worker's other tasks to another thread
/// (`tokio::task::block_in_place`); runs it as is elsewhere (no runtime, or `sandbox run`'s
/// single-threaded one, which has nothing else to serve).
pub(crate) fn block_in_place<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) if rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Whole milliseconds of `d`, saturating.
pub(crate) fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
