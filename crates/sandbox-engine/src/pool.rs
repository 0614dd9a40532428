//! Warm pools: pre-started single-use sandboxes for profiles whose `[warm] mode = "pool"`
//! (the built-in TypeScript profiles: Node cannot fork safely, so it cannot have a template).
//!
//! A pooled sandbox (a *member*) is a cold execution's sandbox made before its request:
//! `Prepared::new_member` makes its directory, uid, workspace tmpfs and cgroup with the
//! profile's limits; the helper builds its namespaces, root, landlock and seccomp exactly as for
//! a cold run, and execs the harness in `pool` mode, which imports the environment's `preload`
//! modules, says ready (one byte on the side channel) and blocks reading one byte on its
//! stdin. An execution takes a member (`Pools::checkout`), writes its inputs into the
//! workspace, its code and `_sandbox_run.json` (harness mode, the request's environment) into
//! the member's `code/` tmpfs (read-only at `/code` inside), and sends a newline (go) followed
//! by the request's stdin.
//! From there on it is supervised, collected and torn down like a cold run, and the member is
//! gone: nothing of one execution can reach another, because no sandbox serves twice.
//!
//! A `template` profile with a `pool_size` keeps a pool too, of children forked from its
//! template ahead of their requests (`Prepared::new_template_member`, the template's `fork
//! ahead`): each enters its sandbox as an execution's child does, says ready, and copies the
//! template's pages it shares under `SCHED_IDLE` while it waits; the engine writes the
//! execution's files into its `warm/code/` and lifts that policy right before its go
//! (ARCHITECTURE.md, "Children forked ahead").
//!
//! One filler thread keeps every pool at its `pool_size`: it starts one member at a time, at
//! most one per `pool_refill_interval_ms` (the rate cap: a burst that empties the pool runs
//! cold rather than compete with refills for the CPU), replaces members older than
//! `max_age_ms` or found dead, and backs off after a failed start. A member taken while
//! another stays ready is replaced once its execution has ended (`Refill`), at most
//! [`REFILL_DEFER_MAX`] after its checkout: a member's start (a helper exec'd, namespaces,
//! an interpreter importing its modules) took the CPU the execution that had just taken one
//! needed. A checkout that empties the pool starts its replacement at once. An empty pool
//! means a cold start; a pool never makes an execution fail. Shutdown destroys every member.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use sandbox_core::profile::WarmMode;
use sandbox_core::wire::WarmStart;
use sandbox_core::Admitted;
use sandbox_runtime::cgroup::Layout;
use sandbox_runtime::spec::Event;

use crate::prepare::Prepared;
use crate::spare::{IdleHelper, Reaped};
use crate::warm::{Checkout, Templates};
use crate::EngineOptions;

/// How long a member may take from spawn to ready (Node importing the environment's modules on
/// a busy 2-core host).
const READY_PATIENCE: Duration = Duration::from_secs(60);

/// How long a pool of template children waits before it looks again for a ready template.
const TEMPLATE_PATIENCE: Duration = Duration::from_millis(100);

/// The longest the replacement of a member waits for the execution that took it (`Refill`):
/// a long execution does not keep its pool short for its whole run.
pub const REFILL_DEFER_MAX: Duration = Duration::from_secs(1);

/// One profile's pool, for `doctor` and `/metrics`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    /// The profile.
    pub profile: String,
    /// Configured size (`pool_size`).
    pub size: u32,
    /// Its members are children forked from the profile's template ahead of their requests
    /// (else sandboxes with an interpreter of their own).
    pub prefork: bool,
    /// Members ready now.
    pub ready: u32,
    /// A member is being started now (the filler starts one at a time).
    pub starting: bool,
    /// Peak memory of the ready members' cgroups, summed, in bytes.
    pub memory_bytes: u64,
    /// Why the last start failed, if it did (cleared by a successful start).
    pub error: Option<String>,
    /// Executions that ran in one of its members, since start.
    pub hits: u64,
    /// Executions of its profile that found no member to take (or one that could not take
    /// them), since start: they forked from the template at their start (a template's pool) or
    /// started cold.
    pub misses: u64,
    /// Members started, since start.
    pub started: u64,
    /// Members destroyed unused (too old, found dead, shutdown), since start.
    pub discarded: u64,
}

