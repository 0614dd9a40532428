//! Where execution cgroups live on cgroup v2: under the service's own cgroup (the guest stage
//! runs the tests in `/ci.slice/stage.service`, so the first `sandbox` moves them into its
//! `sandbox-service` leaf), never directly in the hierarchy's root. The v1 host keeps each
//! hierarchy's `/sandbox`.
//! On v2 an execution's init is born in its cgroup (clone3 with CLONE_INTO_CGROUP), on v1 it joins
//! it itself: the helper that cloned it never enters.

use super::*;

#[test]
fn executions_live_under_the_services_own_cgroup() {
    if expected_cgroup_version() != "v2" {
        eprintln!("skipped: the v1 host keeps executions under each hierarchy's /sandbox (the v2 guest stage runs this)");
        return;
    }
    // Once one `sandbox` ran, this process sits in <base>/sandbox-service.
    let _ = run("python-default", "pass", &[]);
    let own = own_v2_cgroup().expect("a v2-only host");
    let base = if own.file_name().is_some_and(|n| n == "sandbox-service") { own.parent().unwrap().to_owned() } else { own.clone() };
    let parent = base.join("sandbox");
    let slow = std::thread::spawn(|| run("py-small", "import time\ntime.sleep(4)\nprint('done')", &[]));
    // Every live execution cgroup seen under <base>/sandbox while the slow run lasts (other tests
    // run beside this one), with its memory.max and pids.max, and the parent of its first
    // process (the helper, which clone3(CLONE_INTO_CGROUP) leaves outside).
    let mut seen = std::collections::HashMap::new();
    let mut born_outside = std::collections::HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !slow.is_finished() {
        for e in std::fs::read_dir(&parent).map(|d| d.filter_map(Result::ok).collect::<Vec<_>>()).unwrap_or_default() {
            let p = e.path();
            let read = |f: &str| std::fs::read_to_string(p.join(f)).map(|s| s.trim().to_owned()).unwrap_or_default();
            let procs: Vec<i32> = read("cgroup.procs").split_whitespace().filter_map(|p| p.parse().ok()).collect();
            if !procs.is_empty() {
                let name = e.file_name().to_string_lossy().into_owned();
                seen.entry(name.clone()).or_insert_with(|| (read("memory.max"), read("pids.max")));
                // The cgroup's oldest process (init) and its parent: the helper, which on v2
                // stays outside (init was born inside by clone3 with CLONE_INTO_CGROUP).
                if let Some(init) = procs.iter().copied().find(|p| !procs.contains(&parent_pid(*p).unwrap_or(0))) {
                    if let Some(parent) = parent_pid(init) {
                        let argv0 = std::fs::read(format!("/proc/{parent}/cmdline")).unwrap_or_default();
                        born_outside.entry(name).or_insert(argv0.starts_with(b"sandbox-init\0"));
                    }
                }
            }
        }
        assert!(Instant::now() < deadline, "the run did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = slow.join().unwrap();
    assert_eq!((r.status(), r.stdout()), ("ok", "done\n"), "{r:?}");
    let id = r.json["executionId"].as_str().unwrap();
    // It ran in <base>/sandbox/<id>, with py-small's limits.
    let limits = seen.get(id).unwrap_or_else(|| panic!("execution {id} never appeared under {}: saw {seen:?}", parent.display()));
    assert_eq!(limits, &("268435456".to_owned(), "64".to_owned()));
    assert_eq!(born_outside.get(id), Some(&true), "init's parent, the helper, must stay outside the execution's cgroup (clone3 CLONE_INTO_CGROUP)");
    let is_real_root = !base.join("cgroup.type").exists();
    if !is_real_root {
        // The base gives controllers to its children, so it holds no process: ours moved to the leaf.
        assert_eq!(std::fs::read_to_string(base.join("cgroup.procs")).unwrap().trim(), "", "{}", base.display());
        assert!(own.ends_with("sandbox-service"), "this test process was moved into the leaf: {}", own.display());
        assert!(!Path::new("/sys/fs/cgroup/sandbox").join(id).exists());
    }
    assert_gone(id);
}

/// On cgroup v1 the helper never enters an execution's cgroup either: init joins it itself, first
/// thing (through `tasks` files the helper opened as host root), so in each hierarchy the
/// execution uses the cgroup's first process is init, whose parent (the helper) is outside; and
/// the program's cgroup namespace is rooted at the execution's cgroup (init made it after
/// joining). The helper used to join and clone init inside.
#[test]
fn on_v1_init_joins_its_cgroup_itself_and_the_helper_stays_outside() {
    if expected_cgroup_version() != "v1" {
        eprintln!("skipped: v2 has init born in its cgroup (executions_live_under_the_services_own_cgroup)");
        return;
    }
    let code = "import time\nprint(open('/proc/self/cgroup').read())\ntime.sleep(3)";
    // Cold whatever SANDBOX_TEST_WARM says: a template's child is its own init, with no helper.
    let slow = std::thread::spawn(move || {
        let out = sandbox(&["run", "--json", "--profile", "py-small", "-c", code]).output().expect("sandbox runs");
        serde_json::from_slice::<Value>(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)))
    });
    // (hierarchy, cgroup name) -> whether every look found init's parent outside the cgroup.
    let mut outside: std::collections::HashMap<(&str, String), bool> = std::collections::HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !slow.is_finished() {
        for h in ["memory", "cpu", "pids"] {
            let dir = Path::new("/sys/fs/cgroup").join(h).join("sandbox");
            for e in std::fs::read_dir(&dir).map(|d| d.filter_map(Result::ok).collect::<Vec<_>>()).unwrap_or_default() {
                let procs: Vec<i32> =
                    std::fs::read_to_string(e.path().join("cgroup.procs")).unwrap_or_default().split_whitespace().filter_map(|p| p.parse().ok()).collect();
                let Some(first) = procs.iter().copied().find(|p| parent_pid(*p).is_some_and(|pp| !procs.contains(&pp))) else { continue };
                let Some(parent) = parent_pid(first) else { continue };
                let Ok(argv) = std::fs::read(format!("/proc/{parent}/cmdline")) else { continue };
                let seen = outside.entry((h, e.file_name().to_string_lossy().into_owned())).or_insert(true);
                *seen &= argv.starts_with(b"sandbox-init\0");
            }
        }
        assert!(Instant::now() < deadline, "the run did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = slow.join().unwrap();
    assert_eq!(r["status"], "ok", "{r:#}");
    let id = r["executionId"].as_str().unwrap().to_owned();
    for h in ["memory", "cpu", "pids"] {
        assert_eq!(
            outside.get(&(h, id.clone())),
            Some(&true),
            "{h}: the first process of the execution's cgroup must be init, its parent (the helper) outside: {outside:?}"
        );
    }
    // The program's cgroup namespace is rooted at its cgroup in every hierarchy.
    let lines: Vec<&str> = r["stdout"].as_str().unwrap_or_default().lines().filter(|l| !l.is_empty()).collect();
    assert!(lines.iter().any(|l| l.contains(":memory:")) && lines.iter().all(|l| l.ends_with(":/")), "{lines:?}");
    assert_gone(&id);
}

/// Parent pid of host process `pid` (field 4 of /proc/<pid>/stat).
fn parent_pid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
}
