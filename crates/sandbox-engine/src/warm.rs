//! Warm starts: one Python template per profile whose `[warm] mode = "template"`, kept by a
//! long-running service (`sandbox serve`, `sandbox mcp`, or `sandbox run --warm`).
//!
//! A template is a sandbox of its own, started like a cold execution (our helper re-executed,
//! new user/pid/mount/net/ipc/uts/cgroup namespaces, read-only root with the environment, no
//! network, a cgroup of its own charged for its memory), whose program is
//! `harness/template.py`: it imports the environment's `preload` modules, warms them up, and
//! then forks one child per execution on request. The child enters the execution's own
//! namespaces, cgroup, uid, landlock and seccomp (`sandbox_runtime::warm`) before the caller's
//! first instruction; from there on the execution is supervised exactly like a cold one.
//!
//! Life cycle: started in the background; forks at most `max_forks` times and for at most
//! `max_age_ms` (its replacement starts at 90% of either: of the forks at a checkout, of the age
//! by a thread that watches it, idle or not), and on the installation of its environment it
//! started on (the same thread looks every 5 s); replaced then, and whenever it dies or answers a fork request
//! badly (restarted with a back-off). While a
//! profile has no ready template, its executions run cold: a warm profile never fails because
//! of its template. Shutdown kills every template and removes its cgroup and directory.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use command_fds::{CommandFdExt, FdMapping};
use nix::unistd::{chown, Gid, Uid};
use sandbox_core::profile::WarmMode;
use sandbox_core::{Language, Profile};
use sandbox_runtime::cgroup::{self, Cgroup, Layout};
use sandbox_runtime::spec::{BindMount, Event, Rlimits, SpawnSpec, CONTROL_FD, RESULT_FD, UID_SLOTS, WARM_LIB_DIR};
use sandbox_runtime::HELPER_ARGV0;

use crate::command::{template_command, CODE_DIR, TEMPLATE_SOURCE};
use crate::prepare::{io_err, root_files, runtime_mounts};
use crate::EngineOptions;

/// File name of the warm-start library the templates load.
pub const WARM_LIB: &str = "libsandbox_warm.so";

/// How long a template may take from spawn to `ready` (importing pandas and matplotlib on a
/// busy 2-core host takes seconds).
const READY_PATIENCE: Duration = Duration::from_secs(180);

/// How often [`Templates::watch`] looks at the installation of a template's environment.
const WATCH_INSTALLATION_EVERY: Duration = Duration::from_secs(5);

/// The longest sleep of [`Templates::watch`] (how late it sees a shutdown or a retirement).
const WATCH_STEP: Duration = Duration::from_millis(250);

/// Counters exported as metrics.
#[derive(Debug, Default)]
pub struct WarmCounters {
    /// Executions in a child their template forked for them (not one forked ahead: a pool's).
    pub hits: AtomicU64,
    /// Templates started after the first (replacements, restarts).
    pub restarts: AtomicU64,
}

/// The state of one profile's template, for `doctor` and `/metrics`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateStatus {
    /// The profile.
    pub profile: String,
    /// `starting`, `ready`, `retiring` (worn out, or its environment reinstalled: it forks no
    /// more while its replacement starts) or `failed`.
    pub state: String,
    /// Forks served by the current template.
    pub forks: u64,
    /// Peak memory of the template's cgroup, in bytes.
    pub peak_memory_bytes: u64,
    /// Age of the current template, in ms.
    pub age_ms: u64,
    /// Why the last start failed, if it did.
    pub error: Option<String>,
}

/// The templates of every warm profile.
pub struct Templates {
    opts: EngineOptions,
    layout: Layout,
    lib: PathBuf,
    profiles: Mutex<HashMap<String, Entry>>,
    closing: AtomicBool,
    /// Hits and restarts (cold fallbacks are the engine's: `Engine::warm_cold_fallbacks`).
    pub counters: WarmCounters,
    /// Every template helper alive (starting, serving or retiring).
    helpers: Mutex<Vec<Helper>>,
    /// Threads starting or following a template.
    busy: std::sync::atomic::AtomicUsize,
}

#[derive(Default)]
struct Entry {
    current: Option<Arc<Template>>,
    starting: bool,
    failures: u32,
    error: Option<String>,
    started_once: bool,
}

/// A template sandbox's helper process, shared with the registry [`Templates::shutdown`] kills from.
type Helper = Arc<Mutex<std::process::Child>>;