/// The pools of every pool profile.
pub struct Pools {
    opts: EngineOptions,
    layout: Layout,
    /// The templates that fork the members of `template` profiles' pools.
    templates: Option<Arc<Templates>>,
    state: Mutex<HashMap<String, Pool>>,
    wake: Condvar,
    closing: AtomicBool,
    filler: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The token of the next deferred refill ([`Refill`]).
    next_token: AtomicU64,
}

struct Pool {
    size: u32,
    /// Members are children forked from the profile's template (else sandboxes of their own).
    forked: bool,
    preload: Vec<String>,
    ready: VecDeque<Member>,
    failures: u32,
    retry_at: Option<Instant>,
    error: Option<String>,
    /// Members taken while another stayed ready, whose executions still run (by [`Refill`]
    /// token, with their checkout time): the filler counts them as present until they end or
    /// [`REFILL_DEFER_MAX`] passes.
    deferred: HashMap<u64, Instant>,
    /// The filler is starting a member of this pool now.
    starting: bool,
    /// Its hits, misses, starts and discards since start ([`PoolStatus`]).
    tally: Tally,
}

/// One pool's counts since start, exported as metrics per profile.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    hits: u64,
    misses: u64,
    started: u64,
    discarded: u64,
}

impl Pool {
    /// Whether the filler should start a member now: fewer ready and deferred (within
    /// [`REFILL_DEFER_MAX`]) than the pool's size, and no back-off in force.
    fn wanting(&self, now: Instant) -> bool {
        let deferred = self.deferred.values().filter(|t| now.saturating_duration_since(**t) < REFILL_DEFER_MAX).count();
        self.ready.len() + deferred < self.size as usize && self.retry_at.is_none_or(|t| t <= now)
    }
}

/// Held by an execution that took a member while its pool kept another ready, until its result
/// is complete (it goes with the member's [`Prepared`] into the teardown, which hands it back;
/// `Engine::execute_admitted` drops it after the `finish` and the teardown): dropping it lets
/// the filler replace that member. So the replacement's start does not compete with the
/// execution for the CPU (on 2 cores a refill right at checkout added ~4 ms to a pooled
/// `print(1)` and ~15 ms to the TypeScript example, README "Performance").
pub(crate) struct Refill {
    pools: Weak<Pools>,
    profile: String,
    token: u64,
}

impl Drop for Refill {
    fn drop(&mut self) {
        if let Some(pools) = self.pools.upgrade() {
            if let Some(pool) = pools.state.lock().expect("pools lock").get_mut(&self.profile) {
                pool.deferred.remove(&self.token);
            }
            pools.wake.notify_all();
        }
    }
}

/// A pre-started sandbox waiting for its code.
pub(crate) struct Member {
    /// Its host state; an execution that takes it tears it down like a cold run's.
    prepared: Option<Prepared>,
    /// Its running helper and the engine's ends of its pipes (taken by the execution).
    pub(crate) launch: Option<MemberLaunch>,
    born: Instant,
    /// The installation of its environment and base it binds ([`crate::prepare::installation`]):
    /// a checkout that finds another one now discards it.
    installation: Vec<(u64, u64)>,
    /// Set at a checkout that left another member ready: the replacement waits for this one's
    /// execution ([`Refill`]).
    refill: Option<Refill>,
}

