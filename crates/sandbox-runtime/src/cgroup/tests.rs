//! The v2 file interface is exercised on a plain directory laid out like a cgroup2 mount;
//! v1 runs for real in the engine's integration tests on this hybrid host.

use std::fs;

use super::*;

const HYBRID: &str = "\
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
const UNIFIED: &str = "30 24 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";

#[test]
fn detects_hybrid_as_v1_with_comounted_cpu() {
    let l = Layout::from_mountinfo(HYBRID, |_| Some("hugetlb".into())).unwrap();
    assert_eq!(
        l,
        Layout::V1 {
            memory: "/sys/fs/cgroup/memory".into(),
            cpu: "/sys/fs/cgroup/cpu,cpuacct".into(),
            cpuacct: "/sys/fs/cgroup/cpu,cpuacct".into(),
            pids: "/sys/fs/cgroup/pids".into(),
        }
    );
    assert_eq!(l.version(), "v1");
}

#[test]
fn detects_unified_v2_only_with_controllers() {
    let l = Layout::from_mountinfo(UNIFIED, |_| Some("cpuset cpu io memory pids".into())).unwrap();
    assert_eq!(l, Layout::V2 { root: "/sys/fs/cgroup".into() });
    let e = Layout::from_mountinfo(UNIFIED, |_| Some("cpu io".into())).unwrap_err();
    assert!(matches!(e, CgroupError::Unavailable(_)), "{e}");
}

#[test]
fn v2_create_writes_limits_and_enables_controllers() {
    let root = tempfile::tempdir().unwrap();
    fs::write(root.path().join("cgroup.subtree_control"), "cpu").unwrap();
    let layout = Layout::V2 { root: root.path().into() };
    let limits = Limits { memory_max_bytes: 256 << 20, cpu_max: 0.5, pids_max: 64 };
    let cg = Cgroup::create(&layout, "sandbox", "exec1", limits).unwrap();
    let dir = root.path().join("sandbox/exec1");
    assert_eq!(cg.dirs(), std::slice::from_ref(&dir));
    let read = |p: &Path| fs::read_to_string(p).unwrap();
    assert_eq!(read(&dir.join("memory.max")), "268435456");
    assert_eq!(read(&dir.join("cpu.max")), "50000 100000");
    assert_eq!(read(&dir.join("pids.max")), "64");
    assert_eq!(read(&root.path().join("cgroup.subtree_control")), "+memory +pids");
    assert_eq!(read(&root.path().join("sandbox/cgroup.subtree_control")), "+memory +cpu +pids");
}

#[test]
fn v2_usage_reads_cpu_peak_oom_and_pids_events() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("cpu.stat"), "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n").unwrap();
    fs::write(d.join("memory.events"), "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n").unwrap();
    fs::write(d.join("memory.peak"), "1048576\n").unwrap();
    fs::write(d.join("pids.events"), "max 7\n").unwrap();
    let u = v2::usage(d).unwrap();
    assert_eq!(u, Usage { cpu_time_ms: 2500, peak_memory_bytes: 1 << 20, oom_kills: 1, pids_limit_hits: 7 });
}

#[test]
fn v1_usage_reads_cpuacct_and_oom_control() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("cpuacct.usage"), "1500000000\n").unwrap();
    fs::write(d.join("memory.max_usage_in_bytes"), "4096\n").unwrap();
    fs::write(d.join("memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n").unwrap();
    let u = v1::usage(&[d.to_owned()]).unwrap();
    assert_eq!(u, Usage { cpu_time_ms: 1500, peak_memory_bytes: 4096, oom_kills: 2, pids_limit_hits: 0 });
}

#[test]
fn quota_has_the_kernel_minimum() {
    assert_eq!(cpu_quota_us(0.5), 50_000);
    assert_eq!(cpu_quota_us(2.0), 200_000);
    assert_eq!(cpu_quota_us(0.001), 1_000);
}