/// One running template.
pub(crate) struct Template {
    id: String,
    /// A pidfd of the template's interpreter (its sandbox init's child), taken when it said
    /// ready. Never a pid looked up later: once the interpreter has died, the executions it
    /// forked are its init's children (re-parented), and one of them would be found in its
    /// place.
    interpreter: OwnedFd,
    channel: Mutex<UnixStream>,
    /// A second handle on `channel`'s socket, to shut it down without waiting for a fork that
    /// holds `channel` (up to its answer's 30 s timeout).
    closer: UnixStream,
    /// Checkouts not yet done with their fork ([`Checkout`]).
    checkouts: std::sync::atomic::AtomicUsize,
    /// Replaced: the channel closes once no checkout is left.
    retired: AtomicBool,
    helper: Helper,
    cgroup: Cgroup,
    dir: PathBuf,
    forks: AtomicU64,
    started: Instant,
    healthy: AtomicBool,
    max_forks: u64,
    max_age: Duration,
    /// The installation of its environment and base it was started on
    /// ([`crate::prepare::installation`]): another one now retires it.
    installation: Vec<(u64, u64)>,
    /// Shared locks on those directories, held for its life (its children bind them through
    /// it), so that `sandbox env gc` never removes them under it.
    _held: Vec<nix::fcntl::Flock<std::fs::File>>,
}

impl Template {
    /// Asks the template to fork a child for one execution, handing it `fds` (control socket,
    /// stdin, stdout, stderr, side channel, the mount trees of
    /// [`sandbox_runtime::spec::WARM_TREES`], then one file per cgroup hierarchy to join, in
    /// that order). The child is forked before the execution's code, environment and inputs
    /// are written (see [`crate::pool::fork_member`]): once sandboxed, it says ready (`R` on its
    /// side channel) and waits for a go byte on its stdin before it reads its run file, copying
    /// up to `ahead` bytes of the pages it shares with the template meanwhile (a pool's member,
    /// forked ahead of its request; 0 for a child its execution waits for). Returns the child's
    /// pidfd.
    /// Errors: the template is gone or refused (it is then marked unhealthy and replaced).
    pub(crate) fn fork(&self, fds: &[&OwnedFd], ahead: u64) -> Result<OwnedFd, String> {
        let channel = self.channel.lock().expect("template channel lock");
        let result = (|| {
            let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
            let request = format!("fork ahead {ahead}\n");
            sandbox_runtime::send_fds(&channel, request.as_bytes(), &borrowed).map_err(|e| format!("fork request: {e}"))?;
            let mut buf = [0u8; 128];
            let (n, mut received) = sandbox_runtime::recv_with_fds(&channel, &mut buf).map_err(|e| format!("fork answer: {e}"))?;
            let answer = String::from_utf8_lossy(&buf[..n]).trim().to_owned();
            match (answer.as_str(), received.pop()) {
                ("ok", Some(pidfd)) => Ok(pidfd),
                ("", _) => Err("the template closed its channel".to_owned()),
                (other, _) => Err(format!("the template refused: {other}")),
            }
        })();
        if result.is_err() {
            self.healthy.store(false, Ordering::SeqCst);
            self.kill_interpreter();
        } else {
            self.forks.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// The installation of its environment and base it binds ([`crate::prepare::installation`]).
    pub(crate) fn installation(&self) -> &[(u64, u64)] {
        &self.installation
    }

    /// Past its life: `max_forks` forks made or checked out, or `max_age` old. It forks no more
    /// ([`Templates::checkout`]), whether or not its replacement is ready.
    fn worn_out(&self) -> bool {
        let forks = self.forks.load(Ordering::Relaxed).saturating_add(self.checkouts.load(Ordering::SeqCst) as u64);
        forks >= self.max_forks || self.started.elapsed() >= self.max_age
    }

    /// Near the end of its life (90% of `max_forks`, at least one fork before it, or 90% of
    /// `max_age`): its replacement starts now, so that it is ready when this one is worn out.
    fn due(&self) -> bool {
        let forks = self.forks.load(Ordering::Relaxed).saturating_add(self.checkouts.load(Ordering::SeqCst) as u64);
        forks >= self.max_forks.saturating_sub((self.max_forks / 10).max(1)) || Instant::now() >= self.replace_at()
    }

    /// When its age makes it [`Template::due`]: at 90% of `max_age` (its watch starts the
    /// replacement then, idle or not: [`Templates::watch`]).
    fn replace_at(&self) -> Instant {
        self.started + (self.max_age - self.max_age / 10)
    }

    /// Kills the whole template sandbox, and with it every execution it forked that still runs.
    fn kill(&self) {
        let _ = self.helper.lock().expect("helper lock").kill();
    }

    /// Kills the interpreter only (through its pidfd: nothing once it is gone): its sandbox's
    /// init then waits for the executions already forked, which run to their end, and exits.
    fn kill_interpreter(&self) {
        let _ = sandbox_runtime::pidfd_send_signal(self.interpreter.as_fd(), nix::sys::signal::Signal::SIGKILL as i32);
    }

    /// Asks the template to stop once its running children have ended: it sees EOF on its
    /// channel, waits for them and exits, and its sandbox ends with it. A checkout made before
    /// the replacement was ready still gets its fork: the channel closes when the last one is
    /// done ([`Checkout`]'s drop), so no fork request meets a closed channel and is taken for
    /// the template's failure. Never blocks.
    fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
        if self.checkouts.load(Ordering::SeqCst) == 0 {
            self.close();
        }
    }

    fn close(&self) {
        let _ = self.closer.shutdown(std::net::Shutdown::Write);
    }
}

/// A template checked out for one fork ([`Templates::checkout`]): while one is held, a
/// retirement leaves the template's channel open (see [`Template::retire`]).
pub(crate) struct Checkout(Arc<Template>);

impl Checkout {
    fn new(t: Arc<Template>) -> Self {
        t.checkouts.fetch_add(1, Ordering::SeqCst);
        Self(t)
    }
}

impl std::ops::Deref for Checkout {
    type Target = Template;
    fn deref(&self) -> &Template {
        &self.0
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        // Either this sees the retirement, or the retirement sees no checkout (both SeqCst).
        if self.0.checkouts.fetch_sub(1, Ordering::SeqCst) == 1 && self.0.retired.load(Ordering::SeqCst) {
            self.0.close();
        }
    }
}

impl Templates {
    /// A manager for the warm profiles of `opts.config`; nothing starts until
    /// [`Templates::start`]. `None` when no profile is warm.
    /// Errors: the warm-start library is missing next to the binary (build the
    /// `sandbox-warm` crate), or the host has no usable cgroup layout.
    pub fn new(opts: EngineOptions, layout: Option<Layout>) -> Result<Option<Arc<Self>>, String> {
        if !opts.config.profiles.values().any(|p| p.warm.mode == WarmMode::Template) {
            return Ok(None);
        }
        let layout = layout.ok_or("no usable cgroup layout")?;
        let lib = find_library(&opts.helper).ok_or_else(|| {
            format!("{WARM_LIB} not found next to {} (or in its deps/): `cargo build -p sandbox-warm` builds it; warm profiles run cold", opts.helper.display())
        })?;
        Ok(Some(Arc::new(Self {
            opts,
            layout,
            lib,
            profiles: Mutex::new(HashMap::new()),
            closing: AtomicBool::new(false),
            counters: WarmCounters::default(),
            helpers: Mutex::new(Vec::new()),
            busy: std::sync::atomic::AtomicUsize::new(0),
        })))
    }