/// The running parts of a member: what the supervisor takes over.
pub(crate) struct MemberLaunch {
    /// The helper (it exits once the sandbox's init does); none for a template's child.
    pub(crate) helper: Reaped,
    /// What an execution started in it reports: [`WarmStart::Pool`] for a helper's sandbox;
    /// else a template's child, the sandbox's pid 1 (its pidfd is init's in the member's
    /// `Prepared`), forked ahead ([`WarmStart::Prefork`]) or for its execution
    /// ([`WarmStart::Template`], [`fork_member`]).
    pub(crate) how: WarmStart,
    /// The engine's end of the control socket; `Started` and `Spawned` were read already.
    pub(crate) ctl: UnixStream,
    /// Write end of the program's stdin: the go byte (a newline) goes first.
    pub(crate) stdin: OwnedFd,
    /// Read ends of stdout, stderr and the side channel (its ready byte consumed).
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
    pub(crate) side: OwnedFd,
    /// The landlock ABI in force, as `Spawned` reported it.
    pub(crate) landlock_abi: u32,
    /// An allowlist profile's network channel: the helper has sent the TUN device it made in
    /// the sandbox's network namespace on it. Nobody reads the device until an execution takes
    /// the member and starts its network (so the network report is the execution's alone);
    /// until then what the sandbox sends waits in the device's queue (dropped past it).
    pub(crate) net: Option<UnixStream>,
}

impl MemberLaunch {
    /// A template's child (its own init, no helper), forked ahead or for its execution.
    pub(crate) fn warm_child(&self) -> bool {
        self.how != WarmStart::Pool
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        // Unused: everything of it goes (init by pidfd, the cgroup, mounts, the directory).
        if let Some(p) = &self.prepared {
            p.stop_everything();
        }
        if let Some(mut l) = self.launch.take() {
            if let Some(mut h) = l.helper.0.take() {
                let _ = h.kill();
                let _ = h.wait();
            }
        }
    }
}

impl Member {
    /// Its host state and running parts, for the execution that took it.
    pub(crate) fn into_parts(mut self) -> (Prepared, MemberLaunch) {
        let mut prepared = self.prepared.take().expect("present until taken");
        if let Some(r) = self.refill.take() {
            prepared.refills.push(Box::new(r));
        }
        let launch = self.launch.take().expect("present until taken");
        (prepared, launch)
    }

    /// Its host state (to write the execution's inputs and code).
    pub(crate) fn prepared_mut(&mut self) -> &mut Prepared {
        self.prepared.as_mut().expect("present until taken")
    }

    fn alive(&mut self) -> bool {
        let Some(launch) = self.launch.as_mut() else { return false };
        match launch.helper.0.as_mut() {
            Some(h) => matches!(h.running(), Ok(true)),
            // A template's child: its sandbox's pid 1 has not ended (its pidfd is not readable).
            None => self.prepared.as_ref().and_then(|p| p.init.as_ref()).is_some_and(|fd| {
                let mut fds = [nix::poll::PollFd::new(fd.as_fd(), nix::poll::PollFlags::POLLIN)];
                matches!(nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO), Ok(0))
            }),
        }
    }
}

/// Lifts the `SCHED_IDLE` a template's child forked ahead waits under (copying the template's
/// pages it shares only when a CPU has nothing else to do): its execution runs under the normal
/// policy. Called right before its go byte is written, so that the child keeps yielding while
/// the execution's `begin` and files are written. Every process of the sandbox is
/// single-threaded until the go byte. Returns false when that failed (the child must then not
/// be started: nothing has run in it).
pub(crate) fn lift_idle(prepared: &Prepared) -> bool {
    match prepared.cgroup.as_ref().map(|c| c.pids()) {
        Some(Ok(pids)) => pids.into_iter().all(|pid| sandbox_runtime::sched_normal(pid).is_ok()),
        _ => false,
    }
}

