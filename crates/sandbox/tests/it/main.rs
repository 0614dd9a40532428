//! Integration tests of `sandbox run`: real namespaces, cgroups and processes. They run as root
//! (as CI does); without root they fail with a message saying so.
#![allow(missing_docs, clippy::print_stdout, clippy::print_stderr)] // test helpers

mod attacks;
mod audit;
mod bases;
mod basics;
mod cases;
mod deps;
mod docs;
mod doors;
mod environments;
mod examples;
mod files;
mod harness;
mod http;
mod http_attacks;
mod limits;
mod mcp;
mod network;
mod oci;
mod placement;
mod pool;
mod selftest;
mod spare;
mod timeouts;
mod warm;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Where the tests keep installed environments: shared between test runs (an environment's
/// directory is keyed by the hash of its spec, so a stale one is never used), so that only the
/// first run on a machine downloads them. `SANDBOX_TEST_ENVIRONMENTS` overrides it.
pub fn test_environments_dir() -> String {
    std::env::var("SANDBOX_TEST_ENVIRONMENTS").unwrap_or_else(|_| "/var/tmp/sandbox-test-environments".into())
}

/// The default `[runtime] uid_base` (the tests' configuration keeps it).
pub const UID_BASE: u32 = 1_900_000_000;

/// Profiles the tests use on top of the built-in ones.
pub const TEST_CONFIG: &str = r#"
[profiles.py-analysis-few-pids]
language = "python"
environment = "python-analysis"
[profiles.py-analysis-few-pids.limits]
memory_max_bytes = 1073741824
cpu_max = 2.0
pids_max = 12

[profiles.py-small]
language = "python"
[profiles.py-small.limits]
memory_max_bytes = 268435456
pids_max = 64
timeout_ms = 10000
grace_ms = 1000

[profiles.ts-small]
language = "typescript"
[profiles.ts-small.limits]
memory_max_bytes = 268435456
pids_max = 64
timeout_ms = 10000

# Node.js release lines (scripts/install-node.sh provisions 22, 24 and 26).
[profiles.ts-node22]
language = "typescript"
node = "22"

[profiles.ts-node24]
language = "typescript"
node = "24"
environment = "typescript-analysis"

# py-small on the built-in Debian trixie base (CPython 3.13): the isolation and limit tests run
# on it too (bases.rs).
[profiles.py313-small]
language = "python"
environment = "python-3.13-analysis"
[profiles.py313-small.limits]
memory_max_bytes = 268435456
pids_max = 64
timeout_ms = 10000
grace_ms = 1000

[profiles.py-half-cpu]
language = "python"
[profiles.py-half-cpu.limits]
cpu_max = 0.5

[profiles.py-flood]
language = "python"
[profiles.py-flood.output]
stdout_max_bytes = 1048576
stop_at_limit = false

[profiles.py-two-files]
language = "python"
[profiles.py-two-files.output]
files_max_count = 2

[profiles.py-ro-inputs]
language = "python"
[profiles.py-ro-inputs.filesystem]
inputs_read_only = true

# Real-world cases (cases.rs): one profile per limits combination of shared/cases/real-world.jsonl;
# the timeout is passed per run with --timeout.
[profiles.cases-py-pids32]
language = "python"
[profiles.cases-py-pids32.limits]
pids_max = 32

[profiles.cases-py-pids16]
language = "python"
[profiles.cases-py-pids16.limits]
pids_max = 16

[profiles.cases-py-analysis-pids32]
language = "python"
environment = "python-analysis"
[profiles.cases-py-analysis-pids32.limits]
pids_max = 32

[profiles.cases-py-analysis]
language = "python"
environment = "python-analysis"

[profiles.cases-py-256m]
language = "python"
[profiles.cases-py-256m.limits]
memory_max_bytes = 268435456

[profiles.cases-ts-256m]
language = "typescript"
[profiles.cases-ts-256m.limits]
memory_max_bytes = 268435456
"#;

/// A scratch area shared by the tests: config file and data directory.
pub struct Env {
    pub dir: PathBuf,
    pub config: PathBuf,
    pub data: PathBuf,
    /// `dir/.alive`, flocked for this test process's life ([`sweep_scratch_areas`]).
    _alive: nix::fcntl::Flock<std::fs::File>,
}

/// Removes the scratch areas (`/tmp/sandbox-it-*`, ~20 MB each) that earlier test processes
/// left: the area of a process that has ended, whose `.alive` lock can be taken, or an area
/// without one (made before areas had it) untouched for 6 hours. A live process's area is left
/// alone (it holds its lock). The removal never crosses into another file system (a mount an
/// interrupted execution left stays, with the directory above it), and an error only leaves
/// the rest where it is.
fn sweep_scratch_areas() {
    let Ok(entries) = std::fs::read_dir("/tmp") else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_name().to_string_lossy().starts_with("sandbox-it-") || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let ended = match std::fs::File::options().write(true).open(path.join(".alive")) {
            Ok(f) => nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).is_ok(),
            Err(_) => entry.metadata().and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().is_ok_and(|age| age > Duration::from_secs(6 * 3600))),
        };
        if ended {
            if let Ok(meta) = std::fs::symlink_metadata(&path) {
                remove_on_device(&path, std::os::unix::fs::MetadataExt::dev(&meta));
            }
        }
    }
}