    /// Starts a template, in the background, for every warm profile that `runnable` accepts
    /// (its environment installed, its runtime present).
    pub fn start(self: &Arc<Self>, runnable: impl Fn(&str) -> bool) {
        let names: Vec<String> =
            self.opts.config.profiles.iter().filter(|(name, _)| self.serves(name) && runnable(name)).map(|(name, _)| name.clone()).collect();
        for name in names {
            self.spawn_start(name, Duration::ZERO);
        }
    }

    /// Whether `profile` is one of the profiles these templates serve (a Python profile whose
    /// `[warm] mode = "template"`), ready or not.
    pub fn serves(&self, profile: &str) -> bool {
        self.opts.config.profiles.get(profile).is_some_and(|p| p.warm.mode == WarmMode::Template && p.language == Language::Python)
    }

    /// A ready template for `profile`, if there is one that has forks left. Starts its
    /// replacement when it is near its end ([`Template::due`]); a worn-out one forks no more, so
    /// a template never lives past `max_forks` forks or `max_age_ms` even while its replacement
    /// fails to start (its profile's executions run cold meanwhile).
    pub(crate) fn checkout(self: &Arc<Self>, profile: &str) -> Option<Checkout> {
        // Which installation of its environment a cold run would bind now (a few file system
        // lookups, outside the lock).
        let installation = crate::prepare::installation(&self.opts, self.opts.config.profiles.get(profile)?);
        let mut profiles = self.profiles.lock().expect("templates lock");
        let entry = profiles.get_mut(profile)?;
        let t = entry.current.clone()?;
        if !t.healthy.load(Ordering::SeqCst) {
            return None;
        }
        // Another installation of its environment (reinstalled, or rebuilt on a new image):
        // its children would run on the old one, so it forks no more.
        let stale = t.installation != installation;
        let (due, worn_out) = (t.due() || stale, t.worn_out() || stale);
        // Counted under the lock a replacement's retirement of `t` also takes.
        let checkout = (!worn_out).then(|| Checkout::new(t));
        if due && !entry.starting && !self.closing.load(Ordering::SeqCst) {
            entry.starting = true;
            drop(profiles);
            self.spawn_start(profile.to_owned(), Duration::ZERO);
        }
        checkout
    }