#[test]
fn joins_through_tasks_on_v1_and_cgroup_procs_on_v2() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    for c in ["memory", "cpu", "cpuacct", "pids"] {
        fs::create_dir(r.join(c)).unwrap();
    }
    let v1 = Layout::V1 { memory: r.join("memory"), cpu: r.join("cpu"), cpuacct: r.join("cpuacct"), pids: r.join("pids") };
    let limits = Limits { memory_max_bytes: 64 << 20, cpu_max: 1.0, pids_max: 8 };
    let cg = Cgroup::create(&v1, "sandbox", "x", limits).unwrap();
    let files: Vec<String> = cg.join_files().iter().map(|p| p.strip_prefix(r).unwrap().display().to_string()).collect();
    assert_eq!(files, ["memory/sandbox/x/tasks", "cpu/sandbox/x/tasks", "cpuacct/sandbox/x/tasks", "pids/sandbox/x/tasks"]);
    assert_eq!(fs::read_to_string(r.join("memory/sandbox/x/memory.limit_in_bytes")).unwrap(), "67108864");
    assert_eq!(fs::read_to_string(r.join("memory/sandbox/x/memory.kmem.tcp.limit_in_bytes")).unwrap(), "16777216", "TCP buffers: a quarter");
    assert_eq!(fs::read_to_string(r.join("memory/sandbox/memory.kmem.tcp.limit_in_bytes")).unwrap(), "-1", "the parent holds socket accounting on");
    // A limit someone set on the parent is left as it is (it holds accounting on already).
    fs::write(r.join("memory/sandbox/memory.kmem.tcp.limit_in_bytes"), "1073741824").unwrap();
    let other = Cgroup::create(&v1, "sandbox", "x2", limits).unwrap();
    assert_eq!(fs::read_to_string(r.join("memory/sandbox/memory.kmem.tcp.limit_in_bytes")).unwrap(), "1073741824");
    drop(other);
    assert_eq!(fs::read_to_string(r.join("cpu/sandbox/x/cpu.cfs_quota_us")).unwrap(), "100000");
    let v2 = Layout::V2 { root: r.to_owned() };
    let cg = Cgroup::create(&v2, "sandbox2", "y", limits).unwrap();
    assert_eq!(cg.join_files(), [r.join("sandbox2/y/cgroup.procs")]);
}

/// A fake v2 hierarchy: `root` has no `cgroup.type` (the real root), every cgroup in `below` does.
fn fake_v2(below: &[&str]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    for d in below {
        let dir = root.path().join(d);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("cgroup.type"), "domain\n").unwrap();
        fs::write(dir.join("cgroup.procs"), "").unwrap();
    }
    root
}

#[track_caller]
fn check_place(below: &[&str], configured: Option<&str>, self_cgroup: &str, want_parent: &str) -> tempfile::TempDir {
    let root = fake_v2(below);
    let layout = Layout::V2 { root: root.path().into() };
    assert_eq!(place(&layout, configured, self_cgroup).unwrap().parent, want_parent);
    root
}

#[test]
fn executions_go_under_the_services_own_cgroup_never_at_the_root() {
    // systemd with Delegate=yes: the unit's cgroup; the service's processes move into a leaf.
    let unit = "system.slice/sandbox.service";
    let root = fake_v2(&[unit]);
    fs::write(root.path().join(unit).join("cgroup.procs"), "41\n42\n").unwrap();
    let layout = Layout::V2 { root: root.path().into() };
    let p = place(&layout, None, "0::/system.slice/sandbox.service\n").unwrap();
    assert_eq!(p.parent, "system.slice/sandbox.service/sandbox");
    // (a plain directory keeps the written text: the last pid written to the leaf)
    assert_eq!(fs::read_to_string(root.path().join(unit).join("sandbox-service/cgroup.procs")).unwrap(), "42");
    assert_eq!(fs::read_to_string(root.path().join(unit).join("cgroup.subtree_control")).unwrap(), "+memory +cpu +pids");
    // Started again from inside the leaf: the same place, no deeper nesting.
    check_place(
        &[unit, "system.slice/sandbox.service/sandbox-service"],
        None,
        "0::/system.slice/sandbox.service/sandbox-service\n",
        "system.slice/sandbox.service/sandbox",
    );
    // A container with its own cgroup namespace sees its cgroup as "/": not the real root.
    let ns = fake_v2(&[]);
    fs::write(ns.path().join("cgroup.type"), "domain\n").unwrap();
    fs::write(ns.path().join("cgroup.procs"), "1\n").unwrap();
    assert_eq!(place(&Layout::V2 { root: ns.path().into() }, None, "0::/\n").unwrap().parent, "sandbox");
    assert!(ns.path().join("sandbox-service").is_dir());
    // The real root: executions in /sandbox, nobody moved.
    let r = check_place(&[], None, "0::/\n", "sandbox");
    assert!(!r.path().join("sandbox-service").exists());
    // A configured parent wins; v1 keeps /sandbox in each hierarchy.
    check_place(&[unit], Some("/sandbox.slice/executions/"), "0::/system.slice/sandbox.service\n", "sandbox.slice/executions");
    let v1 = Layout::V1 { memory: "/m".into(), cpu: "/c".into(), cpuacct: "/c".into(), pids: "/p".into() };
    assert_eq!(place(&v1, None, "12:memory:/user.slice\n0::/user.slice\n").unwrap().parent, "sandbox");
}

