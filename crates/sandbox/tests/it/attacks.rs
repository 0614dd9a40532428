//! Hostile programs: each tries to escape or to learn about the host, and each test asserts how it
//! was stopped (errno, missing path, empty listing), not merely that something failed.

use std::io::Read as _;

use super::*;

/// Runs `code` (which prints one line per attempt) and returns its stdout lines.
fn attempt(code: &str) -> Vec<String> {
    attempt_on("python-default", code)
}

/// [`attempt`] in a run of `profile`.
fn attempt_on(profile: &str, code: &str) -> Vec<String> {
    let r = run(profile, code, &[]);
    assert_eq!(r.status(), "ok", "{r:?}");
    r.stdout().lines().map(str::to_owned).collect()
}

#[test]
fn host_secret_file_is_invisible() {
    host_secret_file_is_invisible_on("python-default");
}

/// [`host_secret_file_is_invisible`] in a run of `profile` (the bases' tests run it on theirs).
pub(crate) fn host_secret_file_is_invisible_on(profile: &str) {
    let secret = scratch_file("secret.txt", b"TOP-SECRET-VALUE");
    let code = format!(
        "import os\nfor p in [{:?}, '/root/.bashrc', '/etc/shadow', '/home']:\n    \
         try:\n        open(p).read(); print('READ', p)\n    except OSError as e:\n        print(type(e).__name__, e.errno)",
        secret.to_str().unwrap()
    );
    let lines = attempt_on(profile, &code);
    assert_eq!(lines, ["FileNotFoundError 2", "FileNotFoundError 2", "FileNotFoundError 2", "FileNotFoundError 2"]);
}

#[test]
fn host_processes_and_pid1_are_invisible() {
    host_processes_and_pid1_are_invisible_on("python-default");
}

/// [`host_processes_and_pid1_are_invisible`] in a run of `profile` (the bases' tests run it on theirs).
pub(crate) fn host_processes_and_pid1_are_invisible_on(profile: &str) {
    let code = "import os\npids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\nprint(pids == [os.getpid()], os.getpid())\n\
                print(os.path.exists('/proc/1'))\nprint(all(l.endswith(':/') for l in open('/proc/self/cgroup').read().split()))\nprint(os.uname().nodename)";
    let lines = attempt_on(profile, code);
    // Pid 2 (init is pid 1); 3 in a child forked from a template, whose own pid is 2 (so a
    // library that notices a fork by the pid changing sees one; see warm::enter).
    let pid = if matches!(warm_flag(), Some("--warm" | "--warm=prefork")) { 3 } else { 2 };
    assert_eq!(lines[0], format!("True {pid}"), "only the program itself is visible, as pid {pid}: {lines:?}");
    assert_eq!(lines[1], "False", "pid 1 (init, root of the namespace) is hidden");
    assert_eq!(lines[2], "True", "the cgroup namespace hides the host's cgroup paths: {lines:?}");
    assert_eq!(lines[3], "sandbox");
}

#[test]
fn no_host_paths_leak_through_mountinfo_or_cmdline() {
    no_host_paths_leak_through_mountinfo_or_cmdline_on("python-default");
}

/// [`no_host_paths_leak_through_mountinfo_or_cmdline`] in a run of `profile` (the bases' tests run it on theirs).
pub(crate) fn no_host_paths_leak_through_mountinfo_or_cmdline_on(profile: &str) {
    let r = run(profile, "import os\nprint(open('/proc/self/mountinfo').read())\nprint(os.listdir('/proc/self/fd'))", &[]);
    let data = env().data.to_str().unwrap();
    assert!(!r.stdout().contains(data), "mountinfo shows the data directory: {r:?}");
    assert!(!r.stdout().contains("/work/"), "{r:?}");
    // Nor where environments and their bases live (a base's system directories are overlays).
    for place in [test_environments_dir().as_str(), "/bases/", "/rootfs/"] {
        assert!(!r.stdout().contains(place), "mountinfo shows {place}: {r:?}");
    }
    let last = r.stdout().lines().last().unwrap();
    // stdio, listdir's own fd (3) and the harness's side channel (4, a pipe only the engine reads).
    assert_eq!(last, "['0', '1', '2', '3', '4']", "no other fd of the service leaks");
}

/// The program starts in the signal state of a freshly exec'd interpreter: nothing blocked,
/// and ignored only what the interpreter ignores itself, however the service was started. The
/// CLI runs here with SIGHUP, SIGINT and SIGQUIT ignored, as `nohup` and a shell's background
/// job (`cmd &`, how CI starts the suite) leave them, and an ignored disposition survives exec:
/// before the runtime reset every signal at the program's exec, these three reached the program
/// ignored (and a program started through the Rust runtime and `posix_spawn` would also find
/// SIGPIPE and glibc's reserved 32-33 ignored).
#[test]
fn the_program_starts_with_a_fresh_processs_signal_state() {
    let code = "s = dict(l.split(':', 1) for l in open('/proc/self/status'))\nprint(s['SigBlk'].strip(), s['SigIgn'].strip())";
    let cli = sandbox(&[]);
    let mut args: Vec<&std::ffi::OsStr> = cli.get_args().collect();
    args.extend(["run", "--json", "--profile", "python-default", "-c", code].map(std::ffi::OsStr::new));
    if let Some(flag) = crate::warm_flag() {
        args.push(std::ffi::OsStr::new(flag));
    }
    let out = Command::new("bash")
        .arg("-c")
        .arg("trap '' HUP INT QUIT; exec \"$0\" \"$@\"")
        .arg(cli.get_program())
        .args(&args)
        .env_remove("SANDBOX_LOG")
        .output()
        .unwrap();
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {out:?}"));
    assert_eq!(r["status"], "ok", "{r}");
    // CPython ignores SIGPIPE (13) and SIGXFSZ (25) at its start; bit n-1 is signal n.
    let python_ignores = (1u64 << (13 - 1)) | (1u64 << (25 - 1));
    assert_eq!(r["stdout"].as_str().unwrap_or_default().trim(), format!("{:016x} {python_ignores:016x}", 0), "blocked and ignored signals: {r}");
}

/// Finding 10: an environment is mounted without its host path. A bind of
/// `<environments_dir>/python-analysis-<hash>` would show that path as the mount's root in
/// mountinfo (field 4); the environment is an overlay whose root is `/` instead, in every mode
/// (cold, warm template, pool) and for both languages.
#[test]
fn environment_mounts_do_not_reveal_host_paths() {
    environments_installed();
    let places = [test_environments_dir(), env().data.display().to_string()];
    let py = run("python-analysis", "print(open('/proc/self/mountinfo').read())", &[]);
    let ts = run(
        "typescript-analysis",
        "import Papa from 'papaparse';\nimport { readFileSync } from 'node:fs';\nconsole.log(readFileSync('/proc/self/mountinfo', 'utf8'));",
        &[],
    );
    for r in [&py, &ts] {
        assert_eq!(r.status(), "ok", "{r:?}");
        let env_line = r.stdout().lines().find(|l| l.contains(" /opt/sandbox/env ")).unwrap_or_else(|| panic!("no environment mount: {r:?}"));
        assert_eq!(env_line.split(' ').nth(3), Some("/"), "the mount's root is its own: {env_line}");
        for place in &places {
            assert!(!r.stdout().contains(place.as_str()), "mountinfo shows {place}: {}", r.stdout());
        }
    }
    assert!(ts.stdout().lines().any(|l| l.contains(" /node_modules ") && l.split(' ').nth(3) == Some("/")), "{ts:?}");
}

#[test]
fn root_filesystem_is_read_only() {
    root_filesystem_is_read_only_on("python-default");
}