    /// Blocks until `profile` has a ready template or `patience` passes (for `sandbox run --warm`
    /// and tests). Returns whether one is ready, or the last start error.
    /// Errors: the profile's last template start failed.
    pub fn wait_ready(&self, profile: &str, patience: Duration) -> Result<bool, String> {
        let until = Instant::now() + patience;
        loop {
            {
                let profiles = self.profiles.lock().expect("templates lock");
                match profiles.get(profile) {
                    Some(e) if e.current.as_ref().is_some_and(|t| t.healthy.load(Ordering::SeqCst) && !t.worn_out()) => return Ok(true),
                    // The last start failed (another may be under way, after a back-off).
                    Some(e) if e.failures > 0 => return Err(e.error.clone().unwrap_or_default()),
                    None => return Ok(false),
                    _ => {}
                }
            }
            if Instant::now() >= until {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Each warm profile's template state.
    pub fn status(&self) -> Vec<TemplateStatus> {
        // Which installation of its environment each profile binds now (outside the lock).
        let names: Vec<String> = self.profiles.lock().expect("templates lock").keys().cloned().collect();
        let installations: HashMap<String, Vec<(u64, u64)>> =
            names.into_iter().filter_map(|n| self.opts.config.profiles.get(&n).map(|p| crate::prepare::installation(&self.opts, p)).map(|i| (n, i))).collect();
        let profiles = self.profiles.lock().expect("templates lock");
        let mut out: Vec<TemplateStatus> = profiles
            .iter()
            .map(|(name, e)| {
                let t = e.current.as_ref().filter(|t| t.healthy.load(Ordering::SeqCst));
                let retiring = t.is_some_and(|t| t.worn_out() || installations.get(name).is_some_and(|i| *i != t.installation));
                TemplateStatus {
                    profile: name.clone(),
                    state: if retiring {
                        "retiring"
                    } else if t.is_some() {
                        "ready"
                    } else if e.starting {
                        "starting"
                    } else {
                        "failed"
                    }
                    .into(),
                    forks: t.map_or(0, |t| t.forks.load(Ordering::Relaxed)),
                    peak_memory_bytes: t.and_then(|t| t.cgroup.usage().ok()).map_or(0, |u| u.peak_memory_bytes),
                    age_ms: t.map_or(0, |t| crate::ms(t.started.elapsed())),
                    error: e.error.clone(),
                }
            })
            .collect();
        out.sort_by(|a, b| a.profile.cmp(&b.profile));
        out
    }

    /// Stops every template now: each is killed (its sandbox, and any warm execution still
    /// running in it, dies with it), its cgroup and directory removed; templates being started
    /// are stopped too. Returns once all of that is done (at most ~15 s). Call it after the
    /// service drained.
    pub fn shutdown(&self) {
        self.closing.store(true, Ordering::SeqCst);
        for h in self.helpers.lock().expect("helpers lock").iter() {
            let _ = h.lock().expect("helper lock").kill();
        }
        // The threads that started and follow each template see their sandbox end and clean up.
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.busy.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut profiles = self.profiles.lock().expect("templates lock");
        for e in profiles.values_mut() {
            e.current = None;
        }
    }

    fn register(&self, h: &Helper) {
        self.helpers.lock().expect("helpers lock").push(Arc::clone(h));
        if self.closing.load(Ordering::SeqCst) {
            let _ = h.lock().expect("helper lock").kill();
        }
    }

    fn unregister(&self, h: &Helper) {
        self.helpers.lock().expect("helpers lock").retain(|x| !Arc::ptr_eq(x, h));
    }

    fn spawn_start(self: &Arc<Self>, profile: String, delay: Duration) {
        {
            let mut profiles = self.profiles.lock().expect("templates lock");
            profiles.entry(profile.clone()).or_default().starting = true;
        }
        let me = Arc::clone(self);
        self.busy.fetch_add(1, Ordering::SeqCst);
        std::thread::Builder::new()
            .name(format!("template-{profile}"))
            .spawn(move || {
                struct Busy(Arc<Templates>);
                impl Drop for Busy {
                    fn drop(&mut self) {
                        self.0.busy.fetch_sub(1, Ordering::SeqCst);
                    }
                }
                let _busy = Busy(Arc::clone(&me));
                let until = Instant::now() + delay;
                while Instant::now() < until && !me.closing.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())));
                }
                if me.closing.load(Ordering::SeqCst) {
                    me.profiles.lock().expect("templates lock").entry(profile).or_default().starting = false;
                    return;
                }
                let started = me.launch(&profile);
                let mut profiles = me.profiles.lock().expect("templates lock");
                let entry = profiles.entry(profile.clone()).or_default();
                entry.starting = false;
                match started {
                    Ok((t, ctl)) => {
                        if entry.started_once {
                            me.counters.restarts.fetch_add(1, Ordering::Relaxed);
                        }
                        entry.started_once = true;
                        entry.failures = 0;
                        entry.error = None;
                        if let Some(old) = entry.current.replace(Arc::clone(&t)) {
                            old.retire();
                        }
                        drop(profiles);
                        tracing::info!(profile = %profile, template = %t.id, "template ready");
                        me.watch(profile.clone(), Arc::clone(&t));
                        me.monitor(profile, t, ctl);
                    }
                    // Stopped at shutdown while starting: not a failure.
                    Err(_) if me.closing.load(Ordering::SeqCst) => {}
                    Err(e) => {
                        entry.failures += 1;
                        entry.error = Some(e.clone());
                        let backoff = Duration::from_millis(500u64 << entry.failures.min(7));
                        drop(profiles);
                        tracing::error!(profile = %profile, error = %e, "template failed to start; its executions run cold");
                        me.spawn_start(profile, backoff);
                    }
                }
            })
            .expect("a thread can be started");
    }

