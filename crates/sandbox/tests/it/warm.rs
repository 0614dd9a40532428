//! Warm starts through a real `sandbox serve`: executions forked from a template, at their start
//! (`py-warm`) or before their request (`py-analysis-warm`'s pre-forked child), keep every wall
//! a cold execution has, against each other and against the template, and the template survives
//! whatever a child does. (The attack, limit, timeout, file and real-world-case suites also run
//! warm: `SANDBOX_TEST_WARM=1` and `=prefork`, see `run` in main.rs.)

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sandbox_core::{ExecutionRequest, ExecutionResult};

use super::http::Server;
use super::*;

/// Two warm profiles on top of the test profiles: a small one whose executions fork at their
/// start, and one with the analysis environment (numpy, pandas, matplotlib preloaded) that keeps
/// one child forked ahead, its memory limit (96 MiB) close to what its template holds (~90 MiB).
const WARM_PROFILES: &str = r#"
[profiles.py-warm]
language = "python"
[profiles.py-warm.limits]
memory_max_bytes = 268435456
pids_max = 64
timeout_ms = 10000
grace_ms = 500
[profiles.py-warm.warm]
mode = "template"
pool_size = 0

[profiles.py-cold]
language = "python"

[profiles.py-analysis-warm]
language = "python"
environment = "python-analysis"
[profiles.py-analysis-warm.limits]
memory_max_bytes = 100663296
[profiles.py-analysis-warm.warm]
mode = "template"
pool_size = 1
"#;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn req(profile: &str, code: &str) -> ExecutionRequest {
    ExecutionRequest { profile: profile.into(), code: code.into(), ..Default::default() }
}

fn exec(s: &Server, r: &ExecutionRequest) -> ExecutionResult {
    rt().block_on(s.client(None).execute(r)).unwrap_or_else(|e| panic!("{e:?}"))
}

/// A server whose warm profiles' templates are ready (each answered one warm execution).
fn warm_server() -> Server {
    environments_installed();
    let s = Server::start(WARM_PROFILES);
    for profile in ["py-warm", "py-analysis-warm"] {
        wait_warm(&s, profile);
    }
    s
}

fn wait_warm(s: &Server, profile: &str) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let r = exec(s, &req(profile, "pass"));
        assert_eq!(r.status.as_str(), "ok", "{r:?}");
        if r.timing.warm {
            return;
        }
        assert!(Instant::now() < deadline, "the template of {profile} never got ready");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs `code` warm and checks it was: the assertion every test here starts from.
#[track_caller]
fn warm(s: &Server, r: &ExecutionRequest) -> ExecutionResult {
    let out = exec(s, r);
    assert!(out.timing.warm, "expected a warm execution: {out:?}");
    out
}

#[test]
fn concurrent_warm_executions_cannot_see_each_others_files_processes_or_sockets() {
    let s = warm_server();
    let code = r#"
import os, socket, time
who = os.environ["WHO"]
other = "b" if who == "a" else "a"
open(f"/workspace/{who}.txt", "w").write(who)
open(f"/tmp/{who}.tmp", "w").write(who)
u = socket.socket(socket.AF_UNIX); u.bind("\0warm-test-" + who); u.listen()
t = socket.socket(); t.bind(("127.0.0.1", 4000)); t.listen()
time.sleep(1.5)
seen = [os.path.exists(f"/workspace/{other}.txt"), os.path.exists(f"/tmp/{other}.tmp")]
c = socket.socket(socket.AF_UNIX)
try:
    c.connect("\0warm-test-" + other); seen.append(True)
except OSError:
    seen.append(False)
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print(seen, pids, os.getuid())
"#;
    let with = |who: &str| {
        let mut r = req("py-warm", code);
        r.env = BTreeMap::from([("WHO".to_owned(), who.to_owned())]);
        r
    };
    let (a, b) = rt().block_on(async {
        let c = s.client(None);
        let (ra, rb) = (with("a"), with("b"));
        tokio::join!(c.execute(&ra), c.execute(&rb))
    });
    let (a, b) = (a.unwrap(), b.unwrap());
    let mut uids = Vec::new();
    for r in [&a, &b] {
        assert!(r.timing.warm && r.status.as_str() == "ok", "{r:?}");
        // Neither sees the other's workspace, /tmp or abstract socket; both bound port 4000
        // (separate network namespaces); each sees only itself in /proc (pid 3: the template is
        // pid 2 of its own sandbox, see warm::enter).
        let (seen, rest) = r.stdout.trim().split_once("] ").unwrap();
        assert_eq!(seen, "[False, False, False", "{r:?}");
        let (pids, uid) = rest.rsplit_once(' ').unwrap();
        assert_eq!(pids, "[3]", "{r:?}");
        uids.push(uid.to_owned());
    }
    assert_ne!(uids[0], uids[1], "each execution runs as a uid of its own");
}

#[test]
fn a_warm_child_cannot_signal_trace_or_read_the_template_or_a_sibling() {
    let s = warm_server();
    let attack = r#"
import ctypes, errno, os, signal
libc = ctypes.CDLL(None, use_errno=True)
others = []
for p in range(1, 5000):
    if p == os.getpid():
        continue
    try:
        os.kill(p, 0); others.append((p, "signalable"))
    except ProcessLookupError:
        pass
    except PermissionError:
        others.append((p, "EPERM"))
try:
    os.kill(-1, signal.SIGKILL); print("kill(-1) ok")
except OSError as e:
    print("kill(-1)", errno.errorcode[e.errno])
print(others)
for pid in (1, os.getppid()):
    r = libc.ptrace(16, pid, 0, 0)
    print("ptrace", pid, r, errno.errorcode.get(ctypes.get_errno()))
buf = ctypes.create_string_buffer(8)
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
local, remote = iovec(ctypes.addressof(buf), 8), iovec(0x400000, 8)
r = libc.process_vm_readv(1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
print("process_vm_readv", r, errno.errorcode.get(ctypes.get_errno()))
print(os.path.exists("/proc/1/mem"))
"#;
    let (sibling, attacker) = rt().block_on(async {
        let c = s.client(None);
        let sib = req("py-warm", "import time; time.sleep(2); print('alive')");
        let att = req("py-warm", attack);
        let (a, b) = tokio::join!(c.execute(&sib), async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            c.execute(&att).await
        });
        (a.unwrap(), b.unwrap())
    });
    assert!(attacker.timing.warm, "{attacker:?}");
    let lines: Vec<&str> = attacker.stdout.lines().collect();
    // Only pid 1 (its own init, another uid) exists in its pid namespace: nothing of the
    // template or the sibling can even be named.
    assert_eq!(lines[1], "[(1, 'EPERM')]", "{attacker:?}");
    // kill(-1) skips the caller and its own init: nothing else can be signalled, so nothing was.
    assert_eq!(lines[0], "kill(-1) ESRCH", "{attacker:?}");
    assert_eq!(lines[2], "ptrace 1 -1 EPERM", "seccomp refuses ptrace: {attacker:?}");
    assert!(lines[3].ends_with("-1 EPERM"), "{attacker:?}");
    assert_eq!(lines[4], "process_vm_readv -1 EPERM", "{attacker:?}");
    assert_eq!(lines[5], "False", "pid 1 is hidden from /proc");
    assert_eq!((sibling.status.as_str(), sibling.stdout.as_str()), ("ok", "alive\n"), "{sibling:?}");
    assert!(sibling.timing.warm);
    let after = warm(&s, &req("py-warm", "print('still serving')"));
    assert_eq!(after.stdout, "still serving\n");
}