/// Removes `dir` and what it holds on device `dev`, never descending into a mount.
fn remove_on_device(dir: &Path, dev: u64) {
    use std::os::unix::fs::MetadataExt as _;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() && m.dev() == dev => remove_on_device(&path, dev),
                Ok(m) if m.is_dir() => {}
                Ok(_) => drop(std::fs::remove_file(&path)),
                Err(_) => {}
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// A turn at the host's `kernel.core_pattern`, through an `flock` on
/// `/run/sandbox-it-core_pattern.lock` shared by every test process: exclusive for a test that
/// sets the pattern (attacks.rs's `CorePatternGuard`), shared for one whose outcome depends on it
/// staying as the host has it.
pub fn core_pattern_turn(exclusive: bool) -> nix::fcntl::Flock<std::fs::File> {
    let lock = std::fs::File::options().create(true).truncate(false).write(true).open("/run/sandbox-it-core_pattern.lock").unwrap();
    let how = if exclusive { nix::fcntl::FlockArg::LockExclusive } else { nix::fcntl::FlockArg::LockShared };
    nix::fcntl::Flock::lock(lock, how).map_err(|(_, e)| e).expect("flock the core_pattern lock")
}

pub fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        assert!(nix::unistd::geteuid().is_root(), "these tests need root (real namespaces and cgroups), as CI has");
        sweep_scratch_areas();
        let dir = tempfile::Builder::new().prefix("sandbox-it-").tempdir_in("/tmp").unwrap().keep();
        let alive = std::fs::File::create(dir.join(".alive")).unwrap();
        let alive = nix::fcntl::Flock::lock(alive, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| e).expect("lock the scratch area");
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let config = dir.join("config.toml");
        // Host directories an administrator exposes: read-only data and a read-write share
        // writable by the sandboxes' group (host gid uid_base + 1000; each execution has
        // a uid of its own).
        let (ro, rw) = (dir.join("dataset"), dir.join("share"));
        std::fs::create_dir(&ro).unwrap();
        std::fs::write(ro.join("numbers.csv"), "1,2,3\n").unwrap();
        std::fs::create_dir(&rw).unwrap();
        nix::unistd::chown(&rw, Some(nix::unistd::Uid::from_raw(0)), Some(nix::unistd::Gid::from_raw(UID_BASE + 1000))).unwrap();
        std::fs::set_permissions(&rw, std::os::unix::fs::PermissionsExt::from_mode(0o775)).unwrap();
        let mounts = format!(
            "\n[profiles.py-mounts]\nlanguage = \"python\"\n[[profiles.py-mounts.filesystem.mounts]]\nhost = {:?}\nsandbox = \"/data\"\n\
             [[profiles.py-mounts.filesystem.mounts]]\nhost = {:?}\nsandbox = \"/mnt/share\"\nread_only = false\n",
            ro.display().to_string(),
            rw.display().to_string()
        );
        std::fs::write(&config, format!("{}{TEST_CONFIG}{mounts}{}", runtime_toml(), oci::oci_test_config())).unwrap();
        let data = dir.join("data");
        Env { dir, config, data, _alive: alive }
    })
}