    /// Replaces `t` before a request needs it: once it is 90% of its `max_age_ms` old (the age
    /// [`Template::due`] checks at a checkout) or its environment's installation changed
    /// ([`crate::prepare::installation`], looked at every [`WATCH_INSTALLATION_EVERY`]), it
    /// starts the profile's next template, which retires `t` once ready. Without it a template
    /// that idled past its age was replaced only at the next checkout, which then ran cold: the
    /// first data-analyst request after an idle hour took ~0.55 s instead of ~0.08
    /// (`bench/warm.sh`). Ends when `t` is retired or replaced, or at shutdown.
    fn watch(self: &Arc<Self>, profile: String, t: Arc<Template>) {
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new().name(format!("template-age-{profile}")).spawn(move || {
            let due_at = t.replace_at();
            let mut look_at = Instant::now() + WATCH_INSTALLATION_EVERY;
            loop {
                if me.closing.load(Ordering::SeqCst) || t.retired.load(Ordering::SeqCst) {
                    return;
                }
                let now = Instant::now();
                let mut replace = now >= due_at;
                if !replace && now >= look_at {
                    look_at = now + WATCH_INSTALLATION_EVERY;
                    replace = me.opts.config.profiles.get(&profile).is_some_and(|p| crate::prepare::installation(&me.opts, p) != t.installation);
                }
                if replace {
                    let mut profiles = me.profiles.lock().expect("templates lock");
                    let Some(entry) = profiles.get_mut(&profile) else { return };
                    if !entry.current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &t)) {
                        return;
                    }
                    if !entry.starting {
                        tracing::info!(profile = %profile, template = %t.id, "template near its age or its environment reinstalled: starting its replacement");
                        entry.starting = true;
                        drop(profiles);
                        me.spawn_start(profile, Duration::ZERO);
                    }
                    return;
                }
                std::thread::sleep(due_at.min(look_at).saturating_duration_since(now).min(WATCH_STEP));
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no thread to replace the template at its age: the next checkout after it does");
        }
    }

    /// Follows a template's control socket: when its interpreter ends, the profile gets a new
    /// template at once (executions the old one forked run on); when its sandbox ends, its
    /// cgroup and directory are removed.
    fn monitor(self: Arc<Self>, profile: String, t: Arc<Template>, ctl: UnixStream) {
        let mut lines = BufReader::new(ctl).lines();
        let mut replaced = false;
        while let Some(Ok(line)) = lines.next() {
            match serde_json::from_str::<Event>(&line) {
                Ok(Event::Failed { step, message }) => tracing::error!(profile = %profile, step = %step, message = %message, "template failed"),
                Ok(Event::Exited { code, signal, .. }) => {
                    tracing::info!(profile = %profile, template = %t.id, ?code, ?signal, "template interpreter ended");
                    self.replace(&profile, &t);
                    replaced = true;
                }
                _ => {}
            }
        }
        if !replaced {
            self.replace(&profile, &t);
        }
        t.kill();
        let _ = t.helper.lock().expect("helper lock").wait();
        cleanup(&t);
        self.unregister(&t.helper);
    }

    /// `t` no longer serves: if it was the profile's current template, start another.
    fn replace(self: &Arc<Self>, profile: &str, t: &Arc<Template>) {
        t.healthy.store(false, Ordering::SeqCst);
        let start = {
            let mut profiles = self.profiles.lock().expect("templates lock");
            let entry = profiles.entry(profile.to_owned()).or_default();
            let current = entry.current.as_ref().is_some_and(|c| Arc::ptr_eq(c, t));
            if current {
                entry.current = None;
            }
            let start = current && !entry.starting && !self.closing.load(Ordering::SeqCst);
            if start {
                entry.starting = true;
            }
            start
        };
        if start {
            tracing::warn!(profile = %profile, template = %t.id, "template ended; starting another (runs are cold meanwhile)");
            self.spawn_start(profile.to_owned(), Duration::from_millis(200));
        }
    }