/// [`root_filesystem_is_read_only`] in a run of `profile` (the bases' tests run it on theirs).
pub(crate) fn root_filesystem_is_read_only_on(profile: &str) {
    let code = "import errno\nfor p in ['/x', '/usr/x', '/etc/passwd', '/code/main.py', '/usr/bin/python3']:\n    \
                try:\n        open(p, 'a').write('x'); print('WROTE', p)\n    except OSError as e:\n        print(errno.errorcode[e.errno])";
    let lines = attempt_on(profile, code);
    for l in &lines {
        assert!(l == "EROFS" || l == "EACCES", "write must fail with EROFS or EACCES: {lines:?}");
    }
    assert_eq!(lines.len(), 5);
}

#[test]
fn host_loopback_services_are_unreachable() {
    host_loopback_services_are_unreachable_on("python-default");
}

/// [`host_loopback_services_are_unreachable`] in a run of `profile` (the bases' tests run it on theirs).
pub(crate) fn host_loopback_services_are_unreachable_on(profile: &str) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let code = format!(
        "import socket, errno\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3); print('CONNECTED')\n\
         except OSError as e:\n    print(errno.errorcode.get(e.errno, e))\nimport os\nprint(sorted(os.listdir('/sys/class/net')) if os.path.exists('/sys/class/net') else 'no-sys')"
    );
    let lines = attempt_on(profile, &code);
    assert_eq!(lines[0], "ECONNREFUSED", "an empty network namespace refuses at once: {lines:?}");
    let mut buf = [0u8; 1];
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Ok((mut s, _)) => panic!("the host listener got a connection ({:?})", s.read(&mut buf)),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn only_loopback_interface_exists() {
    only_loopback_interface_exists_on("python-default");
}

/// [`only_loopback_interface_exists`] in a run of `profile` (the bases' tests run it on theirs).
pub(crate) fn only_loopback_interface_exists_on(profile: &str) {
    let lines = attempt_on(profile, "import socket\nprint(sorted(n for _, n in socket.if_nameindex()))");
    assert_eq!(lines, ["['lo']"]);
}

#[test]
fn each_execution_has_a_network_namespace_of_its_own_with_loopback_that_it_cannot_reconfigure() {
    // Two executions at once (a namespace's inode number may be reused once it is gone): each
    // in a network namespace that is neither the host's nor the other's, loopback up and working,
    // and no way to take it down or change it (SIOCSIFFLAGS, SIOCSIFMTU). A cold one's namespace
    // (and a pooled one's) belongs to the host's user namespace (the helper made it), so not even
    // the sandbox's root holds a capability over it: checked from the host while they sleep.
    let code = "import os, socket, fcntl, struct, errno, time\nprint(os.readlink('/proc/self/ns/net'), flush=True)\n\
                srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(1)\n\
                c = socket.create_connection(srv.getsockname(), timeout=3); a, _ = srv.accept(); c.sendall(b'ping'); print(a.recv(4).decode())\n\
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
                for name, req, arg in [('down', 0x8914, struct.pack('16sh', b'lo', 0)), ('mtu', 0x8922, struct.pack('16si', b'lo', 1280))]:\n    \
                try:\n        fcntl.ioctl(s, req, arg); print(name, 'CHANGED')\n    except OSError as e:\n        print(name, errno.errorcode[e.errno])\n\
                time.sleep(3)";
    let runs: Vec<_> = (0..2).map(|_| std::thread::spawn(move || attempt(code))).collect();
    let host = std::fs::read_link("/proc/self/ns/net").unwrap().to_string_lossy().into_owned();
    let host_user = std::fs::read_link("/proc/self/ns/user").unwrap().to_string_lossy().into_owned();
    // While they run (each sleeps 3 s at its end): the owner (NS_GET_USERNS) of the network
    // namespace of every python3 in a user namespace other than the host's, by namespace.
    let mut owners = std::collections::HashMap::new();
    while !runs.iter().all(|r| r.is_finished()) {
        std::thread::sleep(std::time::Duration::from_millis(200));
        for pid in std::fs::read_dir("/proc").unwrap().flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()) {
            let link = |ns: &str| std::fs::read_link(format!("/proc/{pid}/ns/{ns}")).ok().map(|l| l.to_string_lossy().into_owned());
            // Each namespace asked about once (a busy host runs many other sandboxes' python3s,
            // and asking costs a host python3 start: asking again let these runs end unseen).
            let seen = link("net").is_some_and(|n| owners.contains_key(&n));
            if !seen
                && link("user").is_some_and(|u| u != host_user)
                && std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "python3")
            {
                let out = std::process::Command::new("python3")
                    .args(["-c", "import os, fcntl, sys\nfd = os.open(f'/proc/{sys.argv[1]}/ns/net', os.O_RDONLY)\nprint(os.readlink(f'/proc/{sys.argv[1]}/ns/net'), os.readlink(f'/proc/self/fd/{fcntl.ioctl(fd, 0xb701)}'))", &pid.to_string()])
                    .output()
                    .unwrap();
                if let Some((net, owner)) = String::from_utf8_lossy(&out.stdout).trim().split_once(' ') {
                    owners.insert(net.to_owned(), owner.to_owned());
                }
            }
        }
    }
    let lines: Vec<Vec<String>> = runs.into_iter().map(|r| r.join().unwrap()).collect();
    for l in &lines {
        assert_eq!(l[1..], ["ping", "down EPERM", "mtu EPERM"], "{lines:?}");
        assert!(l[0].starts_with("net:[") && l[0] != host, "the host's network namespace: {lines:?}");
        // A template's child makes its own, inside the template's user namespace (warm.rs).
        if matches!(crate::warm_flag(), None | Some("--warm=pool")) {
            assert_eq!(owners.get(&l[0]), Some(&host_user), "the network namespace's owner is not the host's user namespace: {owners:?} {lines:?}");
        }
    }
    assert_ne!(lines[0][0], lines[1][0], "two executions shared a network namespace");
}