#[test]
fn v2_nested_parent_enables_controllers_at_every_level() {
    let root = fake_v2(&["a", "a/b"]);
    let layout = Layout::V2 { root: root.path().into() };
    let limits = Limits { memory_max_bytes: 64 << 20, cpu_max: 1.0, pids_max: 8 };
    Cgroup::create(&layout, "a/b/sandbox", "x", limits).unwrap();
    for level in ["", "a", "a/b", "a/b/sandbox"] {
        let f = root.path().join(level).join("cgroup.subtree_control");
        assert_eq!(fs::read_to_string(&f).unwrap(), "+memory +cpu +pids", "{}", f.display());
    }
}

/// A host described by its mounts under /sys/fs/cgroup: (name, f_type, control files) and
/// symbolic links (name, target).
fn described(mounts: &[(&str, FsType, &[&str])], links: &[(&str, &str)], v2_controllers: &str) -> Option<Layout> {
    described_with(mounts, links, v2_controllers, "5:pids:/\n4:memory:/\n3:cpuacct:/\n2:cpu:/\n0::/\n")
}

fn described_with(mounts: &[(&str, FsType, &[&str])], links: &[(&str, &str)], v2_controllers: &str, self_cgroup: &str) -> Option<Layout> {
    let root = Path::new("/sys/fs/cgroup");
    let name_of = |p: &Path| p.strip_prefix(root).ok().map(|r| r.to_string_lossy().into_owned());
    let fs_type = |p: &Path| {
        if p == root {
            return mounts.iter().find(|m| m.0.is_empty()).map(|m| m.1).or(Some(TMPFS));
        }
        let name = name_of(p)?;
        mounts.iter().find(|m| m.0 == name).map(|m| m.1)
    };
    let exists = |p: &Path| {
        let (Some(dir), Some(file)) = (p.parent().and_then(name_of), p.file_name()) else { return false };
        mounts.iter().any(|m| m.0 == dir && m.2.iter().any(|f| *f == file))
    };
    let read_link = |p: &Path| name_of(p).and_then(|n| links.iter().find(|l| l.0 == n).map(|l| PathBuf::from(l.1)));
    let controllers = |_: &Path| Some(v2_controllers.to_owned());
    let self_cgroup = || Some(self_cgroup.to_owned());
    Layout::at_usual_places(&UsualPlaces { fs_type: &fs_type, exists: &exists, read_link: &read_link, controllers: &controllers, self_cgroup: &self_cgroup })
}

use nix::sys::statfs::{FsType, CGROUP2_SUPER_MAGIC as V2, CGROUP_SUPER_MAGIC as V1, TMPFS_MAGIC as TMPFS};

