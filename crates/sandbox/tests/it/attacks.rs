//! Hostile programs: each tries to escape or to learn about the host, and each test asserts how it
//! was stopped (errno, missing path, empty listing), not merely that something failed.

use std::io::Read as _;

use super::*;

/// Runs `code` (which prints one line per attempt) and returns its stdout lines.
fn attempt(code: &str) -> Vec<String> {
    let r = run("python-default", code, &[]);
    assert_eq!(r.status(), "ok", "{r:?}");
    r.stdout().lines().map(str::to_owned).collect()
}

#[test]
fn host_secret_file_is_invisible() {
    let secret = scratch_file("secret.txt", b"TOP-SECRET-VALUE");
    let code = format!(
        "import os\nfor p in [{:?}, '/root/.bashrc', '/etc/shadow', '/home']:\n    \
         try:\n        open(p).read(); print('READ', p)\n    except OSError as e:\n        print(type(e).__name__, e.errno)",
        secret.to_str().unwrap()
    );
    let lines = attempt(&code);
    assert_eq!(lines, ["FileNotFoundError 2", "FileNotFoundError 2", "FileNotFoundError 2", "FileNotFoundError 2"]);
}

#[test]
fn host_processes_and_pid1_are_invisible() {
    let code = "import os\npids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\nprint(pids == [os.getpid()], os.getpid())\n\
                print(os.path.exists('/proc/1'))\nprint(all(l.endswith(':/') for l in open('/proc/self/cgroup').read().split()))\nprint(os.uname().nodename)";
    let lines = attempt(code);
    assert_eq!(lines[0], "True 2", "only the program itself is visible, as pid 2 (init is pid 1): {lines:?}");
    assert_eq!(lines[1], "False", "pid 1 (init, root of the namespace) is hidden");
    assert_eq!(lines[2], "True", "the cgroup namespace hides the host's cgroup paths: {lines:?}");
    assert_eq!(lines[3], "sandbox");
}

#[test]
fn no_host_paths_leak_through_mountinfo_or_cmdline() {
    let r = run("python-default", "import os\nprint(open('/proc/self/mountinfo').read())\nprint(os.listdir('/proc/self/fd'))", &[]);
    let data = env().data.to_str().unwrap();
    assert!(!r.stdout().contains(data), "mountinfo shows the data directory: {r:?}");
    assert!(!r.stdout().contains("/work/"), "{r:?}");
    let last = r.stdout().lines().last().unwrap();
    // stdio, listdir's own fd (3) and the harness's side channel (4, a pipe only the engine reads).
    assert_eq!(last, "['0', '1', '2', '3', '4']", "no other fd of the service leaks");
}

#[test]
fn root_filesystem_is_read_only() {
    let code = "import errno\nfor p in ['/x', '/usr/x', '/etc/passwd', '/code/main.py', '/usr/bin/python3']:\n    \
                try:\n        open(p, 'a').write('x'); print('WROTE', p)\n    except OSError as e:\n        print(errno.errorcode[e.errno])";
    let lines = attempt(code);
    for l in &lines {
        assert!(l == "EROFS" || l == "EACCES", "write must fail with EROFS or EACCES: {lines:?}");
    }
    assert_eq!(lines.len(), 5);
}

#[test]
fn host_loopback_services_are_unreachable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let code = format!(
        "import socket, errno\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3); print('CONNECTED')\n\
         except OSError as e:\n    print(errno.errorcode.get(e.errno, e))\nimport os\nprint(sorted(os.listdir('/sys/class/net')) if os.path.exists('/sys/class/net') else 'no-sys')"
    );
    let lines = attempt(&code);
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
    let lines = attempt("import socket\nprint(sorted(n for _, n in socket.if_nameindex()))");
    assert_eq!(lines, ["['lo']"]);
}