/// A service without CAP_NET_ADMIN (a container's default set drops it): the helper's network
/// namespace cannot bring loopback up, so init makes one of its own, as root of the sandbox's
/// user namespace. The execution still has its own namespace with only a working loopback, and
/// the program, holding no capability there, still cannot reconfigure it. Cold: the helper's
/// path (a template's child always makes its own).
#[test]
fn without_cap_net_admin_an_execution_still_has_a_network_namespace_of_its_own() {
    let code = "import errno, fcntl, os, socket, struct\n\
                srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(1)\n\
                c = socket.create_connection(srv.getsockname(), timeout=3); a, _ = srv.accept(); c.sendall(b'ping'); print(a.recv(4).decode())\n\
                print(sorted(n for _, n in socket.if_nameindex()))\n\
                owner = os.fstat(fcntl.ioctl(os.open('/proc/self/ns/net', os.O_RDONLY), 0xb701))\n\
                mine = os.stat('/proc/self/ns/user')\n\
                print('owned by the sandbox' if (owner.st_dev, owner.st_ino) == (mine.st_dev, mine.st_ino) else 'owned elsewhere')\n\
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
                try:\n    fcntl.ioctl(s, 0x8914, struct.pack('16sh', b'lo', 0)); print('down CHANGED')\n\
                except OSError as e:\n    print('down', errno.errorcode[e.errno])";
    let e = crate::env();
    let out = std::process::Command::new("setpriv")
        .args(["--bounding-set", "-net_admin", "--inh-caps", "-net_admin", "--"])
        .arg(crate::bin())
        .arg("--config")
        .arg(&e.config)
        .arg("--data-dir")
        .arg(&e.data)
        .args(["run", "--json", "-c", code])
        .env_remove("SANDBOX_LOG")
        .output()
        .expect("setpriv runs");
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|err| panic!("not JSON ({err}): {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(json["status"], "ok", "{json:#}");
    let lines: Vec<&str> = json["stdout"].as_str().unwrap_or_default().lines().collect();
    assert_eq!(lines, ["ping", "['lo']", "owned by the sandbox", "down EPERM"], "{json:#}");
    crate::assert_gone(json["executionId"].as_str().unwrap());
}

#[test]
fn dangerous_syscalls_fail_with_eperm() {
    dangerous_syscalls_fail_with_eperm_on("python-default");
}

/// [`dangerous_syscalls_fail_with_eperm`] in a run of `profile` (the bases' tests run it on theirs).
pub(crate) fn dangerous_syscalls_fail_with_eperm_on(profile: &str) {
    // x86-64 numbers: mount 165, umount2 166, unshare 272, setns 308, ptrace 101, bpf 321,
    // keyctl 250, init_module 175, perf_event_open 298, io_uring_setup 425, pivot_root 155, chroot 161.
    let code = "import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\n\
                calls = {'mount': (165, 0, 0, 0, 0, 0), 'umount2': (166, 0, 0), 'unshare': (272, 0x10000000), 'setns': (308, 0, 0),\n\
                'ptrace': (101, 16, 1, 0, 0), 'bpf': (321, 0, 0, 0), 'keyctl': (250, 0, 0), 'init_module': (175, 0, 0, 0),\n\
                'perf_event_open': (298, 0, 0, -1, -1, 0), 'io_uring_setup': (425, 1, 0), 'pivot_root': (155, 0, 0), 'chroot': (161, 0)}\n\
                for name, args in calls.items():\n    ctypes.set_errno(0)\n    r = libc.syscall(*args)\n    print(name, r, errno.errorcode.get(ctypes.get_errno()))";
    let lines = attempt_on(profile, code);
    assert_eq!(lines.len(), 12);
    for l in &lines {
        assert!(l.ends_with(" -1 EPERM"), "every call must be refused with EPERM: {lines:#?}");
    }
}

#[test]
fn new_namespaces_via_clone_are_refused() {
    new_namespaces_via_clone_are_refused_on("python-default");
}

/// [`new_namespaces_via_clone_are_refused`] in a run of `profile` (the bases' tests run it on theirs).
pub(crate) fn new_namespaces_via_clone_are_refused_on(profile: &str) {
    // clone(2) (56) with CLONE_NEWUSER | SIGCHLD and no stack, i.e. fork into a new user namespace.
    let code = "import ctypes, errno, os\nlibc = ctypes.CDLL(None, use_errno=True)\nfor flag in (0x10000000, 0x20000000, 0x40000000, 0x00020000):\n    \
                r = libc.syscall(56, flag | 17, 0, 0, 0, 0)\n    if r == 0: os._exit(0)\n    print(r, errno.errorcode.get(ctypes.get_errno()))";
    assert_eq!(attempt_on(profile, code), ["-1 EPERM", "-1 EPERM", "-1 EPERM", "-1 EPERM"]);
}

#[test]
fn cannot_become_root_and_holds_no_capabilities() {
    cannot_become_root_and_holds_no_capabilities_on("python-default");
}

/// [`cannot_become_root_and_holds_no_capabilities`] in a run of `profile` (the bases' tests run it on theirs).
pub(crate) fn cannot_become_root_and_holds_no_capabilities_on(profile: &str) {
    let code = "import os, errno\nfor f in (lambda: os.setuid(0), lambda: os.setgid(0), lambda: os.setgroups([0])):\n    try:\n        f(); print('BECAME ROOT')\n    except OSError as e:\n        print(errno.errorcode[e.errno])\n\
                st = dict(l.split(':\\t') for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n\
                print(os.getuid(), os.getgid(), os.getgroups())\nfor k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp'):\n    print(k, st[k].strip())\n\
                print(open('/proc/self/uid_map').read().split())";
    let lines = attempt_on(profile, code);
    assert_eq!(&lines[..3], ["EPERM", "EPERM", "EPERM"]);
    // Each execution runs as a uid of its own (1000 + its slot), in group 1000.
    let ids: Vec<&str> = lines[3].split(' ').collect();
    let uid: u32 = ids[0].parse().unwrap();
    assert!((1000..1000 + 4096).contains(&uid), "{lines:?}");
    assert_eq!(&ids[1..], ["1000", "[]"]);
    for (i, k) in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"].iter().enumerate() {
        assert_eq!(lines[4 + i], format!("{k} 0000000000000000"));
    }
    assert_eq!(lines[9], "NoNewPrivs 1");
    assert_eq!(lines[10], "Seccomp 2");
    // uid 0 inside is host UID_BASE, the program's uid host UID_BASE + uid (a template maps its
    // children's range 1000.. to UID_BASE + 1000..): nothing inside maps to host root.
    let map: Vec<u64> = lines[11].trim_matches(['[', ']']).split(", ").map(|v| v.trim_matches('\'').parse().unwrap()).collect();
    assert_eq!(&map[..3], [0, u64::from(UID_BASE), 1], "{lines:?}");
    assert!(map[3] <= u64::from(uid) && map[4] == u64::from(UID_BASE) + map[3] && map[5] >= 1, "{lines:?}");
}

#[test]
fn landlock_blocks_paths_outside_the_rules_even_through_proc() {
    landlock_blocks_paths_outside_the_rules_even_through_proc_on("python-default");
}

/// [`landlock_blocks_paths_outside_the_rules_even_through_proc`] in a run of `profile` (the bases' tests run it on theirs).
pub(crate) fn landlock_blocks_paths_outside_the_rules_even_through_proc_on(profile: &str) {
    // /proc/self/root is the sandbox root; reading files through it is allowed only where the rules allow.
    let code = "import os, errno\nfor p in ['/proc/self/root/etc/passwd', '/workspace/../etc/hostname']:\n    \
                try:\n        open(p).read(); print('read')\n    except OSError as e:\n        print(errno.errorcode[e.errno])";
    let r = run(profile, code, &[]);
    assert_eq!(r.status(), "ok", "{r:?}");
    let lines: Vec<&str> = r.stdout().lines().collect();
    assert_eq!(lines, ["read", "read"], "the synthesized /etc is readable; nothing outside exists: {r:?}");
    // The reads above passed through landlock, not around it: without landlock this test fails.
    let abi = r.json["enforcement"]["landlockAbi"].as_u64().unwrap_or(0);
    assert!(abi >= 1, "landlock was not enforced (ABI {abi}): {r:?}");
}

#[test]
fn landlock_stops_truncate_and_device_ioctl_as_far_as_the_enforced_abi_reaches() {
    // The program's own /proc/self/comm is writable and /dev/null is a writable device, but the
    // rules grant neither truncation (ABI 3) nor device ioctls (ABI 5); below those ABIs the
    // truncation succeeds and the device answers for itself (ENOTTY).
    let code = "import os, errno, fcntl, termios\ntry:\n    os.truncate('/proc/self/comm', 0); print('truncated')\nexcept OSError as e:\n    \
                print(errno.errorcode[e.errno])\nfd = os.open('/dev/null', os.O_RDWR)\ntry:\n    fcntl.ioctl(fd, termios.TCGETS, bytes(64)); print('ioctl')\n\
                except OSError as e:\n    print(errno.errorcode[e.errno])";
    let r = run("python-default", code, &[]);
    assert_eq!(r.status(), "ok", "{r:?}");
    let abi = r.json["enforcement"]["landlockAbi"].as_u64().unwrap();
    let truncate = if abi >= 3 { "EACCES" } else { "truncated" };
    let ioctl = if abi >= 5 { "EACCES" } else { "ENOTTY" };
    assert_eq!(r.stdout().lines().collect::<Vec<_>>(), [truncate, ioctl], "landlock ABI {abi}: {r:?}");
}

#[test]
fn only_unix_inet_and_netlink_sockets_can_be_created() {
    // AF_VSOCK is not isolated by network namespaces; AF_PACKET sees raw frames; AF_ALG is kernel crypto.
    let code = "import socket, errno\nfor fam in (socket.AF_VSOCK, socket.AF_PACKET, socket.AF_ALG, 31, 3):\n    try:\n        socket.socket(fam, socket.SOCK_STREAM if fam != socket.AF_PACKET else socket.SOCK_RAW); print('CREATED', fam)\n    \
                except OSError as e:\n        print(errno.errorcode[e.errno])\nfor fam in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6):\n    socket.socket(fam, socket.SOCK_STREAM).close()\n\
                socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close()\nprint('ok')";
    let lines = attempt(code);
    assert_eq!(lines, ["EAFNOSUPPORT", "EAFNOSUPPORT", "EAFNOSUPPORT", "EAFNOSUPPORT", "EAFNOSUPPORT", "ok"]);
}

#[test]
fn workspace_is_unreachable_for_other_host_users_while_running() {
    // The program makes its workspace world-writable; a host user other than root must still not
    // reach it (the execution directory is 0700, owned by the container's root).
    let code = "import os, time\nos.chmod('/workspace', 0o777)\nopen('secret.txt','w').write('S')\nprint('ready', flush=True)\ntime.sleep(3)";
    let mut args = vec!["run", "--profile", "python-default", "-c", code];
    args.extend(warm_flag());
    let mut child = sandbox(&args).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line).unwrap();
    assert_eq!(line, "ready\n");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    // Other tests run in parallel: the workspace is the one (seen as root) holding secret.txt.
    let ws = mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .find(|p| p.starts_with(env().data.to_str().unwrap()) && p.ends_with("/workspace") && Path::new(p).join("secret.txt").exists())
        .unwrap()
        .to_owned();
    let probe = Command::new("setpriv").args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat", &format!("{ws}/secret.txt")]).output().unwrap();
    assert!(!probe.status.success(), "nobody read the workspace: {probe:?}");
    assert!(String::from_utf8_lossy(&probe.stderr).contains("Permission denied"), "{probe:?}");
    child.wait().unwrap();
}