#[test]
fn the_usual_places_find_what_mountinfo_finds() {
    // This machine kind: every v1 controller on a mount of its own.
    let own = [
        ("memory", V1, &["memory.limit_in_bytes"][..]),
        ("cpu", V1, &["cpu.cfs_quota_us"][..]),
        ("cpuacct", V1, &["cpuacct.usage"][..]),
        ("pids", V1, &[][..]),
        ("unified", V2, &[][..]),
    ];
    let mountinfo = "\
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
";
    assert_eq!(described(&own, &[], ""), Some(Layout::from_mountinfo(mountinfo, |_| None).unwrap()));
    // Debian's hybrid layout: cpu and cpuacct co-mounted, reached through links.
    let comounted = [("memory", V1, &["memory.limit_in_bytes"][..]), ("cpu,cpuacct", V1, &["cpu.cfs_quota_us", "cpuacct.usage"][..]), ("pids", V1, &[][..])];
    let links = [("cpu", "cpu,cpuacct"), ("cpuacct", "cpu,cpuacct")];
    let debian = "12:pids:/user.slice/user-1000.slice\n5:cpu,cpuacct:/user.slice\n4:memory:/user.slice\n0::/user.slice/user-1000.slice/session-2.scope\n";
    assert_eq!(described_with(&comounted, &links, "", debian), Some(Layout::from_mountinfo(HYBRID, |_| None).unwrap()));
    // Unified.
    let unified = [("", V2, &[][..])];
    assert_eq!(
        described(&unified, &[], "cpuset cpu io memory pids"),
        Some(Layout::from_mountinfo(UNIFIED, |_| Some("cpuset cpu io memory pids".into())).unwrap())
    );
}

#[test]
fn anything_unexpected_at_the_usual_places_leaves_it_to_mountinfo() {
    let full = |pids: (&'static str, FsType, &'static [&'static str])| {
        [("memory", V1, &["memory.limit_in_bytes"][..]), ("cpu", V1, &["cpu.cfs_quota_us"][..]), ("cpuacct", V1, &["cpuacct.usage"][..]), pids]
    };
    assert!(described(&full(("pids", V1, &[])), &[], "").is_some());
    // A controller's directory missing, or not a v1 mount, or a mount without its file.
    assert_eq!(described(&full(("pidz", V1, &[])), &[], ""), None);
    assert_eq!(described(&full(("pids", TMPFS, &[])), &[], ""), None);
    let no_file = [("memory", V1, &["tasks"][..]), ("cpu", V1, &["cpu.cfs_quota_us"][..]), ("cpuacct", V1, &["cpuacct.usage"][..]), ("pids", V1, &[][..])];
    assert_eq!(described(&no_file, &[], ""), None);
    // pids on no v1 hierarchy (on v2 beside v1 memory), whatever is mounted under its name.
    assert_eq!(described_with(&full(("pids", V1, &[])), &[], "", "4:memory:/\n3:cpuacct:/\n2:cpu:/\n0::/\n"), None);
    // A link that leaves /sys/fs/cgroup.
    assert_eq!(described(&full(("pids", V1, &[])), &[("pids", "../elsewhere/pids")], ""), None);
    assert_eq!(described(&full(("pids", V1, &[])), &[("pids", "/mnt/pids")], ""), None);
    // One v1 hierarchy mounted at /sys/fs/cgroup itself: its child cgroups are no mounts.
    let mut on_v1 = full(("pids", V1, &[])).to_vec();
    on_v1.push(("", V1, &[][..]));
    assert_eq!(described(&on_v1, &[], ""), None);
    // A v2 root without a controller (hybrid hosts with memory on v2 go to mountinfo too).
    assert_eq!(described(&[("", V2, &[][..])], &[], "cpu io memory"), None);
}

#[test]
fn this_host_detects_the_layout_mountinfo_gives() {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let from_mountinfo = Layout::from_mountinfo(&info, |root| fs::read_to_string(root.join("cgroup.controllers")).ok()).ok();
    if let Some(fast) = Layout::at_usual_places(&UsualPlaces::HOST) {
        assert_eq!(Some(fast), from_mountinfo);
    } else if std::path::Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists() {
        panic!("this machine kind's v1 layout at /sys/fs/cgroup is not found without mountinfo");
    }
    assert_eq!(Layout::detect().ok(), from_mountinfo);
}