/// The cgroup directories (v2's one; v1's memory, pids and cpu hierarchies') of host process
/// `pid` whose path contains one of `containing` (`"/sandbox/"`: under the service's cgroup;
/// `"pool-"`: a pooled sandbox's; `"template-"`: a template's).
pub fn cgroup_dirs_of(pid: i32, containing: &[&str]) -> Vec<PathBuf> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            let hierarchy = match controllers {
                "" => String::new(),
                c => c.split(',').find(|c| ["memory", "pids", "cpu", "cpuacct"].contains(c))?.to_owned(),
            };
            containing.iter().any(|c| path.contains(c)).then(|| PathBuf::from(format!("/sys/fs/cgroup/{hierarchy}{path}").replace("//", "/")))
        })
        .collect()
}

/// The `[runtime]` section of every test configuration: the defaults, with the shared
/// environments directory.
pub fn runtime_toml() -> String {
    format!("[runtime]\nenvironments_dir = {:?}\n", test_environments_dir())
}

/// Installs the built-in environments into [`test_environments_dir`] once per test process
/// (a no-op when an earlier run installed them). When one was built (its declaration changed),
/// `env gc` then removes the versions no declaration names: `env install` keeps them in a
/// `[runtime] environments_dir`, and this directory outlives the runs.
pub fn environments_installed() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let mut built = false;
        for name in ["python-analysis", "typescript-analysis"] {
            let out = sandbox(&["env", "install", name]).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "sandbox env install {name}: {stderr}");
            built |= !stderr.contains("installed already");
        }
        if built {
            let out = sandbox(&["env", "gc"]).output().unwrap();
            assert!(out.status.success(), "sandbox env gc: {}", String::from_utf8_lossy(&out.stderr));
        }
    });
}

/// The directory of `name`'s current version in [`test_environments_dir`] (its spec hash as
/// `sandbox env list` prints it): other versions may be there, kept by `env install` in a
/// shared directory.
pub fn installed_dir(name: &str) -> PathBuf {
    let out = sandbox(&["env", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    let spec = list
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.first() == Some(&name) && f.get(1) == Some(&"installed"))
        .and_then(|f| f.get(3).map(|s| (*s).to_owned()))
        .unwrap_or_else(|| panic!("{name} is not installed: {list}"));
    Path::new(&test_environments_dir()).join(format!("{name}-{spec}"))
}

/// Installs the built-in `python-3.13-analysis` environment and its Debian trixie base into
/// [`test_environments_dir`] once per test process (a no-op when an earlier run installed them;
/// the base's .debs are cached in `[runtime] apt_cache_dir`, the wheels in uv's cache).
pub fn debian_environment_installed() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let out = sandbox(&["env", "install", "python-3.13-analysis"]).output().unwrap();
        assert!(out.status.success(), "sandbox env install python-3.13-analysis: {}", String::from_utf8_lossy(&out.stderr));
    });
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_sandbox")
}

/// `sandbox --config TEST --data-dir TEST <args>`.
pub fn sandbox(args: &[&str]) -> Command {
    let e = env();
    let mut c = Command::new(bin());
    c.arg("--config").arg(&e.config).arg("--data-dir").arg(&e.data).args(args);
    c.env_remove("SANDBOX_LOG");
    c
}

/// `cmd` (its program, arguments, environment and directory) run with SIGINT at its default
/// action, as a terminal's foreground command has it (coreutils' `env --default-signal`). CI
/// starts the suite as a shell's background job, which ignores SIGINT, and the CLI leaves a
/// SIGINT it was started with ignored ignored: a test that sends SIGINT runs the CLI through
/// this. The child's pid is the CLI's (`env` execs it).
pub fn interruptible(cmd: &Command) -> Command {
    with_sigint("--default-signal=INT", cmd)
}

/// `cmd` run with SIGINT ignored, as a shell without job control starts a background job.
pub fn sigint_ignored(cmd: &Command) -> Command {
    with_sigint("--ignore-signal=INT", cmd)
}

fn with_sigint(flag: &str, cmd: &Command) -> Command {
    let mut c = Command::new("env");
    c.arg(flag).arg("--").arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        c.current_dir(dir);
    }
    c
}

/// The result of `sandbox run --json <args>`, with the CLI's exit status and wall time.
pub struct Run {
    pub json: Value,
    pub status: i32,
    pub elapsed: Duration,
    pub stderr: String,
}