    /// Starts one template for `profile` and waits until it is ready.
    fn launch(&self, profile_name: &str) -> Result<(Arc<Template>, UnixStream), String> {
        let profile = self.opts.config.profiles.get(profile_name).ok_or("profile vanished")?.clone();
        let rt = &self.opts.config.runtime;
        let id = format!("template-{}", uuid::Uuid::now_v7());
        let executions = self.opts.data_dir.join("executions");
        fs_make(&executions, 0o711).map_err(|e| e.to_string())?;
        crate::prepare::check_searchable(&executions).map_err(|e| e.to_string())?;
        let dir = executions.join(&id);
        fs_make(&dir, 0o700).map_err(|e| e.to_string())?;
        chown(&dir, Some(Uid::from_raw(rt.uid_base)), Some(Gid::from_raw(rt.uid_base))).map_err(|e| format!("chown {}: {e}", dir.display()))?;
        // Written aside and renamed, as `Prepared::new` does: a concurrent start's sweep must
        // never read half a file (an empty owner reads as a dead one, and it sweeps the directory).
        crate::prepare::write_owner(&dir).map_err(|e| e.to_string())?;
        let made = (|| -> Result<(Arc<Template>, UnixStream), String> {
            let (root, workspace, lib_dir) = (dir.join("root"), dir.join("workspace"), dir.join("lib"));
            for d in [&root, &workspace, &lib_dir] {
                fs_make(d, 0o755).map_err(|e| e.to_string())?;
            }
            let lib = lib_dir.join(WARM_LIB);
            std::fs::copy(&self.lib, &lib).map_err(|e| format!("copy {}: {e}", self.lib.display()))?;
            std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o444)).map_err(|e| format!("chmod {}: {e}", lib.display()))?;
            let limits =
                cgroup::Limits { memory_max_bytes: profile.warm.template_memory_max_bytes, cpu_max: profile.limits.cpu_max, pids_max: profile.limits.pids_max };
            let cg = Cgroup::create(&self.layout, &self.opts.cgroup_parent, &id, limits).map_err(|e| e.to_string())?;
            let installation = crate::prepare::installation(&self.opts, &profile);
            let (spec, held) = self.template_spec(&id, &profile, &root, &workspace, &lib_dir, &cg)?;
            let (t, ctl) = spawn(&spec, cg, dir.clone(), id.clone(), &profile, &self.opts.helper, self, (installation, held))?;
            Ok((t, ctl))
        })();
        if made.is_err() {
            let cg = Cgroup::existing(&self.layout, &self.opts.cgroup_parent, &id);
            let _ = cg.kill_all(Duration::from_secs(5));
            let _ = cg.remove();
            let _ = std::fs::remove_dir_all(&dir);
        }
        made
    }

    /// The template's spawn spec, and the locks on the environment and base directories it binds.
    fn template_spec(
        &self,
        id: &str,
        profile: &Profile,
        root: &Path,
        workspace: &Path,
        lib_dir: &Path,
        cg: &Cgroup,
    ) -> Result<(SpawnSpec, Vec<nix::fcntl::Flock<std::fs::File>>), String> {
        let rt = &self.opts.config.runtime;
        let preload = profile.environment.as_ref().and_then(|e| self.opts.config.environments.get(e)).map(|e| e.preload.clone()).unwrap_or_default();
        let (argv, env) = template_command(profile, &self.opts.config, &preload, &format!("{WARM_LIB_DIR}/{WARM_LIB}"));
        let mut files = root_files(Language::Python, sandbox_runtime::spec::SANDBOX_UID, None);
        files.push(sandbox_runtime::spec::RootFile {
            sandbox_path: format!("{CODE_DIR}/{}", TEMPLATE_SOURCE.0),
            content: TEMPLATE_SOURCE.1.as_bytes().to_vec(),
            mode: 0o444,
        });
        let mut mounts = runtime_mounts(&self.opts, profile, Language::Python).map_err(|e| e.to_string())?;
        mounts.push(BindMount { host: lib_dir.to_owned(), sandbox_path: WARM_LIB_DIR.into(), read_only: true });
        mounts.extend(profile.filesystem.mounts.iter().map(|m| BindMount {
            host: m.host.clone(),
            sandbox_path: m.sandbox.display().to_string(),
            read_only: m.read_only,
        }));
        let fs_policy = &profile.filesystem;
        // The template binds what the executions forked from it see: the same system root. Its
        // locks are kept with it: its children bind these directories through it, whatever an
        // execution's own `Prepared` locks (the environment installed when it starts).
        let system = crate::prepare::system_of(&self.opts, profile, Language::Python).map_err(|e| e.to_string())?;
        let spec = SpawnSpec {
            execution_id: id.to_owned(),
            engine_pid: std::process::id(),
            uid_base: rt.uid_base,
            program_uid: sandbox_runtime::spec::SANDBOX_UID,
            template_slots: UID_SLOTS,
            template_children: template_children(&self.opts.config),
            cgroup_join: cg.join_files(),
            cgroup_dir: cg.v2_dir().map(Path::to_owned),
            root_dir: root.to_owned(),
            workspace_dir: workspace.to_owned(),
            system_dirs: system.dirs,
            etc_binds: crate::prepare::ETC_BINDS.iter().map(PathBuf::from).collect(),
            system_root: system.root,
            root_files: files,
            tmp_bytes: fs_policy.tmp_max_bytes,
            mounts,
            masked_dirs: system.masked,
            hostname: "sandbox".into(),
            argv,
            env,
            cwd: "/workspace".into(),
            rlimits: Rlimits {
                nofile: profile.limits.nofile,
                fsize_bytes: fs_policy.workspace_max_bytes.max(fs_policy.tmp_max_bytes) + (1 << 20),
                nproc: u64::from(profile.limits.pids_max),
            },
            tun: false,
            landlock_min_abi: profile.landlock_min_abi,
            // The template's program loads no filter; each child's spec carries them.
            seccomp_bpf: Vec::new(),
            hold: false,
        };
        Ok((spec, system.held))
    }
}