/// Runs `code` with the host's python3 as `nobody`, with no capability and no seccomp filter:
/// the kernel's own answer to the calls the sandbox refuses (the anchor that shows a refusal
/// inside comes from the filter, not from missing privileges).
fn on_host_unprivileged(code: &str) -> Vec<String> {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "/usr/bin/python3", "-c", code])
        .output()
        .expect("setpriv runs");
    assert!(out.status.success(), "host anchor failed: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8").lines().map(str::to_owned).collect()
}

/// Raw system calls by number, one `name result errno` line each (errno `-` when it returned).
fn raw_syscalls(calls: &str) -> String {
    format!(
        "import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n\
         for name, args in [{calls}]:\n    ctypes.set_errno(0)\n    r = libc.syscall(*[ctypes.c_long(a) for a in args])\n    \
         print(name, r, errno.errorcode.get(ctypes.get_errno(), '-') if r == -1 else '-')"
    )
}

/// Issue 12, finding 9: seccomp is an allowlist. Calls it does not list fail with ENOSYS even
/// though this kernel implements them: listmount (458) and mseal (462) are newer than the
/// filter's libseccomp table, get_mempolicy (239) is known but not listed, clone3 (435) is left
/// out so libc falls back to clone, personality(ADDR_NO_RANDOMIZE) is a value not listed.
#[test]
fn unlisted_syscalls_fail_with_enosys() {
    unlisted_syscalls_fail_with_enosys_on("python-default");
}

/// [`unlisted_syscalls_fail_with_enosys`] in a run of `profile` (the bases' tests run it on theirs).
pub(crate) fn unlisted_syscalls_fail_with_enosys_on(profile: &str) {
    let code = raw_syscalls(
        "('listmount', (458, 0, 0, 0, 0)), ('mseal', (462, 0, 0, 0)), ('get_mempolicy', (239, 0, 0, 0, 0, 0)), \
         ('clone3', (435, 0, 0)), ('personality', (135, 0x0040000))",
    );
    let inside = attempt_on(profile, &code);
    let host = on_host_unprivileged(&code);
    assert_eq!(inside.len(), 5, "{inside:?}");
    for (i, h) in inside.iter().zip(&host) {
        let name = i.split(' ').next().unwrap();
        assert_eq!(i, &format!("{name} -1 ENOSYS"), "inside: {inside:#?}");
        // The kernel implements each of them: its own answer is something else.
        assert!(!h.ends_with("ENOSYS"), "the host kernel lacks {name}, so this proves nothing: {host:#?}");
    }
    // Allowed personality values still work (query, PER_LINUX).
    let lines = attempt_on(profile, &raw_syscalls("('query', (135, 0xffffffff)), ('linux', (135, 0))"));
    assert_eq!(lines, ["query 0 -", "linux 0 -"]);
}

/// The filter answers for the native 64-bit calls only: a call through another ABI, the x32 one
/// (numbers from 0x40000000) or the i386 one (`int 0x80` from 64-bit code), ends the program by
/// SIGSYS before the kernel runs it (SECCOMP_RET_KILL_PROCESS), so no rule can be dodged through a
/// table the filter does not read. Anchor: on the host, as an unprivileged user, both calls
/// return (x32's getpid with ENOSYS where the kernel lacks that ABI, i386's getpid with a pid);
/// where this kernel has no i386 emulation either (the host's call crashes), that half is skipped.
#[test]
fn system_calls_through_another_abi_kill_the_program() {
    let x32 = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\nprint('x32', flush=True)\n\
               r = libc.syscall(ctypes.c_long(0x40000000 + 39))\nprint('returned', r == -1 and ctypes.get_errno() == 38 or r > 0)";
    // mov eax, 20 (getpid in the i386 table); int 0x80; ret
    let i386 = "import ctypes, mmap\nbuf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n\
                buf.write(bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3]))\naddr = ctypes.addressof(ctypes.c_char.from_buffer(buf))\n\
                print('i386', flush=True)\nprint('returned', ctypes.CFUNCTYPE(ctypes.c_int)(addr)() > 0)";
    for (abi, code) in [("x32", x32), ("i386", i386)] {
        let host = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "/usr/bin/python3", "-c", code])
            .output()
            .expect("setpriv runs");
        let host_out = String::from_utf8_lossy(&host.stdout).into_owned();
        if abi == "i386" && !host.status.success() {
            eprintln!("this kernel runs no i386 calls (the host's call ended {:?}): the i386 half proves nothing here", host.status);
            continue;
        }
        assert_eq!(host_out, format!("{abi}\nreturned True\n"), "the host's call returns: {host:?}");
        let r = run("python-default", code, &[]);
        assert_eq!(r.stdout(), format!("{abi}\n"), "{r:?}");
        assert_eq!((r.json["signal"].as_i64(), r.json["signalName"].as_str()), (Some(31), Some("SIGSYS")), "{abi}: {r:?}");
    }
}

/// Issue 12, finding 9: the calls a sandbox must never make fail with EPERM from the filter.
/// Anchor: for these arguments the kernel itself, without any capability, answers differently
/// (unshare(0) succeeds, setns(-1) is EBADF, an unknown keyctl is EOPNOTSUPP (Python's ENOTSUP), add_key(NULL) is
/// EFAULT), so EPERM inside can only come from seccomp.
#[test]
fn denied_syscalls_fail_with_eperm_from_seccomp_not_from_capabilities() {
    let code = raw_syscalls("('unshare', (272, 0)), ('setns', (308, -1, 0)), ('keyctl', (250, 9999, 0)), ('add_key', (248, 0, 0, 0, 0, -1))");
    let host = on_host_unprivileged(&code);
    assert_eq!(host, ["unshare 0 -", "setns -1 EBADF", "keyctl -1 ENOTSUP", "add_key -1 EFAULT"], "the kernel's own answers");
    let inside = attempt(&code);
    assert_eq!(inside, ["unshare -1 EPERM", "setns -1 EPERM", "keyctl -1 EPERM", "add_key -1 EPERM"]);
}