impl Run {
    pub fn status(&self) -> &str {
        self.json["status"].as_str().unwrap_or("?")
    }
    pub fn stdout(&self) -> &str {
        self.json["stdout"].as_str().unwrap_or("")
    }
    pub fn stderr_of_program(&self) -> &str {
        self.json["stderr"].as_str().unwrap_or("")
    }
    pub fn file_bytes(&self, name: &str) -> Option<Vec<u8>> {
        use base64::Engine as _;
        let b = self.json["files"][name]["base64"].as_str()?;
        Some(base64::engine::general_purpose::STANDARD.decode(b).unwrap())
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {} in {:?}\n{}\nCLI stderr: {}", self.status, self.elapsed, serde_json::to_string_pretty(&self.json).unwrap(), self.stderr)
    }
}

/// Whether this test process runs executions warm: with `SANDBOX_TEST_WARM=1` every [`run`]
/// forks its Python execution from a template and takes a pooled sandbox for TypeScript
/// (`sandbox run --warm`); with `SANDBOX_TEST_WARM=prefork` a Python execution runs in a child
/// its template forked and sandboxed before the request (`--warm=prefork`); with
/// `SANDBOX_TEST_WARM=pool` both languages take a pooled sandbox (`--warm=pool`). So the
/// attack, limit, timeout, file and real-world-case tests prove each warm path as they prove
/// the cold one.
pub fn warm_mode() -> bool {
    warm_flag().is_some()
}

/// The `sandbox run` flag of [`warm_mode`], if any.
pub fn warm_flag() -> Option<&'static str> {
    match std::env::var("SANDBOX_TEST_WARM").as_deref() {
        Ok("1") => Some("--warm"),
        Ok("pool") => Some("--warm=pool"),
        Ok("prefork") => Some("--warm=prefork"),
        _ => None,
    }
}

/// Runs `code` under `profile` with extra CLI `args`, as JSON.
pub fn run(profile: &str, code: &str, args: &[&str]) -> Run {
    let mut all = vec!["run", "--json", "--profile", profile, "-c", code];
    if let Some(flag) = warm_flag() {
        all.push(flag);
    }
    all.extend_from_slice(args);
    let start = Instant::now();
    let out: Output = sandbox(&all).output().expect("sandbox runs");
    let elapsed = start.elapsed();
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)));
    let run = Run { json, status: out.status.code().unwrap_or(-1), elapsed, stderr: String::from_utf8_lossy(&out.stderr).into_owned() };
    assert_started_as_asked(&run);
    run
}

/// Under `SANDBOX_TEST_WARM`, asserts that `run` started the warm way asked for (when anything
/// ran and the profile could start warm at all).
#[track_caller]
pub fn assert_started_as_asked(run: &Run) {
    // Nothing ran, so nothing started warm or cold: TypeScript that does not transpile.
    let nothing_ran = run.status() == "error" && run.json.get("exitCode").is_none() && run.json.get("signal").is_none();
    if warm_mode() && !nothing_ran && !run.stderr.contains("cannot start warm") && !matches!(run.status(), "rejected" | "?") && run.json["timing"].is_object() {
        assert_eq!(run.json["timing"]["warm"], true, "SANDBOX_TEST_WARM is set but the execution started cold: {run:?}");
        if warm_flag() == Some("--warm=pool") {
            assert_eq!(run.json["timing"]["warmStart"], "pool", "SANDBOX_TEST_WARM=pool but the execution did not take a pooled sandbox: {run:?}");
        }
        if warm_flag() == Some("--warm=prefork") {
            // Python takes a pre-forked child, TypeScript a pooled sandbox; a fork at the start
            // would mean the pre-forked child was not used.
            assert_ne!(run.json["timing"]["warmStart"], "template", "SANDBOX_TEST_WARM=prefork but the execution did not take a pre-forked child: {run:?}");
        }
    }
}