impl Drop for Templates {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Spawns the template's helper, sends the spec, and waits for `Spawned` and then `ready`.
#[allow(clippy::too_many_arguments)]
fn spawn(
    spec: &SpawnSpec,
    cg: Cgroup,
    dir: PathBuf,
    id: String,
    profile: &Profile,
    helper: &Path,
    registry: &Templates,
    (installation, held): (Vec<(u64, u64)>, Vec<nix::fcntl::Flock<std::fs::File>>),
) -> Result<(Arc<Template>, UnixStream), String> {
    let (engine_ctl, helper_ctl) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    let (engine_chan, template_chan) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    let mut cmd = std::process::Command::new(helper);
    cmd.arg0(HELPER_ARGV0).env_clear().stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
    cmd.fd_mappings(vec![FdMapping { parent_fd: helper_ctl.into(), child_fd: CONTROL_FD }, FdMapping { parent_fd: template_chan.into(), child_fd: RESULT_FD }])
        .map_err(|e| format!("fd mapping: {e}"))?;
    let mut child = cmd.spawn().map_err(|e| format!("spawning the helper {}: {e}", helper.display()))?;
    drop(cmd);
    let stderr = child.stderr.take();
    let child: Helper = Arc::new(Mutex::new(child));
    registry.register(&child);
    // The template's stderr (an import that fails, a warning) goes to the service's log.
    if let Some(stderr) = stderr {
        let id = id.clone();
        let _ = std::thread::Builder::new().name("template-stderr".into()).spawn(move || {
            for line in BufReader::new(stderr.take(1 << 20)).lines().map_while(Result::ok) {
                tracing::warn!(template = %id, "{line}");
            }
        });
    }
    let fail = |child: &mut Helper, e: String| {
        let mut c = child.lock().expect("helper lock");
        let _ = c.kill();
        let _ = c.wait();
        drop(c);
        registry.unregister(child);
        e
    };
    let mut child = child;
    if let Err(e) = (&engine_ctl).write_all(&spec.frame()) {
        return Err(fail(&mut child, format!("sending the spec: {e}")));
    }
    let _ = engine_ctl.set_read_timeout(Some(READY_PATIENCE));
    let mut events = BufReader::new(engine_ctl.try_clone().map_err(|e| e.to_string())?);
    let mut init_pid = 0;
    loop {
        let mut l = String::new();
        match events.read_line(&mut l) {
            Ok(0) | Err(_) => return Err(fail(&mut child, "the template's sandbox ended during set-up".into())),
            Ok(_) => match serde_json::from_str::<Event>(&l) {
                Ok(Event::Started { init_pid: pid }) => init_pid = pid,
                Ok(Event::Spawned { .. }) => break,
                Ok(Event::Failed { step, message }) => return Err(fail(&mut child, format!("set-up failed at {step}: {message}"))),
                _ => {}
            },
        }
    }
    let _ = engine_chan.set_read_timeout(Some(READY_PATIENCE));
    let mut ready = [0u8; 6];
    if let Err(e) = (&engine_chan).read_exact(&mut ready) {
        let preloading = profile.environment.as_deref().map_or_else(|| "no environment".to_owned(), |env| format!("environment {env:?}"));
        return Err(fail(&mut child, format!("the template did not get ready ({preloading}; its log lines say why): {e}")));
    }
    if &ready != b"ready\n" {
        // The rest of the line says why (`err <reason>`: see template.py).
        let mut said = ready.to_vec();
        let mut byte = [0u8; 1];
        while said.len() < 512 && said.last() != Some(&b'\n') && matches!((&engine_chan).read(&mut byte), Ok(1)) {
            said.push(byte[0]);
        }
        let said = String::from_utf8_lossy(&said);
        let why = match said.trim_end().strip_prefix("err ") {
            Some(why) => format!("the template cannot serve: {why}"),
            None => format!("the template said {said:?} instead of ready"),
        };
        return Err(fail(&mut child, why));
    }
    let helper_pid = child.lock().expect("helper lock").id();
    let interpreter = match interpreter_pidfd(helper_pid, init_pid) {
        Ok(fd) => fd,
        Err(e) => return Err(fail(&mut child, e)),
    };
    let _ = engine_chan.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = engine_ctl.set_read_timeout(None);
    let closer = match engine_chan.try_clone() {
        Ok(c) => c,
        Err(e) => return Err(fail(&mut child, format!("the template's channel: {e}"))),
    };
    let t = Arc::new(Template {
        id,
        interpreter,
        channel: Mutex::new(engine_chan),
        closer,
        checkouts: std::sync::atomic::AtomicUsize::new(0),
        retired: AtomicBool::new(false),
        helper: child,
        cgroup: cg,
        dir,
        forks: AtomicU64::new(0),
        started: Instant::now(),
        healthy: AtomicBool::new(true),
        max_forks: profile.warm.max_forks,
        max_age: Duration::from_millis(profile.warm.max_age_ms),
        installation,
        _held: held,
    });
    Ok((t, engine_ctl))
}

fn cleanup(t: &Template) {
    if let Err(e) = t.cgroup.kill_all(Duration::from_secs(5)).and_then(|()| t.cgroup.remove()) {
        tracing::error!(template = %t.id, error = %e, "cannot remove a template's cgroup");
    }
    if let Err(e) = std::fs::remove_dir_all(&t.dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::error!(template = %t.id, error = %e, "cannot remove a template's directory");
        }
    }
}