/// Issue 11: a template is single-threaded whenever it forks (checked, not assumed: a fork
/// copies one thread, and another could hold a lock the child waits on forever). A profile
/// whose interpreter starts a thread as it starts (a `sitecustomize` module on its PYTHONPATH,
/// as a preloaded library that starts one at import would) gets no template: `doctor` says why,
/// and its executions run cold and succeed. Its twin, the same but for that thread, runs warm;
/// once its template starts a thread (on a SIGUSR1 the test sends it), the next fork is refused:
/// that execution runs cold, and a fresh template serves the one after.
#[test]
fn a_template_with_a_second_thread_never_forks_and_its_executions_run_cold() {
    let modules = tempfile::Builder::new().prefix("threads-").tempdir_in(&env().dir).unwrap().keep();
    let thread = "threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()";
    let sites = [("py-one-thread", format!("signal.signal(signal.SIGUSR1, lambda *_: {thread})\n")), ("py-two-threads", format!("{thread}\n"))];
    let mut config = String::new();
    for (name, start) in &sites {
        let dir = modules.join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("sitecustomize.py"), format!("import signal, threading, time\n{start}")).unwrap();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        config.push_str(&format!(
            "[profiles.{name}]\nlanguage = \"python\"\nenv = {{ PYTHONPATH = \"/opt/{name}\" }}\n[[profiles.{name}.filesystem.mounts]]\n\
             host = {:?}\nsandbox = \"/opt/{name}\"\n[profiles.{name}.warm]\nmode = \"template\"\npool_size = 0\n",
            dir.display().to_string()
        ));
    }
    std::fs::set_permissions(&modules, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let s = Server::start(&config);
    wait_warm(&s, "py-one-thread");
    let metric = |name: &str| {
        let metrics = reqwest::blocking::get(format!("{}/metrics", s.url)).unwrap().text().unwrap();
        let prefix = format!("{name} ");
        metrics.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("{metrics}")).trim().parse::<f64>().unwrap()
    };
    let code = "import threading; print(threading.active_count())";
    let before = metric("sandbox_warm_cold_fallbacks_total");
    for _ in 0..3 {
        let r = exec(&s, &req("py-two-threads", code));
        assert_eq!((r.status.as_str(), r.stdout.as_str(), r.timing.warm), ("ok", "2\n", false), "{r:?}");
    }
    assert_eq!(metric("sandbox_warm_cold_fallbacks_total") - before, 3.0, "each execution of the warm profile started cold");
    let r = warm(&s, &req("py-one-thread", code));
    assert_eq!((r.status.as_str(), r.stdout.as_str()), ("ok", "1\n"), "{r:?}");
    // The twin's template starts a thread after it said ready: its next fork is refused.
    let template: Vec<i32> = processes_below(s.pid(), "_sandbox_template.py")
        .into_iter()
        .filter(|p| std::fs::read(format!("/proc/{p}/environ")).is_ok_and(|e| e.split(|b| *b == 0).any(|v| v == b"PYTHONPATH=/opt/py-one-thread")))
        .collect();
    assert_eq!(template.len(), 1, "the template of py-one-thread: {template:?}");
    let proc_threads = || std::fs::read_dir(format!("/proc/{}/task", template[0])).map_or(0, Iterator::count);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(template[0]), nix::sys::signal::Signal::SIGUSR1).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while proc_threads() != 2 {
        assert!(Instant::now() < deadline, "the template did not start its thread");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (fallbacks, restarts) = (metric("sandbox_warm_cold_fallbacks_total"), metric("sandbox_warm_template_restarts_total"));
    let r = exec(&s, &req("py-one-thread", code));
    assert_eq!((r.status.as_str(), r.stdout.as_str(), r.timing.warm), ("ok", "1\n", false), "{r:?}");
    assert_eq!(metric("sandbox_warm_cold_fallbacks_total") - fallbacks, 1.0);
    wait_warm(&s, "py-one-thread");
    assert_eq!(metric("sandbox_warm_template_restarts_total") - restarts, 1.0, "a fresh template serves");
    // doctor (on a data directory of its own) names the reason.
    let data = tempfile::Builder::new().prefix("doctor-").tempdir_in(&env().dir).unwrap().keep();
    let out = Command::new(bin())
        .arg("--config")
        .arg(s.data.parent().unwrap().join("config.toml"))
        .arg("--data-dir")
        .arg(&data)
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let template = |name: &str| v["templates"].as_array().unwrap().iter().find(|t| t["profile"] == name).cloned().unwrap_or_else(|| panic!("no {name}: {v}"));
    let (ready, refused) = (template("py-one-thread"), template("py-two-threads"));
    assert!(ready["state"] == "ready" && ready["error"].is_null(), "{ready}");
    assert_ne!(refused["state"], "ready", "{refused}");
    assert!(refused["error"].as_str().is_some_and(|e| e.contains("2 threads after its imports")), "{refused}");
}