/// Issue 12, finding 9: netlink only for NETLINK_ROUTE (interfaces and addresses of the
/// sandbox's own namespace); audit, uevents, sock_diag and generic netlink fail with
/// EPROTONOSUPPORT, also when junk in the high half of the protocol register tries to dodge
/// the comparison (the kernel reads the low 32 bits: 9 is NETLINK_AUDIT). Anchor: as an
/// unprivileged host user each of these sockets can be created.
#[test]
fn netlink_sockets_are_limited_to_netlink_route() {
    let code = "import socket, errno, ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n\
                for proto in (0, 9, 15, 4, 16):\n    try:\n        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, proto).close(); print(proto, 'ok')\n    \
                except OSError as e:\n        print(proto, errno.errorcode[e.errno])\n\
                fd = libc.syscall(ctypes.c_long(41), ctypes.c_long(16), ctypes.c_long(3), ctypes.c_long((1 << 32) | 9))\n\
                print('high-half', 'ok' if fd >= 0 else errno.errorcode[ctypes.get_errno()])";
    let host = on_host_unprivileged(code);
    assert_eq!(host, ["0 ok", "9 ok", "15 ok", "4 ok", "16 ok", "high-half ok"], "the kernel's own answers");
    let inside = attempt(code);
    assert_eq!(inside, ["0 ok", "9 EPROTONOSUPPORT", "15 EPROTONOSUPPORT", "4 EPROTONOSUPPORT", "16 EPROTONOSUPPORT", "high-half EPROTONOSUPPORT"]);
    // NETLINK_ROUTE works end to end: the interface list (if_nameindex) and an RTM_GETADDR dump.
    let lines = attempt(GET_ADDRESSES);
    assert_eq!(lines, ["[(1, 'lo')]", "['127.0.0.1']"]);
}

/// Lists the interfaces, then the IPv4 addresses from an RTM_GETADDR dump over NETLINK_ROUTE.
const GET_ADDRESSES: &str = r#"import socket, struct
print(socket.if_nameindex())
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
s.bind((0, 0))
# nlmsghdr (len, RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, seq, pid) + ifaddrmsg (AF_INET)
s.send(struct.pack('=IHHII', 24, 22, 0x301, 1, 0) + struct.pack('=BBBBI', socket.AF_INET, 0, 0, 0, 0))
addrs, done = [], False
while not done:
    data, off = s.recv(65536), 0
    while off < len(data):
        length, kind = struct.unpack_from('=IH', data, off)
        if kind == 3:  # NLMSG_DONE
            done = True
            break
        if kind == 20:  # RTM_NEWADDR: attributes follow the 16-byte header and 8-byte ifaddrmsg
            a = off + 24
            while a < off + length:
                alen, atype = struct.unpack_from('=HH', data, a)
                if atype == 1:  # IFA_ADDRESS
                    addrs.append(socket.inet_ntoa(data[a + 4:a + 8]))
                a += (alen + 3) & ~3
        off += (length + 3) & ~3
print(addrs)
"#;

const CORE_PATTERN: &str = "/proc/sys/kernel/core_pattern";

/// The pattern found before a [`CorePatternGuard`] set its own, kept until it is restored: a test
/// process killed while holding the guard (no `Drop`) leaves it, and the next guard restores it.
const CORE_PATTERN_SAVED: &str = "/run/sandbox-it-core_pattern.saved";

/// Sets the host's core_pattern and puts the old one back when dropped, also when the test panics.
///
/// The pattern is host-wide, and the suite may run in several processes at once (cold and warm):
/// they take turns through an exclusive [`core_pattern_turn`], held for the guard's life, so none saves another's handler as "the old one" and leaves it set.
struct CorePatternGuard {
    old: String,
    _turn: nix::fcntl::Flock<std::fs::File>,
}

impl CorePatternGuard {
    /// [`CorePatternGuard::set`], or `None` (nothing changed) when the kernel refuses the
    /// pattern (a socket pattern before Linux 6.16).
    fn set_if_supported(pattern: &str) -> Option<Self> {
        Self::set_with(pattern, false)
    }

    fn set(pattern: &str) -> Self {
        Self::set_with(pattern, true).expect("core_pattern is writable as root")
    }

    fn set_with(pattern: &str, must: bool) -> Option<Self> {
        let turn = core_pattern_turn(true);
        let old = match std::fs::read_to_string(CORE_PATTERN_SAVED) {
            Ok(saved) => saved,
            Err(_) => {
                let old = std::fs::read_to_string(CORE_PATTERN).expect("core_pattern is readable");
                std::fs::write(CORE_PATTERN_SAVED, &old).expect("save core_pattern");
                old
            }
        };
        if let Err(e) = std::fs::write(CORE_PATTERN, pattern) {
            assert!(!must, "core_pattern is writable as root: {e}");
            // Refused: the pattern found (or a killed run's saved one) is put back, as a drop does.
            drop(CorePatternGuard { old, _turn: turn });
            return None;
        }
        Some(CorePatternGuard { old, _turn: turn })
    }
}

impl Drop for CorePatternGuard {
    fn drop(&mut self) {
        match std::fs::write(CORE_PATTERN, self.old.trim_end()) {
            Ok(()) => drop(std::fs::remove_file(CORE_PATTERN_SAVED)),
            Err(e) => eprintln!("could not restore {CORE_PATTERN} to {:?}: {e}", self.old),
        }
    }
}

/// Issue 12, finding 6: a crash the program controls never starts the host's core_pattern pipe
/// (apport, systemd-coredump run as host root). The handler here records the name of every
/// crashing process; a host process with RLIMIT_CORE 0 shows that such a pipe runs whatever the
/// limit (except 1), while the sandbox's SIGSEGV and SIGABRT, in Python and Node, and a child
/// that first tries to lower its core limit to 0, never reach it.
#[test]
fn crashes_never_reach_a_piped_core_pattern() {
    let dir = tempfile::Builder::new().prefix("core-").tempdir_in(&env().dir).unwrap().keep();
    let calls = dir.join("calls");
    let handler = dir.join("handler");
    std::fs::write(&handler, format!("#!/bin/sh\necho \"$1\" >> {}\ncat > /dev/null\n", calls.display())).unwrap();
    std::fs::set_permissions(&handler, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // Process names (comm, 15 bytes at most) unique to this run: other crashes on the host may
    // reach the handler while it is set.
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() ^ std::process::id();
    let [child, main, node, host] = ["ab", "sg", "ts", "ht"].map(|k| format!("{k}{stamp:08x}"));
    let guard = CorePatternGuard::set(&format!("|{} %e", handler.display()));

    let code = format!(
        "import ctypes, errno, os, resource\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(resource.getrlimit(resource.RLIMIT_CORE))\n\
         pid = os.fork()\nif pid == 0:\n    libc.prctl(15, b'{child}', 0, 0, 0)\n    zero = (ctypes.c_ulong * 2)(0, 0)\n    \
         r = libc.setrlimit(resource.RLIMIT_CORE, zero)\n    print('setrlimit', r, errno.errorcode.get(ctypes.get_errno()), flush=True)\n    os.abort()\n\
         _, status = os.waitpid(pid, 0)\nprint('child', os.WTERMSIG(status), os.WCOREDUMP(status), flush=True)\n\
         libc.prctl(15, b'{main}', 0, 0, 0)\nctypes.string_at(0)"
    );
    let r = run("python-default", &code, &[]);
    assert_eq!(r.stdout(), "(1, 1)\nsetrlimit -1 EPERM\nchild 6 False\n", "{r:?}");
    assert_eq!((r.json["signal"].as_i64(), r.json["signalName"].as_str()), (Some(11), Some("SIGSEGV")), "{r:?}");
    let r = run("typescript-default", &format!("process.title = '{node}';\nprocess.abort();"), &[]);
    assert_eq!(r.json["signal"].as_i64(), Some(6), "{r:?}");

    // The control: the same pipe on the host, with the limit the sandbox used to set (0).
    let out = Command::new("/usr/bin/python3")
        .args([
            "-c",
            &format!(
                "import ctypes, os, resource\nctypes.CDLL(None).prctl(15, b'{host}', 0, 0, 0)\nresource.setrlimit(resource.RLIMIT_CORE, (0, 0))\nos.abort()"
            ),
        ])
        .output()
        .unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&out.status), Some(6));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let recorded = loop {
        let text = std::fs::read_to_string(&calls).unwrap_or_default();
        if text.lines().any(|l| l == host) || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    // Handlers start in crash order; give a late one a moment anyway.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let recorded = recorded + &std::fs::read_to_string(&calls).unwrap_or_default();
    drop(guard);
    assert!(recorded.lines().any(|l| l == host), "the control crash did not reach the handler, so the test proves nothing: {recorded:?}");
    for name in [&child, &main, &node] {
        assert!(!recorded.lines().any(|l| l == name.as_str()), "the sandbox's crash {name} reached the host's core_pattern: {recorded:?}");
    }
}