fn fs_make(dir: &Path, mode: u32) -> Result<(), crate::prepare::PrepareError> {
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(io_err("create", dir)(e)),
        _ => Ok(()),
    }
}

/// `libsandbox_warm.so` next to the binary (an installed layout, or cargo's copy of a workspace
/// build) or in its `deps/` (where cargo leaves it when building the binary's package alone);
/// the newer when both exist, since cargo refreshes only one of them per build.
fn find_library(helper: &Path) -> Option<PathBuf> {
    let dir = helper.parent()?;
    [dir.join(WARM_LIB), dir.join("deps").join(WARM_LIB)]
        .into_iter()
        .filter_map(|p| std::fs::metadata(&p).and_then(|m| m.modified()).ok().map(|t| (t, p)))
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p)
}

/// The host pid a pidfd refers to (its `Pid:` line in /proc/self/fdinfo); `None` once the
/// process has been reaped.
pub(crate) fn pidfd_pid(pidfd: &OwnedFd) -> Option<i32> {
    use std::os::fd::AsRawFd;
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).ok()?;
    info.lines().find_map(|l| l.strip_prefix("Pid:")).and_then(|p| p.trim().parse().ok()).filter(|p: &i32| *p > 0)
}

/// A pidfd of the interpreter of the template sandbox whose helper is our child `helper_pid`
/// and whose init reported host pid `init_pid`, read while it is certain to be init's only
/// child (it has just said ready, and has forked nothing for an execution yet). Nothing is
/// taken by a pid that may have been reused: `init_pid` must name a child of the helper (which
/// we have not reaped, and which forks nothing else), the child found a child of `init_pid`
/// once its pidfd is open, and init still alive after that (so it was that init's child).
/// Errors: init has no child or more than one, either process ended, or a pidfd cannot be
/// opened.
fn interpreter_pidfd(helper_pid: u32, init_pid: i32) -> Result<OwnedFd, String> {
    let init = sandbox_runtime::pidfd_open(init_pid).map_err(|e| format!("pidfd of the template's init {init_pid}: {e}"))?;
    if u32::try_from(init_pid).ok().and_then(sandbox_runtime::process::parent_of) != Some(helper_pid) {
        return Err(format!("the template's init {init_pid} ended during set-up"));
    }
    let path = format!("/proc/{init_pid}/task/{init_pid}/children");
    let kids = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let pid = match kids.split_whitespace().map(str::parse::<i32>).collect::<Result<Vec<_>, _>>().as_deref() {
        Ok([pid]) => *pid,
        _ => return Err(format!("the template's init has not one child but {kids:?}")),
    };
    let fd = sandbox_runtime::pidfd_open(pid).map_err(|e| format!("pidfd of the template's interpreter {pid}: {e}"))?;
    let parent = u32::try_from(pid).ok().and_then(sandbox_runtime::process::parent_of);
    // A pidfd turns readable when its process has exited.
    let mut exited = [nix::poll::PollFd::new(init.as_fd(), nix::poll::PollFlags::POLLIN)];
    let init_gone = nix::poll::poll(&mut exited, nix::poll::PollTimeout::ZERO).map_or(true, |n| n > 0);
    if parent != u32::try_from(init_pid).ok() || init_gone {
        return Err(format!("the template's interpreter {pid} ended as it got ready"));
    }
    Ok(fd)
}

/// The most children of the service's templates alive at once: the executions the service runs
/// at a time (`max_concurrency`, or its default) plus every template profile's children forked
/// ahead (`pool_size`). They all share one user namespace owner ([`SpawnSpec::template_children`]).
pub fn template_children(config: &sandbox_core::Config) -> u32 {
    let ahead: u32 = config.profiles.values().filter(|p| p.warm.mode == WarmMode::Template).map(|p| p.warm.pool_size).sum();
    crate::service::configured_slots(config).saturating_add(ahead)
}