impl Pools {
    /// Pools for the `pool` profiles of `opts.config` that `runnable` accepts (environment
    /// installed, runtime present), and for the `template` profiles with a `pool_size` whose
    /// template `templates` keeps, filled in the background from now on. `None` when there are
    /// none.
    /// Errors: the host has no usable cgroup layout.
    pub fn start(
        opts: EngineOptions,
        layout: Option<Layout>,
        templates: Option<Arc<Templates>>,
        runnable: impl Fn(&str) -> bool,
    ) -> Result<Option<Arc<Self>>, String> {
        let mut pools = HashMap::new();
        for (name, p) in &opts.config.profiles {
            let forked = p.warm.mode == WarmMode::Template && templates.as_ref().is_some_and(|t| t.serves(name));
            if !(p.warm.mode == WarmMode::Pool || forked) || p.warm.pool_size == 0 || !runnable(name) {
                continue;
            }
            let preload = p.environment.as_ref().and_then(|e| opts.config.environments.get(e)).map(|e| e.preload.clone()).unwrap_or_default();
            pools.insert(
                name.clone(),
                Pool {
                    size: p.warm.pool_size,
                    forked,
                    preload,
                    ready: VecDeque::new(),
                    failures: 0,
                    retry_at: None,
                    error: None,
                    deferred: HashMap::new(),
                    starting: false,
                    tally: Tally::default(),
                },
            );
        }
        if pools.is_empty() {
            return Ok(None);
        }
        let layout = layout.ok_or("no usable cgroup layout")?;
        let me = Arc::new(Self {
            opts,
            layout,
            templates,
            state: Mutex::new(pools),
            wake: Condvar::new(),
            closing: AtomicBool::new(false),
            filler: Mutex::new(None),
            next_token: AtomicU64::new(0),
        });
        let filler = Arc::clone(&me);
        let handle = std::thread::Builder::new().name("pool-filler".into()).spawn(move || filler.fill()).map_err(|e| format!("pool filler thread: {e}"))?;
        *me.filler.lock().expect("pool filler lock") = Some(handle);
        Ok(Some(me))
    }

    /// Whether `profile` has a pool.
    pub fn serves(&self, profile: &str) -> bool {
        self.state.lock().expect("pools lock").contains_key(profile)
    }

    /// A live member for `a`, if its profile has one ready and the request can run in it (its
    /// environment sets no variable the interpreter reads only at start, see
    /// [`crate::command::read_at_start`]). Counts a miss when there is none (a member taken is
    /// counted once the execution ran in it, [`Pools::ran_in_member`], or ended unstarted,
    /// [`Pools::ended_unstarted`]: so each count only grows, as the metrics' counters must);
    /// wakes the filler. Members
    /// found dead or too old are destroyed on the way (blocks briefly for each: call it off the
    /// async workers).
    pub(crate) fn checkout(self: &Arc<Self>, a: &Admitted) -> Option<Member> {
        let found = (|| {
            if a.env.keys().any(|k| crate::command::read_at_start(a.language, k)) {
                return None;
            }
            let max_age = Duration::from_millis(a.profile.warm.max_age_ms);
            // A member made before its environment was reinstalled (or rebuilt on a new image)
            // would run the execution on the old one: discarded as a stale one is. (Looked up
            // once a member is there to compare.)
            let mut installation = None;
            loop {
                // The deferral is entered with the pop, so the filler never sees the pool short
                // in between; a member found dead or too old gives it up.
                let (mut m, token) = {
                    let mut state = self.state.lock().expect("pools lock");
                    let pool = state.get_mut(&a.profile_name)?;
                    let m = pool.ready.pop_front()?;
                    let token = (!pool.ready.is_empty()).then(|| self.next_token.fetch_add(1, Ordering::Relaxed));
                    if let Some(t) = token {
                        pool.deferred.insert(t, Instant::now());
                    }
                    (m, token)
                };
                if let Some(token) = token {
                    m.refill = Some(Refill { pools: Arc::downgrade(self), profile: a.profile_name.clone(), token });
                }
                let now = installation.get_or_insert_with(|| crate::prepare::installation(&self.opts, &a.profile));
                if m.alive() && m.born.elapsed() < max_age && m.installation == *now {
                    return Some(m);
                }
                self.tally(&a.profile_name, |t| t.discarded += 1);
                drop(m);
            }
        })();
        let hit = found.is_some();
        if self.tally(&a.profile_name, |t| {
            if !hit {
                t.misses += 1
            }
        }) {
            self.wake.notify_all();
        }
        found
    }

    /// Accounts for a member of `profile`'s pool that was checked out but ended before its
    /// execution started in it, or could not take its files: a miss and a discard (the
    /// execution starts otherwise; the engine counts a cold fallback if it starts cold).
    pub(crate) fn ended_unstarted(&self, profile: &str) {
        self.tally(profile, |t| {
            t.misses += 1;
            t.discarded += 1;
        });
    }