#[test]
fn dangerous_syscalls_fail_with_eperm() {
    // x86-64 numbers: mount 165, umount2 166, unshare 272, setns 308, ptrace 101, bpf 321,
    // keyctl 250, init_module 175, perf_event_open 298, io_uring_setup 425, pivot_root 155, chroot 161.
    let code = "import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\n\
                calls = {'mount': (165, 0, 0, 0, 0, 0), 'umount2': (166, 0, 0), 'unshare': (272, 0x10000000), 'setns': (308, 0, 0),\n\
                'ptrace': (101, 16, 1, 0, 0), 'bpf': (321, 0, 0, 0), 'keyctl': (250, 0, 0), 'init_module': (175, 0, 0, 0),\n\
                'perf_event_open': (298, 0, 0, -1, -1, 0), 'io_uring_setup': (425, 1, 0), 'pivot_root': (155, 0, 0), 'chroot': (161, 0)}\n\
                for name, args in calls.items():\n    ctypes.set_errno(0)\n    r = libc.syscall(*args)\n    print(name, r, errno.errorcode.get(ctypes.get_errno()))";
    let lines = attempt(code);
    assert_eq!(lines.len(), 12);
    for l in &lines {
        assert!(l.ends_with(" -1 EPERM"), "every call must be refused with EPERM: {lines:#?}");
    }
}

#[test]
fn new_namespaces_via_clone_are_refused() {
    // clone(2) (56) with CLONE_NEWUSER | SIGCHLD and no stack, i.e. fork into a new user namespace.
    let code = "import ctypes, errno, os\nlibc = ctypes.CDLL(None, use_errno=True)\nfor flag in (0x10000000, 0x20000000, 0x40000000, 0x00020000):\n    \
                r = libc.syscall(56, flag | 17, 0, 0, 0, 0)\n    if r == 0: os._exit(0)\n    print(r, errno.errorcode.get(ctypes.get_errno()))";
    assert_eq!(attempt(code), ["-1 EPERM", "-1 EPERM", "-1 EPERM", "-1 EPERM"]);
}

#[test]
fn cannot_become_root_and_holds_no_capabilities() {
    let code = "import os, errno\nfor f in (lambda: os.setuid(0), lambda: os.setgid(0), lambda: os.setgroups([0])):\n    try:\n        f(); print('BECAME ROOT')\n    except OSError as e:\n        print(errno.errorcode[e.errno])\n\
                st = dict(l.split(':\\t') for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n\
                print(os.getuid(), os.getgid(), os.getgroups())\nfor k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp'):\n    print(k, st[k].strip())\n\
                print(open('/proc/self/uid_map').read().split())";
    let lines = attempt(code);
    assert_eq!(&lines[..3], ["EPERM", "EPERM", "EPERM"]);
    assert_eq!(lines[3], "1000 1000 []");
    for (i, k) in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"].iter().enumerate() {
        assert_eq!(lines[4 + i], format!("{k} 0000000000000000"));
    }
    assert_eq!(lines[9], "NoNewPrivs 1");
    assert_eq!(lines[10], "Seccomp 2");
    // uid 0 inside is host 200000: nothing inside maps to host root.
    assert_eq!(lines[11], "['0', '200000', '65536']");
}

#[test]
fn landlock_blocks_paths_outside_the_rules_even_through_proc() {
    // /proc/self/root is the sandbox root; reading files through it is allowed only where the rules allow.
    let code = "import os, errno\nfor p in ['/proc/self/root/etc/passwd', '/workspace/../etc/hostname']:\n    \
                try:\n        open(p).read(); print('read')\n    except OSError as e:\n        print(errno.errorcode[e.errno])";
    let lines = attempt(code);
    assert_eq!(lines, ["read", "read"], "the synthesized /etc is readable; nothing outside exists: {lines:?}");
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
    let mut child = sandbox(&["run", "--profile", "python-default", "-c", code]).stdout(std::process::Stdio::piped()).spawn().unwrap();
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
    let probe = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat", &format!("{ws}/secret.txt")])
        .output()
        .unwrap();
    assert!(!probe.status.success(), "nobody read the workspace: {probe:?}");
    assert!(String::from_utf8_lossy(&probe.stderr).contains("Permission denied"), "{probe:?}");
    child.wait().unwrap();
}