/// `sandbox doctor` on a running service's data directory reports that service's templates and
/// pools as they are now (state, forks, memory; its status socket), beside the ones it starts
/// for its own check; the socket is gone once the service has stopped, and one left by a
/// killed service is removed by the next `doctor`, which then reports no service and leaves
/// anything in the directory that is not a socket alone; a directory another user owns is
/// refused, not used.
#[test]
fn doctor_reports_a_running_services_templates_and_a_stopped_service_leaves_no_socket() {
    let mut s = warm_server();
    let r = warm(&s, &req("py-warm", "print(1)"));
    assert_eq!(r.stdout, "1\n");
    let config = s.data.parent().unwrap().join("config.toml");
    let doctor = |data: &Path| -> Value {
        let out = Command::new(bin()).arg("--config").arg(&config).arg("--data-dir").arg(data).args(["doctor", "--json"]).output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
    };
    let data = s.data.clone();
    let v = doctor(&data);
    let services = v["services"].as_array().unwrap_or_else(|| panic!("no services: {v}"));
    assert_eq!(services.len(), 1, "{v}");
    let service = &services[0];
    assert_eq!(service["pid"], s.pid(), "{service}");
    assert_eq!(service["command"], "serve");
    assert_eq!(format!("http://{}", service["listen"].as_str().unwrap()), s.url);
    let template =
        |name: &str| service["templates"].as_array().unwrap().iter().find(|t| t["profile"] == name).cloned().unwrap_or_else(|| panic!("no {name}: {service}"));
    let py = template("py-warm");
    // The service's own template: it has served the executions above (doctor's would have none).
    assert!(py["state"] == "ready" && py["forks"].as_u64().unwrap() >= 1 && py["peakMemoryBytes"].as_u64().unwrap() > 1 << 20, "{py}");
    assert_eq!(template("py-analysis-warm")["state"], "ready");
    let pool = service["pools"].as_array().unwrap().iter().find(|p| p["profile"] == "py-analysis-warm").cloned().unwrap_or_else(|| panic!("{service}"));
    assert!(pool["prefork"] == true && pool["size"] == 1 && pool["started"].as_u64().unwrap() >= 1, "{pool}");
    let sockets = s.data.join("services");
    let listed = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
        names.sort();
        names
    };
    let own = |names: Vec<String>, pid: u32| names.len() == 1 && names[0].starts_with(&format!("{pid}-")) && names[0].ends_with(".sock");
    assert!(own(listed(&sockets), s.pid()), "{:?}", listed(&sockets));
    assert!(s.terminate().success());
    assert!(listed(&sockets).is_empty(), "left by a stopped service: {:?}", listed(&sockets));
    // A killed service's socket stays until a doctor finds its connection refused. (Without
    // warm starts: a killed service's pools would stay on the host until a next start swept them.)
    let mut killed = Server::spawn(&config, data.clone(), &["--no-warm"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while listed(&sockets).is_empty() {
        assert!(Instant::now() < deadline, "the restarted service made no socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    killed.kill9();
    assert!(own(listed(&sockets), killed.pid()), "{:?}", listed(&sockets));
    std::fs::write(sockets.join("planted.sock"), "not a socket").unwrap();
    let v = doctor(&data);
    assert_eq!(v["services"], serde_json::json!([]), "{v}");
    assert_eq!(listed(&sockets), ["planted.sock"], "a killed service's socket was kept, or another file removed");
    // Another user's directory is neither used nor changed.
    std::os::unix::fs::chown(&sockets, Some(65534), None).unwrap();
    let v = doctor(&data);
    let refused = v["services"][0]["error"].as_str().unwrap_or_else(|| panic!("{v}"));
    assert!(refused.contains("owned by uid 65534"), "{refused}");
    assert_eq!(listed(&sockets), ["planted.sock"]);
}

/// A service that ran out of descriptors answers `doctor` again once it has them: its status
/// thread retries a failed `accept` (an attack review: the thread ended at its first error,
/// EMFILE, and the service was gone from `doctor` for as long as it ran).
#[test]
fn a_service_out_of_descriptors_answers_doctor_again_once_it_has_them() {
    use std::io::Read as _;
    let s = Server::start_with("", &["--no-warm"]);
    let sockets = s.data.join("services");
    let deadline = Instant::now() + Duration::from_secs(30);
    let socket = loop {
        let found =
            std::fs::read_dir(&sockets).ok().and_then(|d| d.filter_map(Result::ok).map(|e| e.path()).find(|p| p.extension().is_some_and(|x| x == "sock")));
        if let Some(found) = found {
            break found;
        }
        assert!(Instant::now() < deadline, "the service made no status socket");
        std::thread::sleep(Duration::from_millis(20));
    };
    let pid = s.pid();
    // prlimit(1) (util-linux, essential in Debian): the test crate has no unsafe code.
    let prlimit = |set: Option<&str>| -> String {
        let mut c = Command::new("prlimit");
        c.arg(format!("--pid={pid}"));
        match set {
            Some(v) => c.arg(format!("--nofile={v}")),
            None => c.args(["--nofile", "--raw", "--noheadings", "--output=SOFT,HARD"]),
        };
        let out = c.output().unwrap();
        assert!(out.status.success(), "prlimit: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let before = prlimit(None).split_whitespace().collect::<Vec<_>>().join(":");
    // No descriptor left: the limit is the lowest descriptor number /proc shows free. Linux's
    // accept(2) takes its new descriptor before it waits, so the status thread's waiting accept
    // holds that one already: the connection it then gets is answered, and the next accept fails.
    let open: std::collections::BTreeSet<usize> =
        std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    let open = (0..).find(|n| !open.contains(n)).unwrap();
    let hard = before.split(':').nth(1).unwrap().to_owned();
    prlimit(Some(&format!("{open}:{hard}")));
    let ask = |patience: Duration| {
        let c = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        c.set_read_timeout(Some(patience)).unwrap();
        c
    };
    let mut got = Vec::new();
    ask(Duration::from_secs(10)).read_to_end(&mut got).unwrap();
    assert!(!got.is_empty(), "the accept that was waiting answered nothing");
    let mut waiting = ask(Duration::from_millis(500));
    got.clear();
    let early = waiting.read_to_end(&mut got);
    assert!(early.is_err() && got.is_empty(), "answered while out of descriptors ({early:?}, {} bytes): the test proves nothing", got.len());
    prlimit(Some(&before));
    // The connection made meanwhile is answered, and so is the next doctor.
    waiting.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    waiting.read_to_end(&mut got).unwrap();
    let answered: Value = serde_json::from_slice(&got).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&got)));
    assert_eq!(answered["pid"], s.pid(), "{answered}");
    let config = s.data.parent().unwrap().join("config.toml");
    let out = Command::new(bin()).arg("--config").arg(&config).arg("--data-dir").arg(&s.data).args(["doctor", "--json"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(v["services"][0]["pid"], s.pid(), "{v}");
}

/// `sandbox_warm_cold_fallbacks_total` counts executions of warm profiles that started cold, not
/// those of a profile that is not warm (they start cold by design).
#[test]
fn a_profile_that_is_not_warm_counts_no_cold_fallback() {
    let s = warm_server();
    let fallbacks = || {
        let metrics = reqwest::blocking::get(format!("{}/metrics", s.url)).unwrap().text().unwrap();
        let line = metrics.lines().find(|l| l.starts_with("sandbox_warm_cold_fallbacks_total ")).unwrap_or_else(|| panic!("{metrics}")).to_owned();
        line.rsplit(' ').next().unwrap().parse::<f64>().unwrap()
    };
    let before = fallbacks();
    for _ in 0..2 {
        let r = exec(&s, &req("py-cold", "print('cold')"));
        assert_eq!((r.status.as_str(), r.stdout.as_str(), r.timing.warm), ("ok", "cold\n", false), "{r:?}");
    }
    assert_eq!(fallbacks(), before, "a profile that is not warm counted as a cold fallback");
}

#[test]
fn what_a_child_changes_in_its_modules_is_gone_for_the_next() {
    let s = warm_server();
    let poison = "import pandas, numpy, json, sys\npandas.read_csv = None\nnumpy.pi = 3\njson._poisoned = True\nsys.modules['evil'] = 1\n\
                  import matplotlib.pyplot as plt\nplt.rcParams['lines.linewidth'] = 42\nprint('poisoned')";
    assert_eq!(warm(&s, &req("py-analysis-warm", poison)).stdout, "poisoned\n");
    let check = "import pandas, numpy, json, sys\nimport matplotlib.pyplot as plt\n\
                 print(callable(pandas.read_csv), numpy.pi, hasattr(json, '_poisoned'), 'evil' in sys.modules, plt.rcParams['lines.linewidth'])";
    let r = warm(&s, &req("py-analysis-warm", check));
    assert_eq!(r.stdout, "True 3.141592653589793 False False 1.5\n", "{r:?}");
}

/// Every source of randomness a program reaches differs between children: the generators the
/// interpreter or a library seeds once (`random`, numpy's), the kernel's (`uuid4`, `secrets`),
/// and `tempfile`'s name generator, which reseeds itself only when the pid changes (a program
/// with the template's pid drew the template's names: the same in every execution).
#[test]
fn warm_children_draw_fresh_randomness() {
    let s = warm_server();
    let code = "import random, uuid, secrets, numpy, os, tempfile\n\
                print(random.random(), numpy.random.random(), uuid.uuid4(), secrets.token_hex(8), os.path.basename(tempfile.mkdtemp()), tempfile.NamedTemporaryFile(dir='/workspace').name)";
    let draws: Vec<Vec<String>> = (0..3).map(|_| warm(&s, &req("py-analysis-warm", code)).stdout.split_whitespace().map(str::to_owned).collect()).collect();
    for column in 0..6 {
        let values: std::collections::BTreeSet<&String> = draws.iter().map(|d| &d[column]).collect();
        assert_eq!(values.len(), 3, "column {column} repeats across children: {draws:?}");
    }
}

/// Every template's children run in user namespaces owned by one host uid, and the kernel counts
/// their inotify instances against that owner too (host limit `fs.inotify.max_user_instances`,
/// 128 by default): one execution that takes all it can must leave the others theirs. Execution
/// A (forked from one template) takes inotify instances until refused and holds them; B, forked
/// from the other template while A holds them (checked on their clocks), must still get one. A
/// gets exactly the share its namespace allows (`user.max_inotify_instances`), below the host's
/// limit.
#[test]
fn a_warm_execution_cannot_take_the_inotify_instances_of_the_others() {
    let s = warm_server();
    let host: u64 = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_instances").unwrap().trim().parse().unwrap();
    let take = "import ctypes, errno, time\nlibc = ctypes.CDLL(None, use_errno=True)\nfds, err = [], None\nwhile len(fds) < 100000:\n    \
                fd = libc.inotify_init1(0)\n    if fd < 0:\n        err = errno.errorcode[ctypes.get_errno()]\n        break\n    fds.append(fd)\n\
                print(len(fds), err, open('/proc/sys/user/max_inotify_instances').read().strip(), time.time(), flush=True)\ntime.sleep(4)\nprint(time.time())";
    let one = "import ctypes, errno, time\nlibc = ctypes.CDLL(None, use_errno=True)\nfd = libc.inotify_init1(0)\n\
               print(fd >= 0, errno.errorcode.get(ctypes.get_errno()) if fd < 0 else None, time.time())";
    let (a, b) = rt().block_on(async {
        let c = s.client(None);
        let (ra, rb) = (req("py-warm", take), req("py-analysis-warm", one));
        let a = c.execute(&ra);
        let b = async {
            // A has taken its instances well before this (a warm start takes milliseconds).
            tokio::time::sleep(Duration::from_millis(2000)).await;
            c.execute(&rb).await
        };
        tokio::join!(a, b)
    });
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a.timing.warm && b.timing.warm, "both must run warm: {a:?} {b:?}");
    let fields: Vec<&str> = a.stdout.split_whitespace().collect();
    let (taken, share): (u64, u64) = (fields[0].parse().unwrap(), fields[2].parse().unwrap());
    assert_eq!(fields[1], "EMFILE", "{a:?}");
    assert!(share < host, "a warm execution's namespace allows the host's whole {host} instances: {a:?}");
    assert_eq!(taken, share, "A took other than its share: {a:?}");
    let b_fields: Vec<&str> = b.stdout.split_whitespace().collect();
    assert_eq!(b_fields[..2], ["True", "None"], "an execution beside one that took all it could got no inotify instance: {b:?}");
    // B asked while A held its instances (the sandboxes' clocks are the host's), or it proved nothing.
    let (held_from, held_until, asked): (f64, f64, f64) = (fields[3].parse().unwrap(), fields[4].parse().unwrap(), b_fields[2].parse().unwrap());
    assert!(held_from < asked && asked < held_until, "B did not run while A held its instances: {a:?} {b:?}");
}

#[test]
fn a_child_past_its_memory_limit_ends_memory_limit_and_the_template_lives_on() {
    let s = warm_server();
    // 64 x 16 MiB, touched as it goes (bytearray zero-fills), against a 256 MiB limit.
    let r = warm(&s, &req("py-warm", "b = []\nfor _ in range(64):\n    b.append(bytearray(16 << 20))\nprint('never')"));
    assert_eq!((r.status.as_str(), r.oom_killed), ("memory_limit", true), "{r:?}");
    assert_eq!(warm(&s, &req("py-warm", "print('next')")).stdout, "next\n");
}

#[test]
fn fork_bombs_crashes_timeouts_and_kills_leave_the_template_serving() {
    let s = warm_server();
    let mut bomb = req("py-warm", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass");
    bomb.timeout = Some(2000);
    let r = warm(&s, &bomb);
    assert_eq!(r.status.as_str(), "timeout", "{r:?}");
    let r = warm(&s, &req("py-warm", "import ctypes\nctypes.string_at(0)"));
    assert_eq!((r.status.as_str(), r.signal), ("error", Some(11)), "{r:?}");
    let mut spin = req("py-warm", "while True: pass");
    spin.timeout = Some(1000);
    let r = warm(&s, &spin);
    assert_eq!((r.status.as_str(), r.timed_out), ("timeout", true), "{r:?}");
    let r = warm(&s, &req("py-warm", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"));
    assert_eq!((r.status.as_str(), r.signal), ("error", Some(9)), "{r:?}");
    let r = warm(&s, &req("py-warm", "print('still here')"));
    assert_eq!((r.status.as_str(), r.stdout.as_str()), ("ok", "still here\n"), "{r:?}");
}

/// A template forks at most `max_forks` times, even while its replacement is not ready: the
/// executions past its limit run cold (each counted once as a cold fallback) until the
/// replacement, started one fork before the limit (90% of it, at least one fork), serves. (A worn-out template used to fork on
/// until its replacement was ready, without bound if that replacement kept failing, and the
/// shared address layout and canaries of its children rest on its bounded life.) The profile
/// preloads the analysis environment, so its replacement takes seconds to be ready: longer
/// than the executions below.
#[test]
fn a_template_forks_at_most_max_forks_times_and_is_replaced() {
    environments_installed();
    let s = Server::start(
        "[profiles.py-recycle]\nlanguage = \"python\"\nenvironment = \"python-analysis\"\n[profiles.py-recycle.warm]\nmode = \"template\"\npool_size = 0\nmax_forks = 3\n",
    );
    let fallbacks = |s: &Server| -> u64 {
        let metrics = reqwest::blocking::get(format!("{}/metrics", s.url)).unwrap().text().unwrap();
        let line = metrics.lines().find(|l| l.starts_with("sandbox_warm_cold_fallbacks_total ")).unwrap_or_else(|| panic!("{metrics}")).to_owned();
        line.split(' ').nth(1).unwrap().parse().unwrap()
    };
    let templates = |s: &Server| -> Vec<i32> {
        let mut t = templates_below(s.pid());
        t.sort_unstable();
        t
    };
    // One fork: the execution wait_warm ends with.
    wait_warm(&s, "py-recycle");
    let (first, cold_before) = (templates(&s), fallbacks(&s));
    let runs: Vec<bool> = (0..4).map(|_| exec(&s, &req("py-recycle", "print(1)"))).map(|r| r.status.as_str() == "ok" && r.timing.warm).collect();
    assert_eq!(runs, [true, true, false, false], "forks 2 and 3 warm, then cold until the replacement is ready");
    assert_eq!(fallbacks(&s) - cold_before, 2, "each cold execution counted once");
    // Worn out, it is not reported ready while its replacement starts.
    let metrics = reqwest::blocking::get(format!("{}/metrics", s.url)).unwrap().text().unwrap();
    assert!(metrics.contains("sandbox_warm_template_ready{profile=\"py-recycle\"} 0"), "{metrics}");
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let metrics = reqwest::blocking::get(format!("{}/metrics", s.url)).unwrap().text().unwrap();
        if metrics.contains("sandbox_warm_template_restarts_total 1") && templates(&s) != first {
            break;
        }
        assert!(Instant::now() < deadline, "no replacement template: {metrics}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = exec(&s, &req("py-recycle", "print(1)"));
    assert_eq!((r.status.as_str(), r.timing.warm), ("ok", true), "the replacement serves: {r:?}");
}

/// A template that idles to 90% of its `max_age_ms` is replaced without a request, so the first
/// execution after an idle spell runs warm. (It was replaced at the next checkout only, and that
/// execution ran cold: the first data-analyst request after an idle hour.)
#[test]
fn an_idle_template_is_replaced_at_its_age_and_the_next_execution_runs_warm() {
    let s = Server::start("[profiles.py-aging]\nlanguage = \"python\"\n[profiles.py-aging.warm]\nmode = \"template\"\npool_size = 0\nmax_age_ms = 15000\n");
    wait_warm(&s, "py-aging");
    // The built-in warm profiles' templates too (an hour's age: none is replaced here).
    let templates = |s: &Server| -> Vec<i32> {
        let mut t = templates_below(s.pid());
        t.sort_unstable();
        t
    };
    let first = templates(&s);
    // No request from here on: the replacement comes on its own, and the old template ends.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let now = templates(&s);
        let metrics = reqwest::blocking::get(format!("{}/metrics", s.url)).unwrap().text().unwrap();
        if metrics.contains("sandbox_warm_template_restarts_total 1") && now.len() == first.len() && now.iter().filter(|p| !first.contains(p)).count() == 1 {
            assert!(metrics.contains("sandbox_warm_template_ready{profile=\"py-aging\"} 1"), "{metrics}");
            break;
        }
        assert!(Instant::now() < deadline, "the idle template was not replaced: {now:?} (first {first:?}) {metrics}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let r = exec(&s, &req("py-aging", "print(1)"));
    assert_eq!((r.status.as_str(), r.stdout.as_str(), r.timing.warm), ("ok", "1\n", true), "the replacement serves at once: {r:?}");
}

/// Host pids of the template interpreters below `root` (a server's pid): processes running the
/// template script whose parent is a template sandbox's init (our binary, argv0 `sandbox-init`);
/// a child the template forked (with its init and program) runs the same script under the
/// interpreter.
fn templates_below(root: u32) -> Vec<i32> {
    processes_below(root, "_sandbox_template.py").into_iter().filter(|p| parent_argv0(*p) == "sandbox-init").collect()
}

/// Host pids of the children templates below `root` forked (at an execution's start or ahead).
fn template_children_below(root: u32) -> Vec<i32> {
    let templates = templates_below(root);
    processes_below(root, "_sandbox_template.py").into_iter().filter(|p| templates.contains(&parent_pid(*p))).collect()
}

fn parent_pid(pid: i32) -> i32 {
    u32::try_from(pid).ok().and_then(sandbox_runtime::process::parent_of).and_then(|p| i32::try_from(p).ok()).unwrap_or(0)
}

fn parent_argv0(pid: i32) -> String {
    let cmdline = std::fs::read_to_string(format!("/proc/{}/cmdline", parent_pid(pid))).unwrap_or_default();
    cmdline.split('\0').next().unwrap_or_default().to_owned()
}

#[test]
fn killing_the_template_fails_nothing_and_sigterm_leaves_nothing_behind() {
    let mut s = warm_server();
    let server_pid = s.pid();
    for profile in ["py-analysis-warm", "python-analysis"] {
        wait_pool(&s, profile);
    }
    let templates = templates_below(server_pid);
    let mut template_cgroups: Vec<PathBuf> = templates.iter().flat_map(|p| cgroup_dirs_of(*p, &["template-", "pool-"])).collect();
    // py-warm, py-analysis-warm, python-analysis.
    assert_eq!(templates.len(), 3, "a template per warm profile: {templates:?}");
    // Children forked ahead wait (py-analysis-warm's, python-analysis's): one is killed while
    // it waits, as a crash or an OOM would end it.
    let waiting = template_children_below(server_pid);
    assert!(waiting.len() >= 2, "children forked ahead: {waiting:?}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(waiting[0]), nix::sys::signal::Signal::SIGKILL).unwrap();
    // A warm execution is running when every template interpreter is killed.
    let running = {
        let c = s.client(None);
        std::thread::spawn(move || rt().block_on(c.execute(&req("py-warm", "import time; time.sleep(1.5); print('finished')"))).map_err(|e| format!("{e:?}")))
    };
    std::thread::sleep(Duration::from_millis(500));
    for pid in &templates {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    }
    // Not started yet: runs (cold until a new template is ready), never fails.
    let r = exec(&s, &req("py-warm", "print('after the kill')"));
    assert_eq!((r.status.as_str(), r.stdout.as_str()), ("ok", "after the kill\n"), "{r:?}");
    // A child forked ahead by a killed template is a whole sandbox still, and one killed while
    // it waited is replaced: either way the execution runs (in it, forked, or cold).
    for profile in ["py-analysis-warm", "python-analysis"] {
        let r = exec(&s, &req(profile, "print('forked ahead')"));
        assert_eq!((r.status.as_str(), r.stdout.as_str()), ("ok", "forked ahead\n"), "{r:?}");
    }
    // Already running: its sandbox does not depend on the interpreter that forked it.
    let r = running.join().unwrap().unwrap();
    assert_eq!((r.status.as_str(), r.stdout.as_str(), r.timing.warm), ("ok", "finished\n", true), "{r:?}");
    // A new template takes over.
    wait_warm(&s, "py-warm");
    let metrics = reqwest::blocking::get(format!("{}/metrics", s.url)).unwrap().text().unwrap();
    assert!(metrics.contains("sandbox_warm_template_ready{profile=\"py-warm\"} 1"), "{metrics}");
    assert!(!metrics.contains("sandbox_warm_template_restarts_total 0"), "{metrics}");
    assert!(!metrics.contains("sandbox_warm_hits_total 0"), "{metrics}");
    template_cgroups.extend(templates_below(server_pid).into_iter().flat_map(|p| cgroup_dirs_of(p, &["template-", "pool-"])));
    assert!(!template_cgroups.is_empty());
    // The children forked ahead waiting now: their sandboxes' cgroups must go too.
    for profile in ["py-analysis-warm", "python-analysis"] {
        wait_pool(&s, profile);
    }
    let waiting = template_children_below(server_pid);
    let member_cgroups: Vec<PathBuf> = waiting.iter().flat_map(|p| cgroup_dirs_of(*p, &["template-", "pool-"])).collect();
    assert!(member_cgroups.iter().any(|c| c.to_string_lossy().contains("/pool-")), "{member_cgroups:?}");
    template_cgroups.extend(member_cgroups);
    let data = s.data.clone();
    assert!(s.terminate().success());
    // Nothing of the templates, their children or executions is left: processes, directories,
    // cgroups, mounts.
    assert!(templates_below(server_pid).is_empty());
    for pid in &waiting {
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "a child forked ahead ({pid}) is left");
    }
    let left: Vec<_> = std::fs::read_dir(data.join("executions")).map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "left in the executions directory: {left:?}");
    for cg in &template_cgroups {
        assert!(!cg.exists(), "cgroup {} is left", cg.display());
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mountinfo.contains(data.to_str().unwrap()), "a mount under {} is left", data.display());
}

/// The template process is never handed a request: the descriptors a fork request hands it (the execution's
/// workspace and `/code` as detached mounts, for the child to attach) hold nothing of the
/// execution yet: its code, environment and input files are written once the child is forked
/// (`pool::fork_member`). They used to be written before the fork, where a preloaded module
/// gone bad in the template could have read one execution's secrets and kept them. The
/// template's interpreter is stopped at each of its system calls (ptrace) while it takes the
/// fork request of py-warm's execution (forked at its start), and at each stop the test lists,
/// as host root, every directory its descriptors lead to (`/proc/PID/fd/N`).
#[test]
fn a_template_is_handed_nothing_of_the_request_it_forks_for() {
    use nix::sys::ptrace;
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    use nix::unistd::Pid;
    use sandbox_core::wire::FileContent;
    let s = warm_server();
    let interpreter = Pid::from_raw(bare_template_below(s.pid()));
    ptrace::seize(interpreter, ptrace::Options::PTRACE_O_TRACESYSGOOD).unwrap();
    ptrace::interrupt(interpreter).unwrap();
    assert!(matches!(waitpid(interpreter, Some(WaitPidFlag::__WALL)), Ok(WaitStatus::PtraceEvent(..))));
    let mut r = req("py-warm", "import os; print(open('secret-input.txt').read(), os.environ['SECRET_VAR'])");
    r.files.insert("secret-input.txt".into(), FileContent::Text("hunter2-file".into()));
    r.env.insert("SECRET_VAR".into(), "hunter2-env".into());
    let running = {
        let c = s.client(None);
        std::thread::spawn(move || rt().block_on(c.execute(&r)).map_err(|e| format!("{e:?}")))
    };
    // Names in the directories the template's descriptors lead to, one level down.
    let listed = |pid: Pid| -> Vec<String> {
        let mut names = Vec::new();
        for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().filter_map(Result::ok) {
            for e in std::fs::read_dir(fd.path()).into_iter().flatten().filter_map(Result::ok) {
                names.push(e.file_name().to_string_lossy().into_owned());
                names.extend(std::fs::read_dir(e.path()).into_iter().flatten().filter_map(Result::ok).map(|f| f.file_name().to_string_lossy().into_owned()));
            }
        }
        names
    };
    let mut seen = std::collections::BTreeSet::new();
    let mut resume = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    // Each round resumes the stopped interpreter up to its next stop; the last one leaves it
    // running (in its `recvmsg`, waiting for the next request) once the execution has ended.
    'rounds: loop {
        assert!(Instant::now() < deadline, "the warm execution never ended");
        ptrace::syscall(interpreter, resume.take()).unwrap();
        loop {
            match waitpid(interpreter, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)).unwrap() {
                WaitStatus::StillAlive if running.is_finished() => break 'rounds,
                WaitStatus::StillAlive => std::thread::sleep(Duration::from_millis(1)),
                // A signal (a child's SIGCHLD) goes on to the interpreter.
                WaitStatus::Stopped(_, sig) => {
                    resume = Some(sig);
                    break;
                }
                WaitStatus::PtraceSyscall(_) | WaitStatus::PtraceEvent(..) => {
                    seen.extend(listed(interpreter));
                    break;
                }
                other => panic!("the template's interpreter: {other:?}"),
            }
        }
    }
    ptrace::interrupt(interpreter).unwrap();
    assert!(matches!(waitpid(interpreter, Some(WaitPidFlag::__WALL)), Ok(WaitStatus::PtraceEvent(..) | WaitStatus::PtraceSyscall(_))));
    ptrace::detach(interpreter, None).unwrap();
    let out = running.join().unwrap().unwrap();
    assert_eq!((out.status.as_str(), out.stdout.as_str(), out.timing.warm), ("ok", "hunter2-file hunter2-env\n", true), "{out:?}");
    // The test saw the trees (the harness is in /code from the start), and nothing else.
    assert!(seen.contains("_sandbox_harness.py"), "the fork request's trees were never seen: {seen:?}");
    for name in ["secret-input.txt", "_sandbox_run.json", "main.py", "input.json"] {
        assert!(!seen.contains(name), "the template was handed {name} of the execution: {seen:?}");
    }
}

/// An environment reinstalled while a service runs (`env remove`, then `env install`: a new
/// directory at the same path): the template and the pooled sandboxes made on the old one
/// serve no execution after it (each would see the old tree, its files deleted under it), and
/// executions run on the new one, cold until a template and members made on it are ready; the
/// template is replaced without waiting for a request. (The template kept forking on the old
/// tree until its `max_age_ms`.)
#[test]
fn an_environment_reinstalled_under_a_running_service_is_the_one_its_executions_see() {
    let name = format!("reinstalled{}x{}", std::process::id(), std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos());
    let decl = format!("[environments.{name}]\ndescription = \"no packages\"\n");
    let cli = |args: &[&str]| {
        let config = env().dir.join(format!("{name}.toml"));
        std::fs::write(&config, format!("{}{decl}", runtime_toml())).unwrap();
        let out = Command::new(bin()).arg("--config").arg(&config).args(args).output().unwrap();
        assert!(out.status.success(), "sandbox {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    // The marker file in the installed directory (the run sees it at /opt/sandbox/env/).
    let mark = |text: &str| {
        let dirs: Vec<PathBuf> = std::fs::read_dir(test_environments_dir())
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{name}-")))
            .collect();
        assert_eq!(dirs.len(), 1, "{dirs:?}");
        std::fs::write(dirs[0].join("marker.txt"), text).unwrap();
    };
    cli(&["env", "install", &name]);
    mark("first");
    let s = Server::start(&format!(
        "{decl}[profiles.{name}-tpl]\nlanguage = \"python\"\nenvironment = \"{name}\"\n[profiles.{name}-tpl.warm]\nmode = \"template\"\npool_size = 1\n\
         [profiles.{name}-pool]\nlanguage = \"python\"\nenvironment = \"{name}\"\n[profiles.{name}-pool.warm]\nmode = \"pool\"\npool_size = 1\n\
         [profiles.{name}-idle]\nlanguage = \"python\"\nenvironment = \"{name}\"\n[profiles.{name}-idle.warm]\nmode = \"template\"\npool_size = 0\n"
    ));
    // `-tpl` keeps a child forked ahead, whose refill finds the new installation; `-idle` forks
    // only for a request, so only its template's watch can.
    let profiles = [format!("{name}-tpl"), format!("{name}-pool"), format!("{name}-idle")];
    let read = "print(open('/opt/sandbox/env/marker.txt').read())";
    // The marker as a warm execution reads it (each pool holds one: waits for its refill).
    let warm_read = |p: &str| -> String {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let r = exec(&s, &req(p, read));
            assert_eq!(r.status.as_str(), "ok", "{p}: {r:?}");
            if r.timing.warm {
                return r.stdout;
            }
            assert!(Instant::now() < deadline, "{p} never ran warm: {r:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    for p in &profiles {
        assert_eq!(warm_read(p), "first\n");
    }
    cli(&["env", "remove", &name]);
    cli(&["env", "install", &name]);
    mark("second");
    // With no request, both templates are replaced on the new installation (`-idle`'s watch
    // looks every 5 s), so their next executions run warm on it.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let metrics = reqwest::blocking::get(format!("{}/metrics", s.url)).unwrap().text().unwrap();
        let ready = |p: &str| metrics.contains(&format!("sandbox_warm_template_ready{{profile=\"{p}\"}} 1"));
        if metrics.contains("sandbox_warm_template_restarts_total 2") && ready(&profiles[0]) && ready(&profiles[2]) {
            break;
        }
        assert!(Instant::now() < deadline, "the templates were not replaced on the new installation: {metrics}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let r = exec(&s, &req(&profiles[2], read));
    assert_eq!((r.status.as_str(), r.stdout.as_str(), r.timing.warm), ("ok", "second\n", true), "{r:?}");
    for p in &profiles {
        let r = exec(&s, &req(p, read));
        assert_eq!((r.status.as_str(), r.stdout.as_str()), ("ok", "second\n"), "{p}: {r:?}");
    }
    for p in &profiles {
        assert_eq!(warm_read(p), "second\n", "{p}, warm again on the new installation");
    }
    drop(s);
    cli(&["env", "remove", &name]);
}

/// A fork request that fails because the template's interpreter has just died (before the engine
/// has read that it did) must not touch the executions that interpreter forked: they run on,
/// re-parented to the template sandbox's init. The engine killed "init's only child" from /proc
/// after such a failure, by then a running execution's pid 1 (CI's flake of the test above, under
/// load). Made certain here: the thread that follows py-warm's template is held (ptrace) while
/// its interpreter dies and is reaped, so the next execution is sent to the dead template.
#[test]
fn a_fork_request_to_a_template_that_just_died_kills_no_running_execution() {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    use nix::unistd::Pid;
    let s = warm_server();
    let server_pid = s.pid();
    let children = |pid: i32| -> Vec<i32> {
        let kids = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        kids.split_whitespace().map(|p| p.parse().unwrap()).collect()
    };
    let interpreter = bare_template_below(server_pid);
    let init = parent_pid(interpreter);
    let follower: Vec<i32> = std::fs::read_dir(format!("/proc/{server_pid}/task"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "template-py-war"))
        .map(|t| t.file_name().to_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(follower.len(), 1, "the thread following py-warm's template: {follower:?}");
    let follower = Pid::from_raw(follower[0]);

    let running = {
        let c = s.client(None);
        std::thread::spawn(move || rt().block_on(c.execute(&req("py-warm", "import time; time.sleep(2); print('finished')"))).map_err(|e| format!("{e:?}")))
    };
    // Running: the template's child (the execution's pid 1) has forked the program.
    let deadline = Instant::now() + Duration::from_secs(60);
    let child = loop {
        if let Some(c) = children(interpreter).first().copied().filter(|c| !children(*c).is_empty()) {
            break c;
        }
        assert!(Instant::now() < deadline, "the warm execution never started");
        std::thread::sleep(Duration::from_millis(10));
    };
    nix::sys::ptrace::seize(follower, nix::sys::ptrace::Options::empty()).unwrap();
    nix::sys::ptrace::interrupt(follower).unwrap();
    assert!(matches!(waitpid(follower, Some(WaitPidFlag::__WALL)), Ok(WaitStatus::PtraceEvent(..))));
    nix::sys::signal::kill(Pid::from_raw(interpreter), nix::sys::signal::Signal::SIGKILL).unwrap();
    // Reaped by its init, which now parents the running execution's pid 1.
    while children(init) != [child] {
        assert!(Instant::now() < deadline, "init's children: {:?}", children(init));
        std::thread::sleep(Duration::from_millis(5));
    }
    let after = exec(&s, &req("py-warm", "print('after the kill')"));
    nix::sys::ptrace::detach(follower, None).unwrap();
    assert_eq!((after.status.as_str(), after.stdout.as_str(), after.timing.warm), ("ok", "after the kill\n", false), "{after:?}");
    let r = running.join().unwrap().unwrap();
    assert_eq!((r.status.as_str(), r.stdout.as_str(), r.timing.warm), ("ok", "finished\n", true), "{r:?}");
    wait_warm(&s, "py-warm");
}

/// Host pid of the interpreter of the template below `server` that preloads nothing (py-warm's
/// in [`WARM_PROFILES`], or a test server's only such profile).
fn bare_template_below(server: u32) -> i32 {
    let found = bare_templates_below(server);
    assert_eq!(found.len(), 1, "one template that preloads nothing: {found:?}");
    found[0]
}

/// Host pids of the interpreters of the templates below `server` that preload nothing (not the
/// built-in analysis profiles').
fn bare_templates_below(server: u32) -> Vec<i32> {
    let environ = |pid: i32| std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    templates_below(server).into_iter().filter(|p| environ(*p).split(|b| *b == 0).any(|v| v == b"SANDBOX_PRELOAD=")).collect()
}

/// `recvmsg(2)`'s system call number (/proc/PID/syscall's first field): where a template waits
/// for fork requests, and a fork request for its answer.
const RECVMSG: u32 = if cfg!(target_arch = "aarch64") { 212 } else { 47 };

/// Whether process `pid` (its main thread) is in system call `nr` now.
fn in_syscall(pid: i32, nr: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/syscall")).is_ok_and(|s| s.split(' ').next() == Some(&nr.to_string()))
}

/// Whether a thread of process `pid` other than the pool filler (which forks children ahead of
/// their requests) is in system call `nr` now (/proc/PID/task/TID/syscall).
fn a_thread_in_syscall(pid: u32, nr: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.filter_map(Result::ok).any(|t| {
        std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() != "pool-filler")
            && std::fs::read_to_string(t.path().join("syscall")).is_ok_and(|s| s.split(' ').next() == Some(&nr.to_string()))
    })
}

/// A stop and continue of the service (SIGSTOP and SIGCONT, as a freezer or a debugger's attach
/// does) while a fork request waits for the template's answer: the wait (a `recvmsg` on a socket
/// with a receive timeout, which the kernel fails with EINTR then, signal(7)) goes on, and the
/// execution runs warm. It used to be taken for the template's failure: the template was killed
/// and the execution ran cold.
#[test]
fn a_stop_and_continue_of_the_service_fails_no_fork() {
    let s = warm_server();
    let server_pid = s.pid();
    let interpreter = nix::unistd::Pid::from_raw(bare_template_below(server_pid));
    nix::sys::signal::kill(interpreter, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let running = {
        let c = s.client(None);
        std::thread::spawn(move || rt().block_on(c.execute(&req("py-warm", "print('forked')"))).map_err(|e| format!("{e:?}")))
    };
    // The fork request is sent and its answer awaited.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !a_thread_in_syscall(server_pid, RECVMSG) {
        assert!(Instant::now() < deadline, "no fork request waited for its answer");
        std::thread::sleep(Duration::from_millis(5));
    }
    let server = nix::unistd::Pid::from_raw(i32::try_from(server_pid).unwrap());
    nix::sys::signal::kill(server, nix::sys::signal::Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    nix::sys::signal::kill(server, nix::sys::signal::Signal::SIGCONT).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    nix::sys::signal::kill(interpreter, nix::sys::signal::Signal::SIGCONT).unwrap();
    let r = running.join().unwrap().unwrap();
    assert_eq!((r.status.as_str(), r.stdout.as_str(), r.timing.warm), ("ok", "forked\n", true), "{r:?}");
    assert!(Path::new(&format!("/proc/{interpreter}")).exists(), "the template was killed");
}

/// A template replaced (here near its fork limit: its replacement starts at 90% of it) while
/// executions that checked it out wait to fork: their forks go to it (its channel closes after
/// the last), and its retirement blocks nothing. It used to close the channel at once, under
/// the lock every execution's checkout takes, and waited there for the channel's own lock, held
/// by a fork waiting for its answer (up to 30 s): every execution of the service, cold ones
/// too, waited with it; and a checkout whose fork came after the close failed, its execution ran
/// cold and the template was killed.
#[test]
fn a_template_replaced_while_executions_wait_to_fork_serves_them_and_blocks_nothing() {
    const RETIRING: &str = r#"
[service]
max_concurrency = 4

[profiles.py-retiring]
language = "python"
[profiles.py-retiring.limits]
timeout_ms = 60000
[profiles.py-retiring.warm]
mode = "template"
pool_size = 0
max_forks = 20

[profiles.py-cold]
language = "python"
"#;
    let s = Server::start(RETIRING);
    // One fork: the execution wait_warm ends with; 17 more make 18, where the next checkout
    // starts a replacement and two more checkouts still fork from this one (19, 20).
    wait_warm(&s, "py-retiring");
    for _ in 0..17 {
        warm(&s, &req("py-retiring", "pass"));
    }
    let server_pid = s.pid();
    let deadline = Instant::now() + Duration::from_secs(60);
    // One template, ready (waiting for fork requests).
    let old = loop {
        let found = bare_templates_below(server_pid);
        if let [t] = found[..] {
            if in_syscall(t, RECVMSG) {
                break t;
            }
        }
        assert!(Instant::now() < deadline, "no settled template: {found:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let stop = |pid: i32, sig| nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).unwrap();
    stop(old, nix::sys::signal::Signal::SIGSTOP);
    let start = |code: &'static str| {
        let c = s.client(None);
        std::thread::spawn(move || rt().block_on(c.execute(&req("py-retiring", code))).map_err(|e| format!("{e:?}")))
    };
    // The first waits for the stopped template's answer, holding its channel; its checkout
    // started the replacement, which is held before it gets ready.
    let first = start("print('first')");
    let new = loop {
        if let Some(p) = bare_templates_below(server_pid).into_iter().find(|p| *p != old) {
            break p;
        }
        assert!(Instant::now() < deadline, "no replacement started");
        std::thread::sleep(Duration::from_millis(2));
    };
    stop(new, nix::sys::signal::Signal::SIGSTOP);
    // The second checks the old template out too, and waits for its channel.
    let second = start("print('second')");
    let warm_dirs = || {
        let dirs = std::fs::read_dir(s.data.join("executions")).map(|d| d.filter_map(Result::ok).collect::<Vec<_>>()).unwrap_or_default();
        dirs.iter().filter(|d| !d.file_name().to_string_lossy().starts_with("template-") && d.path().join("warm/code").exists()).count()
    };
    while warm_dirs() < 2 {
        assert!(Instant::now() < deadline, "the second execution never checked the template out");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The replacement gets ready (it waits for fork requests then) and the old one is retired.
    stop(new, nix::sys::signal::Signal::SIGCONT);
    while !in_syscall(new, RECVMSG) {
        assert!(Instant::now() < deadline, "the replacement never got ready");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Its start's thread reads its ready and retires the old one.
    std::thread::sleep(Duration::from_millis(500));
    // Nothing else waits for the old template.
    let cold = rt().block_on(async { tokio::time::timeout(Duration::from_secs(10), s.client(None).execute(&req("py-cold", "print('cold')"))).await });
    let cold = cold.expect("an execution of another profile waited for the retired template").unwrap();
    assert_eq!((cold.status.as_str(), cold.stdout.as_str()), ("ok", "cold\n"), "{cold:?}");
    stop(old, nix::sys::signal::Signal::SIGCONT);
    for (t, out) in [(first, "first\n"), (second, "second\n")] {
        let r = t.join().unwrap().unwrap();
        assert_eq!((r.status.as_str(), r.stdout.as_str(), r.timing.warm), ("ok", out, true), "{r:?}");
    }
    // The old template, its channel closed after the second fork, ends once its children have.
    while bare_templates_below(server_pid).contains(&old) {
        assert!(Instant::now() < deadline, "the retired template never ended");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A child forked ahead that dies between its checkout and its go byte (stopped, so alive at
/// checkout, then killed while the execution waits on it) ran nothing of the execution: the
/// execution runs cold and succeeds, and the profile forks ahead again.
#[test]
fn a_child_forked_ahead_that_dies_before_its_go_leaves_the_execution_to_run_cold() {
    let s = warm_server();
    let profile = "py-analysis-warm";
    wait_pool(&s, profile);
    // Only children forked ahead (each in a pid namespace of its own, unlike its template), with
    // what runs below them: not a template's page probe (a child in the template's own
    // namespaces), which a template still starting waits for (the one failure this test had,
    // an execution that ended without reporting an exit, came with such a probe stopped and
    // killed). The stop is waited for: a child that had not yet stopped when the execution
    // came read its go byte, and its execution ended without an exit, rightly not run again.
    let ns = |pid: i32| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let stopped: Vec<i32> = template_children_below(s.pid())
        .into_iter()
        .filter(|c| ns(*c).is_some() && ns(*c) != ns(parent_pid(*c)))
        .flat_map(|c| processes_below(u32::try_from(c).unwrap(), ""))
        .collect();
    assert!(!stopped.is_empty());
    let signal = |sig| {
        for pid in &stopped {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), sig);
        }
    };
    stop_and_wait(&stopped);
    let r = req(profile, "import pandas\nprint('ran', pandas.DataFrame({'a': [6]}).a.sum() * 7)");
    let out = std::thread::scope(|scope| {
        let run = scope.spawn(|| exec(&s, &r));
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!run.is_finished(), "the execution waits on a stopped child forked ahead");
        signal(nix::sys::signal::Signal::SIGKILL);
        run.join().unwrap()
    });
    assert_eq!((out.status.as_str(), out.stdout.as_str()), ("ok", "ran 42\n"), "{out:?}");
    assert_eq!(out.timing.warm_start, None, "it ran cold: {out:?}");
    wait_pool(&s, profile);
    let again = warm(&s, &req(profile, "print('again')"));
    assert_eq!((again.stdout.as_str(), again.timing.warm_start), ("again\n", Some(sandbox_core::wire::WarmStart::Prefork)), "{again:?}");
}

/// A warm child's BLAS runs the profile's thread count (python-analysis: cpu_max 2), as a cold
/// run's does from OPENBLAS_NUM_THREADS, though its template's is single-threaded; the
/// template's OpenBLAS settings (`OPENBLAS_THREAD_TIMEOUT`: idle workers sleep at once, so none
/// spins while the child copies pages) do not reach the program's environment.
#[test]
fn a_warm_child_gets_the_profiles_blas_threads_and_not_the_templates_environment() {
    environments_installed();
    let code = "import ctypes, os, numpy\n\
                lib = [l.split()[-1] for l in open('/proc/self/maps') if 'openblas' in l and l.rstrip().endswith('.so')][0]\n\
                blas = ctypes.CDLL(lib)\n\
                get = next(getattr(blas, n) for n in ('scipy_openblas_get_num_threads64_', 'openblas_get_num_threads64_', 'openblas_get_num_threads') if hasattr(blas, n))\n\
                print(get(), os.environ.get('OPENBLAS_NUM_THREADS'), 'OPENBLAS_THREAD_TIMEOUT' in os.environ)";
    for warm in [None, Some("--warm"), Some("--warm=prefork")] {
        let mut args = vec!["run", "--json", "--profile", "python-analysis", "-c", code];
        args.extend(warm);
        let out = sandbox(&args).output().unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!((json["stdout"].as_str(), json["timing"]["warm"].as_bool()), (Some("2 2 False\n"), Some(warm.is_some())), "{json:#}");
    }
}

/// Blocks until `profile`'s pool holds a child forked ahead (the `/metrics` gauge).
fn wait_pool(s: &Server, profile: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let ready = format!("sandbox_warm_pool_ready{{profile=\"{profile}\"}} 1");
    while !reqwest::blocking::get(format!("{}/metrics", s.url)).unwrap().text().unwrap().contains(&ready) {
        assert!(Instant::now() < deadline, "no child of {profile} was forked ahead");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A child forked ahead of its request waits under SCHED_IDLE and copies meanwhile the template's
/// pages that a job writes (charged to its own cgroup, so to the execution's memory), at most
/// half its memory limit (so a template near the limit cannot make it OOM); the execution then
/// runs under the normal policy and priority, with its own stdin.
#[test]
fn a_child_forked_ahead_copies_the_templates_pages_while_idle_and_runs_at_normal_priority() {
    let s = warm_server();
    // Private_Dirty: the template's pages this child copied (and what it wrote of its own);
    // Shared_Dirty: the template's pages it still shares.
    let code = "import os, sys\n\
                kib = {l.split(':')[0]: int(l.split()[1]) for l in open('/proc/self/smaps_rollup') if l.endswith('kB\\n')}\n\
                print(os.sched_getscheduler(0), os.nice(0), kib['Private_Dirty'] >> 10, kib['Shared_Dirty'] >> 10, sys.stdin.read())";
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        wait_pool(&s, "py-analysis-warm");
        // Idle CPU time to copy in (a busy CI host may give it none: then try again).
        std::thread::sleep(Duration::from_secs(2));
        let mut r = req("py-analysis-warm", code);
        r.stdin = Some(sandbox_core::wire::FileContent::Text("its own stdin".into()));
        let out = warm(&s, &r);
        assert_eq!((out.status.as_str(), out.timing.warm_start), ("ok", Some(sandbox_core::wire::WarmStart::Prefork)), "{out:?}");
        let fields: Vec<&str> = out.stdout.split_whitespace().collect();
        assert_eq!((fields[0], fields[1], fields[4..].join(" ").as_str()), ("0", "0", "its own stdin"), "SCHED_OTHER, nice 0: {out:?}");
        let (copied_mib, shared_mib): (u64, u64) = (fields[2].parse().unwrap(), fields[3].parse().unwrap());
        if copied_mib >= 16 {
            assert!(out.resource_usage.peak_memory_bytes >= copied_mib << 20, "the copies count against the execution's memory: {out:?}");
            // Only the pages the template's probe saw a job write (~25 of ~73 MiB for pandas and
            // matplotlib): most of the template stays shared. Copying every shared page (up to
            // half the memory limit, 48 MiB) left less shared than copied.
            assert!(shared_mib > copied_mib, "copied pages no job writes: {out:?}");
            assert!(copied_mib <= 48 + 16, "copied past half the memory limit: {out:?}");
            break;
        }
        assert!(Instant::now() < deadline, "no child forked ahead copied the template's pages: {out:?}");
    }
}

/// A template measures the pages a job writes with a probe, a fork of its own that runs the
/// warm-up once more; the probe's copies are charged to the template's cgroup. At a template
/// memory limit the template fits in but the probe's copies do not (100 MiB for the analysis
/// environment: ~74 MiB held, ~26 MiB copied), the kernel's OOM killer must end the probe and
/// never the template: it still gets ready and serves (its children forked ahead copy every
/// shared page instead). Before the probe raised its own OOM score, the template was killed at
/// every start and the profile never ran warm.
#[test]
fn a_template_whose_probe_overflows_its_memory_limit_still_serves() {
    environments_installed();
    let s = Server::start(
        r#"
[profiles.py-analysis-tight]
language = "python"
environment = "python-analysis"
[profiles.py-analysis-tight.limits]
memory_max_bytes = 268435456
[profiles.py-analysis-tight.warm]
mode = "template"
pool_size = 1
template_memory_max_bytes = 104857600
"#,
    );
    wait_warm(&s, "py-analysis-tight");
    let out = warm(&s, &req("py-analysis-tight", "import pandas as pd\nprint(pd.DataFrame({'a': [1, 2, 3]})['a'].sum())"));
    assert_eq!((out.status.as_str(), out.stdout.as_str()), ("ok", "6\n"), "{out:?}");
}

/// A warm member's workspace is writable by code in its sandbox before its execution comes: a
/// pooled sandbox's environment modules run as it starts, a template's preloaded modules in
/// every child from its entry to its go. Such code (a malicious package, played here by a
/// `sitecustomize.py` that plants symlinks to host paths in `/workspace`, at its import and at
/// every `os.write`) must not make the engine, writing the request's input files as host root,
/// write, chown or chmod anything outside the workspace: the member is refused (its planted
/// names are taken) and the execution runs cold, with its inputs as sent. In each warm mode:
/// a pooled sandbox, a child forked at the request, a child forked ahead.
#[test]
fn a_warm_members_planted_links_never_take_an_input_outside() {
    use std::os::unix::fs::MetadataExt as _;
    let host = tempfile::Builder::new().prefix("planted-").tempdir_in(&env().dir).unwrap().keep();
    std::fs::set_permissions(&host, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (pwned, victim, private) = (host.join("pwned.txt"), host.join("victim.txt"), host.join("private"));
    std::fs::write(&victim, "secret").unwrap();
    std::fs::set_permissions(&victim, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let package = host.join("package");
    std::fs::create_dir(&package).unwrap();
    std::fs::set_permissions(&package, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let plant = format!(
        r#"import os
def _plant():
    if os.getuid() == 0 or not os.access("/workspace", os.W_OK):
        return
    for name, target in (("data.csv", {pwned:?}), ("victim.txt", {victim:?}), ("sub", {private:?})):
        try:
            os.symlink(target, "/workspace/" + name)
        except OSError:
            pass
_plant()
_write = os.write
def _write_planting(fd, data):
    _plant()
    return _write(fd, data)
os.write = _write_planting
"#,
        pwned = pwned.display().to_string(),
        victim = victim.display().to_string(),
        private = private.display().to_string()
    );
    std::fs::write(package.join("sitecustomize.py"), plant).unwrap();
    std::fs::set_permissions(package.join("sitecustomize.py"), std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let profile = |name: &str, mode: &str, pool_size: u32| {
        format!(
            "[profiles.{name}]\nlanguage = \"python\"\nenv = {{ PYTHONPATH = \"/opt/planted\" }}\n[[profiles.{name}.filesystem.mounts]]\nhost = \"{}\"\nsandbox = \"/opt/planted\"\n[profiles.{name}.warm]\nmode = \"{mode}\"\npool_size = {pool_size}\n",
            package.display()
        )
    };
    let s =
        Server::start(&[profile("py-planted-pool", "pool", 1), profile("py-planted-fork", "template", 0), profile("py-planted-ahead", "template", 1)].concat());
    wait_warm(&s, "py-planted-fork");
    let code = "import os\nfor n in ('data.csv', 'victim.txt', 'sub/cron'):\n    p = '/workspace/' + n\n    print(n, os.path.islink(p), open(p).read())";
    for profile in ["py-planted-pool", "py-planted-fork", "py-planted-ahead"] {
        if profile != "py-planted-fork" {
            wait_pool(&s, profile);
        }
        let mut r = req(profile, code);
        for (name, text) in [("data.csv", "a,b\n1,2"), ("victim.txt", "overwritten"), ("sub/cron", "* * * * * root id")] {
            r.files.insert(name.into(), sandbox_core::wire::FileContent::Text(text.into()));
        }
        let out = exec(&s, &r);
        assert_eq!(out.status.as_str(), "ok", "{profile}: {out:?}");
        assert_eq!(out.stdout, "data.csv False a,b\n1,2\nvictim.txt False overwritten\nsub/cron False * * * * * root id\n", "{profile}: the inputs as sent");
        assert!(!out.timing.warm, "{profile}: a member whose workspace held planted names took the execution: {out:?}");
        assert!(!pwned.exists(), "{profile}: an input was written through a planted link to the host");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret", "{profile}: a host file was overwritten through a planted link");
        let meta = std::fs::metadata(&victim).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o600), "{profile}: a host file was chowned or chmodded through a planted link");
        assert_eq!(std::fs::read_dir(&private).unwrap().count(), 0, "{profile}: an input was written into a host directory through a planted link");
    }
}

/// An environment whose `preload` names a module it cannot import gets a template that cannot
/// serve, and the error names the module and why (a new-user trial saw "the template did not get
/// ready (preloading Some(\"e\")): failed to fill whole buffer", the cause only in a log).
#[test]
fn a_preload_that_cannot_be_imported_is_named_with_its_error() {
    let dir = tempfile::Builder::new().prefix("preload-").tempdir_in(&env().dir).unwrap().keep();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "{}[environments.bad-preload]\npython = []\npreload = [\"json\", \"nonexistent_mod_xyz\"]\n\
             [profiles.bad-preload]\nlanguage = \"python\"\nenvironment = \"bad-preload\"\n[profiles.bad-preload.warm]\nmode = \"template\"\n",
            runtime_toml()
        ),
    )
    .unwrap();
    let cli = |args: &[&str]| Command::new(bin()).arg("--config").arg(&config).arg("--data-dir").arg(dir.join("data")).args(args).output().unwrap();
    let out = cli(&["env", "install", "bad-preload"]);
    assert!(out.status.success(), "{out:?}");
    let out = cli(&["run", "--warm", "-p", "bad-preload", "-c", "print(1)"]);
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("preloading 'nonexistent_mod_xyz': ModuleNotFoundError: No module named 'nonexistent_mod_xyz'"), "{stderr}");
    // Cold, the profile runs.
    let out = cli(&["run", "-p", "bad-preload", "-c", "print(1)"]);
    assert_eq!((out.status.success(), String::from_utf8_lossy(&out.stdout).as_ref()), (true, "1\n"), "{out:?}");
}

/// Ctrl-C (SIGINT) of `sandbox doctor` while the warm templates and pools it checks are still
/// starting (which may take minutes): they are stopped and removed, no directory, mount or
/// cgroup of theirs left, and doctor ends by the signal (also if they were ready by then). It
/// used to die at once (the default action) and leave them for the next service start on that
/// data directory to sweep.
#[test]
fn an_interrupted_doctor_leaves_nothing_of_the_templates_and_pools_it_started() {
    // python-analysis's template is the one doctor starts.
    environments_installed();
    let data = tempfile::Builder::new().prefix("doctor-int-").tempdir_in(&env().dir).unwrap().keep();
    let child = interruptible(Command::new(bin()).arg("--config").arg(&env().config).arg("--data-dir").arg(&data).arg("doctor"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let executions = data.join("executions");
    let listed = || -> Vec<String> {
        std::fs::read_dir(&executions).map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default()
    };
    let mut seen = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !seen.iter().any(|n: &String| n.starts_with("template-")) {
        assert!(Instant::now() < deadline, "doctor started no template");
        seen.extend(listed());
        std::thread::sleep(Duration::from_millis(10));
    }
    // Let the pools begin too.
    std::thread::sleep(Duration::from_millis(300));
    seen.extend(listed());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ended_by(out.status, nix::sys::signal::Signal::SIGINT, &stderr);
    assert!(stderr.contains("doctor interrupted"), "{stderr}");
    assert_eq!(listed(), Vec::<String>::new(), "left in the data directory");
    for id in &seen {
        assert_gone_from(&data, id);
    }
}