/// Writes `content` to a fresh file in the scratch area and returns its path.
pub fn scratch_file(name: &str, content: &[u8]) -> PathBuf {
    let dir = tempfile::Builder::new().prefix("in-").tempdir_in(&env().dir).unwrap().keep();
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

/// Asserts the execution `id` left no cgroup, mount, directory or process on the host.
#[track_caller]
pub fn assert_gone(id: &str) {
    assert_gone_from(&env().data, id);
}

/// [`assert_gone`] for an execution (or template, or pooled sandbox) of the data directory `data`.
pub fn assert_gone_from(data: &Path, id: &str) {
    let dir = data.join("executions").join(id);
    assert!(!dir.exists(), "execution directory {} still exists", dir.display());
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mountinfo.contains(id), "a mount of {id} is still there");
    // v2: <own cgroup or its parent>/sandbox/<id> (nested placement) or /sys/fs/cgroup/sandbox/<id>;
    // v1: every hierarchy's /sys/fs/cgroup/<controller>/sandbox/<id>.
    let mut candidates = vec![Path::new("/sys/fs/cgroup/sandbox").join(id)];
    if let Some(own) = own_v2_cgroup() {
        candidates.push(own.join("sandbox").join(id));
        candidates.extend(own.parent().map(|p| p.join("sandbox").join(id)));
    }
    for h in std::fs::read_dir("/sys/fs/cgroup").unwrap().filter_map(Result::ok) {
        candidates.push(h.path().join("sandbox").join(id));
    }
    for cg in candidates {
        assert!(!cg.exists(), "cgroup {} still exists", cg.display());
    }
}

/// Asserts that a `sandbox` command ended by `sig` itself, as every interrupted one does after
/// its clean-up (a shell's `$?` is then 128+`sig`, and the shell stops a script running it).
pub fn assert_ended_by(status: std::process::ExitStatus, sig: nix::sys::signal::Signal, context: &str) {
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(status.signal(), Some(sig as i32), "{sig}: ended {status}, not by the signal: {context}");
}

/// The cgroup version the tests expect `enforcement.cgroup` to name: `SANDBOX_TEST_CGROUP` (the
/// v2 guest stage sets `v2`), else `v1` (the CI host is hybrid: v1 runs for real).
pub fn expected_cgroup_version() -> String {
    std::env::var("SANDBOX_TEST_CGROUP").unwrap_or_else(|_| "v1".into())
}

/// This process's cgroup directory on a v2-only host (`/sys/fs/cgroup/<0:: path>`), if any.
pub fn own_v2_cgroup() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    if text.lines().count() != 1 {
        return None;
    }
    let own = text.lines().find_map(|l| l.strip_prefix("0::"))?.trim().trim_start_matches('/');
    Some(Path::new("/sys/fs/cgroup").join(own))
}

/// A wall-clock bound of a test, stretched by `SANDBOX_TEST_TIME_FACTOR` (default 1): the v2
/// guest stage runs under QEMU's TCG, where Python starts ~25x slower, and sets 4. Only upper
/// bounds on wall time scale; statuses, signals and limits are asserted as everywhere.
pub fn slack(bound: Duration) -> Duration {
    let factor = std::env::var("SANDBOX_TEST_TIME_FACTOR").ok().and_then(|f| f.parse::<u32>().ok()).unwrap_or(1).max(1);
    bound * factor
}

/// Sends SIGSTOP to each of `pids` and returns once every thread of each is stopped (`T` in
/// `/proc/PID/task/TID/stat`) or gone. kill(2) returns once the signal is queued; a thread stops
/// when it next runs, which on a busy machine (this kind's kernel packs runnable tasks onto one
/// vCPU) can come after the test's next step: a pooled program that read its go byte in that gap
/// had started, as far as the engine could tell, and its execution rightly did not run again.
/// Panics after 30 s.
pub fn stop_and_wait(pids: &[i32]) {
    for pid in pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGSTOP);
    }
    let stopped = |pid: i32| {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return true };
        tasks.filter_map(Result::ok).all(|t| {
            // The state follows the command's closing parenthesis; a task gone meanwhile counts as stopped.
            std::fs::read_to_string(t.path().join("stat"))
                .map_or(true, |st| st.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with(['T', 't', 'Z', 'X'])))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pids.iter().all(|p| stopped(*p)) {
        assert!(Instant::now() < deadline, "not every thread of {pids:?} stopped within 30 s");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Host pids below `root` whose command line contains `needle`.
pub fn processes_below(root: u32, needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_string()];
    while let Some(pid) = stack.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for t in tasks.filter_map(Result::ok) {
            let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            stack.extend(kids.split_whitespace().map(str::to_owned));
        }
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cmdline.contains(needle) {
            out.push(pid.parse().unwrap());
        }
    }
    out
}