    /// Accounts for an execution that ran in a member of `profile`'s pool it checked out: a hit.
    pub(crate) fn ran_in_member(&self, profile: &str) {
        self.tally(profile, |t| t.hits += 1);
    }

    /// Blocks until `profile`'s pool holds a ready member or `patience` passes (for
    /// `sandbox run --warm` and tests). Returns whether one is ready.
    /// Errors: the last start of a member failed.
    pub fn wait_ready(&self, profile: &str, patience: Duration) -> Result<bool, String> {
        let until = Instant::now() + patience;
        loop {
            {
                let state = self.state.lock().expect("pools lock");
                match state.get(profile) {
                    None => return Ok(false),
                    Some(p) if !p.ready.is_empty() => return Ok(true),
                    Some(p) if p.failures > 0 => return Err(p.error.clone().unwrap_or_default()),
                    Some(_) => {}
                }
            }
            if Instant::now() >= until {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Each pool's state.
    pub fn status(&self) -> Vec<PoolStatus> {
        let state = self.state.lock().expect("pools lock");
        let mut out: Vec<PoolStatus> = state
            .iter()
            .map(|(name, p)| PoolStatus {
                profile: name.clone(),
                size: p.size,
                prefork: p.forked,
                ready: u32::try_from(p.ready.len()).unwrap_or(u32::MAX),
                starting: p.starting,
                memory_bytes: p.ready.iter().filter_map(|m| m.prepared.as_ref()?.cgroup.as_ref()?.usage().ok()).map(|u| u.peak_memory_bytes).sum(),
                error: p.error.clone(),
                hits: p.tally.hits,
                misses: p.tally.misses,
                started: p.tally.started,
                discarded: p.tally.discarded,
            })
            .collect();
        out.sort_by(|a, b| a.profile.cmp(&b.profile));
        out
    }

    /// Counts in `profile`'s pool's [`Tally`]; `false` (nothing counted) for a profile without
    /// a pool.
    fn tally(&self, profile: &str, count: impl FnOnce(&mut Tally)) -> bool {
        let mut state = self.state.lock().expect("pools lock");
        let Some(p) = state.get_mut(profile) else { return false };
        count(&mut p.tally);
        true
    }

    /// Stops filling and destroys every waiting member (nothing of them is left: processes,
    /// cgroups, mounts, directories). Returns once that is done.
    pub fn shutdown(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.wake.notify_all();
        if let Some(h) = self.filler.lock().expect("pool filler lock").take() {
            let _ = h.join();
        }
        let members: Vec<Member> = self
            .state
            .lock()
            .expect("pools lock")
            .values_mut()
            .flat_map(|p| {
                p.tally.discarded += p.ready.len() as u64;
                p.ready.drain(..)
            })
            .collect();
        drop(members);
    }

    /// The filler: one member at a time, at most one per profile's refill interval.
    fn fill(self: Arc<Self>) {
        while !self.closing.load(Ordering::SeqCst) {
            self.discard_stale();
            let next = {
                let state = self.state.lock().expect("pools lock");
                let now = Instant::now();
                let mut wanting: Vec<(&String, &Pool)> = state.iter().filter(|(_, p)| p.wanting(now)).collect();
                // The emptiest pool first.
                wanting.sort_by_key(|(_, p)| p.ready.len());
                match wanting.first() {
                    Some((name, p)) => Some(((*name).clone(), p.preload.clone(), p.forked)),
                    None => {
                        // Nothing to do: sleep until a checkout or an execution's end wakes us, a
                        // pool may retry, a deferred refill is due, or a member ages.
                        let retry = state
                            .values()
                            .filter(|p| p.ready.len() < p.size as usize)
                            .filter_map(|p| p.retry_at)
                            .chain(state.values().flat_map(|p| p.deferred.values()).map(|t| *t + REFILL_DEFER_MAX).filter(|due| *due > now))
                            .min()
                            .map(|t| t.saturating_duration_since(now));
                        let nap = retry.unwrap_or(Duration::MAX).clamp(Duration::from_millis(10), Duration::from_secs(1));
                        let _ = self.wake.wait_timeout(state, nap);
                        None
                    }
                }
            };
            let Some((profile, preload, forked)) = next else { continue };
            let starting = |on: bool| {
                if let Some(pool) = self.state.lock().expect("pools lock").get_mut(&profile) {
                    pool.starting = on;
                }
            };
            // No ready template (starting, or replaced after it died): look again shortly,
            // without counting a failure (executions fork or start cold meanwhile).
            let template = if forked {
                let Some(template) = self.templates.as_ref().and_then(|t| t.checkout(&profile)) else {
                    if let Some(pool) = self.state.lock().expect("pools lock").get_mut(&profile) {
                        pool.retry_at = Some(Instant::now() + TEMPLATE_PATIENCE);
                    }
                    continue;
                };
                Some(template)
            } else {
                None
            };
            starting(true);
            // A panic in a start (a bug) counts as a failed start: the filler backs off and goes
            // on, rather than dying with `starting` set and its pools never refilled.
            let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match template {
                Some(template) => self.make_forked(&profile, template),
                None => self.make(&profile, &preload),
            }))
            .unwrap_or_else(|payload| {
                let what = payload.downcast_ref::<&str>().map(|s| (*s).to_owned()).or_else(|| payload.downcast_ref::<String>().cloned());
                Err(format!("starting a pooled sandbox panicked: {}", what.as_deref().unwrap_or("no message")))
            });
            let interval = self.opts.config.profiles.get(&profile).map_or(0, |p| p.warm.pool_refill_interval_ms);
            {
                let mut state = self.state.lock().expect("pools lock");
                let pool = state.get_mut(&profile).expect("pools are never removed");
                pool.starting = false;
                match made {
                    Ok(m) => {
                        pool.tally.started += 1;
                        pool.failures = 0;
                        pool.retry_at = None;
                        pool.error = None;
                        if self.closing.load(Ordering::SeqCst) {
                            drop(state);
                            drop(m);
                            break;
                        }
                        pool.ready.push_back(m);
                    }
                    // Stopped at shutdown while starting: not a failure.
                    Err(_) if self.closing.load(Ordering::SeqCst) => {}
                    Err(e) => {
                        pool.failures += 1;
                        pool.retry_at = Some(Instant::now() + backoff(pool.failures));
                        tracing::error!(profile = %profile, error = %e, "a pooled sandbox failed to start; executions run cold meanwhile");
                        pool.error = Some(e);
                    }
                }
            }
            // The rate cap.
            let until = Instant::now() + Duration::from_millis(interval);
            while Instant::now() < until && !self.closing.load(Ordering::SeqCst) {
                std::thread::sleep(until.saturating_duration_since(Instant::now()).min(Duration::from_millis(50)));
            }
        }
    }

    /// Destroys members that died or passed their profile's `max_age_ms`. A pool whose member
    /// died waiting backs off as after a failed start, so members that cannot stay alive are not
    /// remade in a loop.
    fn discard_stale(&self) {
        // Which installation of its environment each pool's profile binds now (file system
        // lookups: outside the lock).
        let names: Vec<String> = self.state.lock().expect("pools lock").iter().filter(|(_, p)| !p.ready.is_empty()).map(|(n, _)| n.clone()).collect();
        let installations: HashMap<String, Vec<(u64, u64)>> =
            names.into_iter().filter_map(|n| self.opts.config.profiles.get(&n).map(|p| crate::prepare::installation(&self.opts, p)).map(|i| (n, i))).collect();
        let stale: Vec<Member> = {
            let mut state = self.state.lock().expect("pools lock");
            let mut out = Vec::new();
            for (name, pool) in state.iter_mut() {
                let max_age = self.opts.config.profiles.get(name).map_or(Duration::MAX, |p| Duration::from_millis(p.warm.max_age_ms));
                let installation = installations.get(name);
                let mut keep = VecDeque::new();
                let before = pool.ready.len();
                for mut m in pool.ready.drain(..) {
                    if !m.alive() {
                        pool.failures += 1;
                        pool.retry_at = Some(Instant::now() + backoff(pool.failures));
                        pool.error = Some("a waiting sandbox died".into());
                        tracing::warn!(profile = %name, "a waiting pooled sandbox died; refilling after a back-off");
                        out.push(m);
                    } else if m.born.elapsed() >= max_age || installation.is_some_and(|i| *i != m.installation) {
                        // Too old, or made on an installation of its environment that another
                        // has replaced since (reinstalled, or rebuilt on a new image).
                        out.push(m);
                    } else {
                        keep.push_back(m);
                    }
                }
                pool.tally.discarded += (before - keep.len()) as u64;
                pool.ready = keep;
            }
            out
        };
        drop(stale);
    }

    /// Starts one member of `profile` and waits until its harness is ready.
    fn make(&self, profile_name: &str, preload: &[String]) -> Result<Member, String> {
        let profile = self.opts.config.profiles.get(profile_name).ok_or("profile vanished")?;
        let id = format!("pool-{}", uuid::Uuid::now_v7());
        let installation = crate::prepare::installation(&self.opts, profile);
        let prepared = Prepared::new_member(&self.opts, &self.layout, &id, profile, preload).map_err(|e| sandbox_runtime::selftest::chain(&e))?;
        let allowlist = matches!(profile.network, sandbox_core::network::Network::Allowlist(_));
        let idle = IdleHelper::spawn(&self.opts.helper, allowlist).map_err(|e| e.message())?;
        let helper_pid = idle.helper.pid();
        // From here on, dropping the member kills and reaps everything of it.
        let member = Member {
            prepared: Some(prepared),
            launch: Some(MemberLaunch {
                helper: idle.helper,
                how: WarmStart::Pool,
                ctl: idle.ctl,
                stdin: idle.stdin,
                stdout: idle.stdout,
                stderr: idle.stderr,
                side: idle.side,
                landlock_abi: 0,
                net: idle.net,
            }),
            born: Instant::now(),
            installation,
            refill: None,
        };
        Self::await_ready(member, Some(helper_pid), READY_PATIENCE)
    }

    /// Forks one member of the `template` profile `profile_name` from `template` and waits
    /// until it is sandboxed and ready.
    fn make_forked(&self, profile_name: &str, template: Checkout) -> Result<Member, String> {
        let profile = self.opts.config.profiles.get(profile_name).ok_or("profile vanished")?;
        let id = format!("pool-{}", uuid::Uuid::now_v7());
        // Copies while waiting stay within half its memory limit: the rest is the execution's.
        fork_member(&self.opts, &self.layout, &id, profile, template, profile.limits.memory_max_bytes / 2, WarmStart::Prefork, READY_PATIENCE)
    }

    /// Sends a started member its spawn spec, follows its set-up to `Spawned`, and waits for its
    /// harness's ready byte. `helper`: a helper's member, whose helper (this pid) reports its
    /// init's host pid in `Started`; `None`: a template's child, its own init, whose pidfd the
    /// member holds already.
    fn await_ready(mut member: Member, helper: Option<Option<i32>>, patience: Duration) -> Result<Member, String> {
        let for_helper = member.launch.as_ref().is_some_and(|l| !l.warm_child());
        let frame = crate::prepare::spec_frame(&mut member.prepared_mut().spec, for_helper);
        let launch = member.launch.as_mut().expect("just made");
        (&launch.ctl).write_all(&frame).map_err(|e| format!("sending the spec: {e}"))?;
        launch.ctl.set_read_timeout(Some(patience)).map_err(|e| e.to_string())?;
        let mut events = BufReader::new(launch.ctl.try_clone().map_err(|e| e.to_string())?);
        let mut init_pid = None;
        loop {
            let mut l = String::new();
            match events.read_line(&mut l) {
                Ok(0) | Err(_) => return Err("the pooled sandbox ended during set-up".into()),
                Ok(_) => match serde_json::from_str::<Event>(&l) {
                    Ok(Event::Started { init_pid: pid }) => init_pid = Some(pid),
                    Ok(Event::Spawned { landlock_abi }) => {
                        launch.landlock_abi = landlock_abi;
                        break;
                    }
                    Ok(Event::Failed { step, message }) => return Err(format!("set-up failed at {step}: {message}")),
                    _ => {}
                },
            }
        }
        // Nothing was buffered past `Spawned`: the next event is the program's exit, read by
        // the supervisor on the same socket.
        if !events.buffer().is_empty() {
            return Err("unexpected events after spawn".into());
        }
        launch.ctl.set_read_timeout(None).map_err(|e| e.to_string())?;
        wait_ready_byte(launch.side.as_fd(), patience)?;
        if let Some(helper_pid) = helper {
            member.prepared_mut().set_init(init_pid, helper_pid);
        }
        Ok(member)
    }
}

/// A child of `template` (a template of `profile`), its execution directory `id`, forked and
/// sandboxed before it gets anything of an execution: sent its spec, followed to `Spawned`, and
/// its harness's ready byte read. It then waits for its go byte, copying meanwhile up to
/// `ahead_bytes` of the template's pages a job writes (0: none, for a child forked for an
/// execution that waits for it). The template sees only the empty `code/` (the harness) and
/// workspace: the execution's code, environment and inputs are written by
/// [`Prepared::fill_member`] once the child is forked, so no request reaches the template.
/// `how`: what an execution started in it reports ([`WarmStart::Prefork`] for a pool's member,
/// [`WarmStart::Template`] for a child forked for its execution). Blocks (the fork, then the
/// child's set-up, `patience` at most for each of its two steps).
/// Errors: the host state, the fork or the child's set-up failed or took longer (a message).
#[allow(clippy::too_many_arguments)]
pub(crate) fn fork_member(
    opts: &EngineOptions,
    layout: &Layout,
    id: &str,
    profile: &sandbox_core::Profile,
    template: Checkout,
    ahead_bytes: u64,
    how: WarmStart,
    patience: Duration,
) -> Result<Member, String> {
    let prepared = Prepared::new_template_member(opts, layout, id, profile).map_err(|e| sandbox_runtime::selftest::chain(&e))?;
    // The child binds what its template binds.
    let installation = template.installation().to_vec();
    let (side_read, side_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    let request = crate::supervise::fork_fds(&prepared, side_write).map_err(|e| e.message())?;
    let child = request.fork(&template, ahead_bytes).map_err(|e| e.message())?;
    // Forked: a retirement of the template need not wait for this child to get ready.
    drop(template);
    let mut prepared = prepared;
    prepared.set_init_pidfd(child.pidfd);
    let member = Member {
        prepared: Some(prepared),
        launch: Some(MemberLaunch {
            helper: Reaped(None),
            how,
            ctl: child.ctl,
            stdin: child.stdin,
            stdout: child.stdout,
            stderr: child.stderr,
            side: side_read,
            landlock_abi: 0,
            net: None,
        }),
        born: Instant::now(),
        installation,
        refill: None,
    };
    Pools::await_ready(member, None, patience)
}

impl Drop for Pools {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// How long a pool waits after its `failures`-th failure in a row: 0.5 s doubling, at most ~1 min.
fn backoff(failures: u32) -> Duration {
    Duration::from_millis(500u64 << failures.min(7))
}

/// Reads the harness's ready byte ("R") from the side channel, waiting up to `patience`.
/// Errors: a timeout, EOF (the program ended) or another byte.
fn wait_ready_byte(side: std::os::fd::BorrowedFd<'_>, patience: Duration) -> Result<(), String> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let until = Instant::now() + patience;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("the harness was not ready within {} s", patience.as_secs()));
        }
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(side, PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => break,
            Err(e) => return Err(format!("poll: {e}")),
        }
    }
    let mut b = [0u8; 1];
    match nix::unistd::read(side, &mut b) {
        Ok(1) if b[0] == b'R' => Ok(()),
        Ok(0) => Err("the harness ended before it was ready".into()),
        Ok(_) => Err(format!("the harness said {:?} instead of ready", char::from(b[0]))),
        Err(e) => Err(format!("reading the ready byte: {e}")),
    }
}