/// A socket core_pattern (`@`, Linux 6.16+) ignores RLIMIT_CORE: the kernel connects to its
/// server and sends the crash's core image. A program that was exec'd (cold, or a pooled
/// sandbox's) is dumpable, so its crash is sent: documented, and the control here that the
/// pattern works. A template's child never execs: it is made dumpable after its uid change so
/// that its /proc/self files are its own, but not under a socket pattern, where its image
/// (mostly its template's heap) would go to the host: nothing of its crash reaches the server.
#[test]
fn a_forked_warm_programs_crash_never_reaches_a_socket_core_pattern() {
    use std::io::Read as _;
    let dir = tempfile::Builder::new().prefix("core-sock-").tempdir_in(&env().dir).unwrap().keep();
    let sock = dir.join("core.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    // The kernel connects with the crashing task's credentials: an unprivileged host uid.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&sock, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let pattern = format!("@{}", sock.display());
    let guard = CorePatternGuard::set_if_supported(&pattern);
    let Some(guard) = guard else {
        eprintln!("SKIP: this kernel takes no socket core_pattern (Linux 6.16+)");
        return;
    };
    // The server reads while the program crashes: the kernel writes the image as the program
    // ends, and waits for a server that does not read.
    let server = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            match listener.accept() {
                Ok((mut conn, _)) => {
                    conn.set_nonblocking(false).unwrap();
                    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let mut image = Vec::new();
                    let _ = conn.read_to_end(&mut image);
                    return image.len();
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => panic!("accept: {e}"),
            }
        }
        0
    });
    let r = run("python-default", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", &[]);
    assert_eq!(r.json["signalName"].as_str(), Some("SIGSEGV"), "{r:?}");
    // A crash that reached the server was accepted before its program's end was reported.
    let forked = matches!(warm_flag(), Some("--warm" | "--warm=prefork"));
    if forked {
        std::thread::sleep(Duration::from_secs(1));
        // Unblock the server's wait: a connection of our own, which it reads as empty.
        drop(std::os::unix::net::UnixStream::connect(&sock));
    }
    let sent = server.join().unwrap();
    drop(guard);
    if forked {
        assert_eq!(sent, 0, "a template's child sent {sent} bytes of core image to the host's core_pattern socket");
    } else {
        assert!(sent > 0, "the control: an exec'd program's crash reaches a socket core_pattern on this kernel, so the test proves something");
    }
}

/// Issue 12, finding 3: kernel per-user counters are charged to the execution's own host uid,
/// not to host root. The test holds 16 inotify instances as host root, then a sandbox calls
/// `inotify_init1()` 200 times: it gets exactly `fs.inotify.max_user_instances` (its own
/// count, whatever root holds), or in an execution forked from a template the smaller share its
/// user namespace allows (`user.max_inotify_instances`, which the program reads; see
/// `warm::a_warm_execution_cannot_take_the_inotify_instances_of_the_others`), and then EMFILE;
/// had the instances been charged to host root, they would have run out 16 sooner, and root's
/// own next instance would fail.
#[test]
fn inotify_instances_are_charged_to_the_sandbox_not_host_root() {
    let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_instances").unwrap().trim().parse().unwrap();
    assert!(max < 200, "max_user_instances {max} is not below the 200 attempts, so the test proves nothing");
    // A host root process holding 16 instances until its stdin closes.
    let holder_code =
        "import ctypes, sys\nlibc = ctypes.CDLL(None)\nfds = [libc.inotify_init1(0) for _ in range(16)]\nprint(min(fds) >= 0, flush=True)\nsys.stdin.read()";
    let mut holder =
        Command::new("/usr/bin/python3").args(["-c", holder_code]).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut ready = [0u8; 5];
    std::io::Read::read_exact(holder.stdout.as_mut().unwrap(), &mut ready).unwrap();
    assert_eq!(&ready, b"True\n", "host root could not hold 16 inotify instances");
    let code = "import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\nfds, err = [], None\nfor _ in range(200):\n    \
                fd = libc.inotify_init1(0)\n    if fd < 0:\n        err = errno.errorcode[ctypes.get_errno()]\n        break\n    fds.append(fd)\n\
                print(len(fds), err, open('/proc/sys/user/max_inotify_instances').read().strip())";
    let r = run("python-default", code, &[]);
    assert_eq!(r.status(), "ok", "{r:?}");
    let (got, own_limit) = r.stdout().trim().rsplit_once(' ').unwrap();
    let expected = max.min(own_limit.parse().unwrap());
    assert_eq!(got, format!("{expected} EMFILE"), "{r:?}");
    let root_after = Command::new("/usr/bin/python3").args(["-c", "import ctypes\nprint(ctypes.CDLL(None).inotify_init1(0) >= 0)"]).output().unwrap();
    drop(holder.stdin.take());
    holder.wait().unwrap();
    assert_eq!(String::from_utf8_lossy(&root_after.stdout), "True\n", "host root can still create inotify instances");
}

/// Issue 12, finding 3: no rlimit is inherited from the service; the program sees exactly the
/// runtime's documented values (`sandbox-runtime` `init::FIXED_RLIMITS`) and the profile's
/// (python-default: nofile 1024, pids_max 128), even when the service runs with raised limits.
#[test]
fn rlimits_inside_are_the_documented_values() {
    let code = "import resource as r\nfor n in ['CPU','FSIZE','DATA','STACK','CORE','RSS','NPROC','NOFILE','MEMLOCK','AS','MSGQUEUE','NICE','RTPRIO','RTTIME','SIGPENDING']:\n    \
                s, h = r.getrlimit(getattr(r, 'RLIMIT_' + n))\n    print(n, 'inf' if s == r.RLIM_INFINITY else s, 'inf' if h == r.RLIM_INFINITY else h)";
    let mut c = sandbox(&["run", "--json", "--profile", "python-default", "-c", code]);
    if let Some(flag) = warm_flag() {
        c.arg(flag);
    }
    // The service itself runs with raised limits an administrator might give it.
    let mut c = with_raised_limits(c);
    let out = c.output().unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(json["status"], "ok", "{json:#}");
    let profile_fsize = json["stdout"].as_str().unwrap().lines().find(|l| l.starts_with("FSIZE")).unwrap().to_owned();
    let want = [
        "CPU inf inf",
        &profile_fsize,
        "DATA inf inf",
        "STACK 8388608 8388608",
        "CORE 1 1",
        "RSS inf inf",
        "NPROC 128 128",
        "NOFILE 1024 1024",
        "MEMLOCK 65536 65536",
        "AS inf inf",
        "MSGQUEUE 819200 819200",
        "NICE 0 0",
        "RTPRIO 0 0",
        "RTTIME 0 0",
        "SIGPENDING 4096 4096",
    ]
    .join("\n");
    assert_eq!(json["stdout"].as_str().unwrap().trim_end(), want, "{json:#}");
    assert_ne!(profile_fsize, "FSIZE inf inf");
}

/// Gives the CLI (and so the engine and helper) raised limits through `prlimit(1)`: an unlimited
/// stack and core size (soft; raising a hard limit needs CAP_SYS_RESOURCE, which the test host
/// may lack). The rest of what the service inherits (MEMLOCK 8 MiB, SIGPENDING and NPROC in the
/// tens of thousands, RTTIME unlimited on a usual host) already differs from the sandbox's values.
fn with_raised_limits(c: Command) -> Command {
    let mut p = Command::new("prlimit");
    p.args(["--stack=unlimited:", "--core=unlimited:", "--"]).arg(c.get_program()).args(c.get_args());
    p.env_remove("SANDBOX_LOG");
    p
}

/// Issue 12, finding 5: a local user delegated (part of) the sandboxes' host ids in
/// /etc/subuid or /etc/subgid could own sandbox processes and workspaces through `newuidmap`.
/// `doctor` fails naming the line and `serve` refuses to start; with Debian's default ranges
/// for three users (which the old default base 200000 overlapped) `serve` starts.
#[test]
fn uid_range_overlapping_subuid_or_subgid_is_refused() {
    let dir = tempfile::Builder::new().prefix("subid-").tempdir_in(&env().dir).unwrap().keep();
    let debian = "alice:100000:65536\nbob:165536:65536\ncarol:231072:65536\n";
    std::fs::write(dir.join("subuid"), debian).unwrap();
    std::fs::write(dir.join("subgid"), format!("{debian}mallory:{}:65536\n", UID_BASE + 60_000)).unwrap();
    let subgid = dir.join("subgid").display().to_string();
    let named = format!("{subgid} line 4: mallory owns {}..{}", UID_BASE + 60_000, UID_BASE + 125_536);

    let out = sandbox(&["doctor", "--json"]).env("SANDBOX_TEST_SUBID_DIR", &dir).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = report["checks"].as_array().unwrap().iter().find(|c| c["name"] == "subid").expect("a subid check").clone();
    assert_eq!(check["ok"], false, "{check}");
    assert!(check["detail"].as_str().unwrap().contains(&named), "{check}");

    let out = sandbox(&["serve", "--listen", "127.0.0.1:0"]).env("SANDBOX_TEST_SUBID_DIR", &dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&named) && stderr.contains("uid_base"), "{stderr}");

    // The twin: the same users without mallory; serve starts and prints its address.
    std::fs::write(dir.join("subgid"), debian).unwrap();
    let mut child = sandbox(&["serve", "--listen", "127.0.0.1:0", "--no-warm"])
        .env("SANDBOX_TEST_SUBID_DIR", &dir)
        .env("SANDBOX_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()), nix::sys::signal::Signal::SIGTERM).unwrap();
    child.wait().unwrap();
    assert!(line.contains("127.0.0.1:"), "serve did not start: {line:?}");
}

/// Issue 12, finding 10: an input file named after a standard-library module (`json.py`, which
/// the harness imports to send the return value) cannot replace it: /workspace comes after the
/// standard library and the environment on `sys.path`, while other inputs still import. The
/// python-analysis twin shows the environment's packages win over an input `numpy.py` too.
#[test]
fn an_input_named_like_a_module_in_use_cannot_replace_it() {
    let json = scratch_file("json.py", b"import sys\nsys.stderr.write('HIJACKED\\n')\nraise SystemExit(66)\n");
    let numpy = scratch_file("numpy.py", b"raise SystemExit(67)\n");
    let helper = scratch_file("helper.py", b"VALUE = 42\n");
    let files = [format!("json.py={}", json.display()), format!("numpy.py={}", numpy.display()), format!("helper.py={}", helper.display())];
    let mut args = vec!["--harness", "function"];
    for f in &files {
        args.extend_from_slice(&["--file", f]);
    }
    let code = "import helper, json, sys\ndef main(inp):\n    return {'helper': helper.VALUE, 'json': json.__file__, 'last': sys.path[-1]}\n";
    let r = run("python-default", code, &args);
    assert_eq!(r.status(), "ok", "{r:?}");
    assert_eq!(r.json["returnData"]["helper"], 42, "{r:?}");
    assert!(r.json["returnData"]["json"].as_str().unwrap().starts_with("/usr/lib/python3"), "{r:?}");
    assert_eq!(r.json["returnData"]["last"], "/workspace", "{r:?}");
    environments_installed();
    let code = "import numpy\ndef main(inp):\n    return numpy.__file__\n";
    let r = run("python-analysis", code, &args);
    assert_eq!(r.status(), "ok", "{r:?}");
    assert!(r.json["returnData"].as_str().unwrap().starts_with("/opt/sandbox/env/python/numpy/"), "{r:?}");
}

/// Issue 12, finding 10: at least Docker's /proc masks. Each path that exists on the host
/// reads as empty inside (an empty file or directory), so kernel addresses, interrupt counts,
/// timers, sound, ACPI and SCSI devices of the host are not visible.
#[test]
fn proc_paths_docker_masks_are_empty() {
    let code = "import os\nfor n in ['acpi','asound','interrupts','kcore','keys','latency_stats','timer_list','timer_stats','sched_debug','scsi','sysrq-trigger','kallsyms']:\n    \
                p = '/proc/' + n\n    if not os.path.exists(p):\n        print(n, 'absent')\n    elif os.path.isdir(p):\n        print(n, 'dir', len(os.listdir(p)))\n    \
                else:\n        print(n, 'file', len(open(p, 'rb').read()))";
    let lines = attempt(code);
    assert_eq!(lines.len(), 12, "{lines:?}");
    for line in lines {
        let (name, rest) = line.split_once(' ').unwrap();
        let host = Path::new("/proc").join(name);
        let want = if !host.exists() {
            "absent"
        } else if host.is_dir() {
            "dir 0"
        } else {
            "file 0"
        };
        assert_eq!(rest, want, "/proc/{name}");
    }
}

/// Issue 12, finding 10: the audit log (every caller's code and output) is readable by its owner
/// only; another local user is refused by the kernel.
#[test]
fn another_local_user_cannot_read_the_audit_log() {
    let r = run("python-default", "print('audited')", &[]);
    assert_eq!(r.status(), "ok", "{r:?}");
    let db = env().data.join("audit.db");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&db).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "{}", db.display());
    let out = Command::new("runuser").args(["-u", "nobody", "--", "cat"]).arg(&db).output().unwrap();
    assert!(!out.status.success(), "nobody read the audit log");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"), "{out:?}");
    // Its twin: a file nobody may read in the same directory is readable (the refusal is the
    // log's own mode, not the directory's).
    let open = env().data.join("readable-by-all");
    std::fs::write(&open, "x").unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let out = Command::new("runuser").args(["-u", "nobody", "--", "cat"]).arg(&open).output().unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// Issue 12, finding 10: a read-only mount is read-only all the way down. A writable tmpfs
/// mounted on the host below the profile's read-only `/data` directory stays read-only inside;
/// its twin, the read-write share, stays writable.
#[test]
fn a_writable_submount_below_a_read_only_mount_is_read_only_inside() {
    let sub = env().dir.join("dataset").join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    nix::mount::mount(Some("tmpfs"), &sub, Some("tmpfs"), nix::mount::MsFlags::empty(), Some("size=1m,mode=0777")).unwrap();
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
        }
    }
    let _guard = Unmount(sub.clone());
    let code = "import errno\nfor p in ('/data/sub/x', '/mnt/share/sub-twin'):\n    try:\n        open(p, 'w').write('x'); print('wrote', p)\n    except OSError as e:\n        print(errno.errorcode[e.errno], p)";
    let r = run("py-mounts", code, &[]);
    assert_eq!(r.stdout(), "EROFS /data/sub/x\nwrote /mnt/share/sub-twin\n", "{r:?}");
    assert!(!sub.join("x").exists());
}

/// A program reads every private page of its own memory (heap, stack, anonymous mappings) for
/// host-side names: the service's data directory, a path in the host's cgroup tree naming an
/// execution, an execution directory's `executions/<id>`. None may be there in any mode. A warm
/// program is a fork of its sandbox's init, which had parsed the execution's spawn spec (host
/// paths of the root, workspace, cgroup files and bind sources) in the same heap: it read
/// `/executions/<id>/root` there until a template's child got a spec without them. The needles
/// are written as `\xHH` escapes, so the program's own text never matches them.
#[test]
fn a_program_finds_no_host_path_in_its_own_memory() {
    const ID: &str = "[0-9a-f]{8}-[0-9a-f]{4}-";
    let hex = |s: &str| s.bytes().map(|b| format!("\\x{b:02x}")).collect::<String>();
    let needles = [hex(env().data.to_str().unwrap()), format!("{}[^\\x00]*{ID}", hex("/sys/fs/cgroup/")), format!("{}{ID}", hex("executions/"))];
    let code = format!(
        "import re\nneedles = [re.compile(p.encode()) for p in {needles:?}]\nregions = []\n\
         for line in open('/proc/self/maps'):\n    f = line.split()\n    \
             name = f[5] if len(f) > 5 else ''\n    \
             if f[1][0] == 'r' and not name.startswith('/') and name not in ('[vvar]', '[vvar_vclock]', '[vsyscall]', '[vdso]'):\n        \
                 regions.append([int(x, 16) for x in f[0].split('-')] + [name or 'anon'])\n\
         found = []\nwith open('/proc/self/mem', 'rb', 0) as mem:\n    \
             for lo, hi, name in regions:\n        \
                 try:\n            mem.seek(lo); data = mem.read(hi - lo)\n        \
                 except OSError:\n            continue\n        \
                 for n in needles:\n            \
                     found += [(name, data[max(0, m.start() - 16):m.end() + 40]) for m in n.finditer(data)]\n        \
                 del data\n\
         print('regions', len(regions) > 2)\nprint('found', found)"
    );
    // Not while a socket core_pattern is set: a warm program then stays non-dumpable, and
    // /proc/self/mem closed to it (attacks::a_forked_warm_programs_crash_never_reaches_a_socket_core_pattern).
    let _steady = core_pattern_turn(false);
    let r = run("python-default", &code, &[]);
    assert_eq!(r.status(), "ok", "{r:?}");
    assert_eq!(r.stdout(), "regions True\nfound []\n", "{r:?}");
}

/// The harness's bytecode is the service's: a program cannot write, replace or remove the copy
/// in its /code (read-only), does not see the data directory's cache, and the next cold run
/// loads exactly the cached bytes.
#[test]
fn a_program_cannot_alter_the_harness_bytecode_a_later_run_loads() {
    let lines = attempt(
        "import os\n\
         for what, act in [('write', lambda: open('/code/_sandbox_harness.pyc', 'r+b')), ('create', lambda: open('/code/_sandbox_harness.pyc.new', 'wb')),\n\
                           ('chmod', lambda: os.chmod('/code/_sandbox_harness.pyc', 0o666)), ('remove', lambda: os.remove('/code/_sandbox_harness.pyc'))]:\n    \
             try:\n        act()\n        print(what, 'done')\n    except OSError as e:\n        print(what, e.errno in (13, 30) or (e.errno == 2 and what != 'create'))\n\
         print('cache', any('bytecode' in l for l in open('/proc/self/mountinfo')))\n",
    );
    assert_eq!(lines, ["write True", "create True", "chmod True", "remove True", "cache False"]);
    // A cold run (in every mode) after it: its harness bytecode is the cache's, byte for byte.
    let out = sandbox(&["run", "--json", "-c", "import hashlib\nprint(hashlib.sha256(open('/code/_sandbox_harness.pyc', 'rb').read()).hexdigest())"])
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (_, pycs) = super::harness::harness_bytecode(&env().data);
    use sha2::Digest as _;
    assert_eq!(r["stdout"].as_str(), Some(format!("{}\n", hex::encode(sha2::Sha256::digest(&pycs[0]))).as_str()), "{r}");
}

/// Host-wide pools that no memory cgroup charges are refused by the seccomp filter with EPERM:
/// Linux AIO (one `io_setup` could take all of the host's `fs.aio-max-nr` events, failing every
/// other AIO user on the host until the run ends) and the host's reserved huge pages (taken past
/// the memory limit). Each refusal is EPERM, the filter's: without it, `io_setup` and the
/// `memfd_create` succeed and the huge page allocations fail with ENOMEM on a host with none
/// reserved (or succeed where some are).
#[test]
fn aio_and_reserved_huge_pages_are_refused() {
    let code = "import ctypes, errno, mmap, os\nlibc = ctypes.CDLL(None, use_errno=True)\n\
                def err(r):\n    return 'ok' if r != -1 else errno.errorcode[ctypes.get_errno()]\n\
                ctx = ctypes.c_ulong(0)\nprint('io_setup', err(libc.syscall(206, 1, ctypes.byref(ctx))))\n\
                try:\n    mmap.mmap(-1, 2 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40000); print('mmap ok')\n\
                except OSError as e:\n    print('mmap', errno.errorcode[e.errno])\n\
                try:\n    os.memfd_create('h', os.MFD_HUGETLB); print('memfd_create ok')\n\
                except OSError as e:\n    print('memfd_create', errno.errorcode[e.errno])";
    let lines = attempt(code);
    // (`shmget` with SHM_HUGETLB is refused too, but the kernel already refuses it without
    // CAP_IPC_LOCK outside `vm.hugetlb_shm_group`: no test here could tell the filter's EPERM.)
    assert_eq!(lines, ["io_setup EPERM", "mmap EPERM", "memfd_create EPERM"]);
}

/// A program's unread TCP buffers stay within its memory limit's bound on cgroup v1, which
/// charges them to a counter of their own, unlimited until a limit is written: loopback pairs
/// filled without reading queued ~800 MiB in a 512 MiB run before the execution's
/// `memory.kmem.tcp.limit_in_bytes` (a quarter of the memory limit), enough for a few runs to
/// push the host's TCP memory past its pressure level. (v2 charges socket memory to
/// `memory.max`.) The program stops at 200 MiB queued; it now stalls near 64 MiB (the run's
/// memory limit is 256 MiB).
#[test]
fn unread_tcp_buffers_stay_within_the_memory_limits_bound() {
    let code = "import socket\nls = socket.socket(); ls.bind(('127.0.0.1', 0)); ls.listen(200)\n\
                pairs, total, chunk = [], 0, b'x' * (1 << 20)\n\
                while total < (200 << 20) and len(pairs) < 150:\n    c = socket.socket()\n    \
                c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 30)\n    c.connect(ls.getsockname()); s, _ = ls.accept()\n    \
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 30)\n    c.setblocking(False)\n    \
                while True:\n        try:\n            total += c.send(chunk)\n        except BlockingIOError:\n            break\n    \
                pairs.append((c, s))\nprint(total >> 20)";
    let r = run("py-small", code, &[]);
    assert_eq!(r.status(), "ok", "{r:?}");
    let queued_mib: u64 = r.stdout().trim().parse().unwrap_or_else(|_| panic!("{r:?}"));
    if expected_cgroup_version() == "v1" {
        assert!(queued_mib <= 64 + 8, "{queued_mib} MiB of TCP buffers queued past a quarter of the 256 MiB memory limit: {r:?}");
    }
}
