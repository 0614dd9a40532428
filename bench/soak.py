"""Driver of bench/soak.sh (standard library only): N executions of a fixed mix through one
`sandbox serve`, then the leak checks. Usage: soak.py SANDBOX_BINARY N CONCURRENCY.

Prints the figures, one cargo-style line per check ("test soak::<check> ... ok|FAILED") and a
closing "test result: ..." line; exits 1 if any check failed.
"""
import collections, http.server, json, os, signal, sqlite3, subprocess, sys, tempfile, threading, time
import urllib.error, urllib.request

binary, total, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
# What the service's RSS may grow by between the end of the warm-up and the end of the run.
RSS_DRIFT_MAX_MIB = float(os.environ.get("SOAK_RSS_DRIFT_MAX_MIB", "16"))
# The allowlist's local test server: a documentation/benchmark address of its own, added to lo
# for the run (bench/network.sh uses 198.18.250.2; the two may run at once).
NET_ADDR = "198.18.251.7"
# Executions before the baseline is taken (templates started, pools filled, allocator arenas grown).
WARMUP = max(100, total // 20)

# The mix, per 20 executions: (kind, weight, profile, code, timeout ms, expected status).
FLOOD = "import sys\nchunk = 'x' * 65536 + '\\n'\nfor _ in range(64):\n    sys.stdout.write(chunk)\n"
FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
OOM = "blocks = []\nwhile True:\n    blocks.append(bytearray(8 << 20))\n"
MIX = [
    ("ok", 6, "python-default", "print(1)", None, "ok"),
    ("error", 3, "python-default", "raise SystemExit(3)", None, "error"),
    ("timeout", 2, "python-default", "import time\ntime.sleep(30)", 200, "timeout"),
    ("oom", 2, "soak-oom", OOM, None, "memory_limit"),
    ("flood", 2, "python-default", FLOOD, None, "output_limit"),
    ("fork_bomb", 1, "python-default", FORK_BOMB, 500, "timeout"),
    ("network", 2, "soak-net", None, None, "ok"),  # code set once the server's port is known
    ("typescript", 2, "typescript-default", "const n: number = 1;\nconsole.log(n);", None, "ok"),
]
# SOAK_ONLY=kind[,kind]: run only those kinds (to chase one failure).
ONLY = [k for k in os.environ.get("SOAK_ONLY", "").split(",") if k]
SCHEDULE = [m for m in MIX for _ in range(m[1]) if not ONLY or m[0] in ONLY]

results = []  # (name, passed, detail)
def check(name, passed, detail=""):
    results.append((name, bool(passed), detail))

def read_kib(pid, field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0

def fd_kinds(pid):
    """The service's open descriptors by kind (socket, pipe, anon_inode:..., tun, netns, file)."""
    kinds = collections.Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target == "/dev/net/tun":
            kinds["tun"] += 1
        elif target.startswith("net:["):
            kinds["netns"] += 1
        elif target.split(":")[0] in ("socket", "pipe", "anon_inode"):
            kinds[target.split(":[")[0]] += 1
        else:
            kinds["file"] += 1
    return kinds

def processes():
    """pid -> (ppid, start time) of every process on the host."""
    out = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                stat = open(f"/proc/{p}/stat").read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            out[int(p)] = (int(fields[1]), int(fields[19]))
    return out

def descendants(root):
    procs = processes()
    children = collections.defaultdict(list)
    for pid, (ppid, _) in procs.items():
        children[ppid].append(pid)
    found, todo = {}, [root]
    while todo:
        for c in children.get(todo.pop(), []):
            found[c] = procs[c][1]
            todo.append(c)
    return found

def live_descendants(root):
    """How many of `root`'s descendants are running (not zombies). A template reaps the children
    it forked when the next fork request comes (template.py `serve`), so the last executions of
    each template wait there as zombies until then: they hold a pid but no memory, descriptors
    or mounts, and their number is bounded by the concurrency, not the executions served."""
    n = 0
    for p in descendants(root):
        try:
            stat = open(f"/proc/{p}/stat").read()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] != "Z":
            n += 1
    return n

def netns_of(pid):
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None

def host_tuns():
    return {d for d in os.listdir("/sys/class/net") if os.path.exists(f"/sys/class/net/{d}/tun_flags")}

def mount_lines(pid):
    return open(f"/proc/{pid}/mountinfo").read().splitlines()

def main():
    work = tempfile.mkdtemp(prefix="sandbox-soak-")
    os.chmod(work, 0o755)
    data = os.path.join(work, "data")
    added = subprocess.run(["ip", "addr", "add", f"{NET_ADDR}/32", "dev", "lo"], capture_output=True).returncode == 0
    try:
        run(work, data)
    finally:
        if added:
            subprocess.run(["ip", "addr", "del", f"{NET_ADDR}/32", "dev", "lo"], capture_output=True)
        subprocess.run(["rm", "-rf", work])
    failed = [r for r in results if not r[1]]
    for name, passed, detail in results:
        print(f"test soak::{name} ... {'ok' if passed else 'FAILED'}{'  (' + detail + ')' if detail else ''}")
    print(f"\ntest result: {'ok' if not failed else 'FAILED'}. {len(results) - len(failed)} passed; {len(failed)} failed; 0 ignored; 0 measured; 0 filtered out")
    sys.exit(1 if failed else 0)

class Hello(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")
    def log_message(self, *a):
        pass

def run(work, data):
    httpd = http.server.ThreadingHTTPServer((NET_ADDR, 0), Hello)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    net_code = f"import urllib.request\nprint(urllib.request.urlopen('http://{NET_ADDR}:{port}/', timeout=10).read().decode())"
    config = os.path.join(work, "config.toml")
    with open(config, "w") as f:
        f.write(f"[service]\nmax_concurrency = {concurrency}\nqueue_max = 256\nrefusals_per_minute = 0\n"
                '[profiles.soak-oom]\nlanguage = "python"\n[profiles.soak-oom.limits]\nmemory_max_bytes = 67108864\n'
                '[profiles.soak-oom.warm]\nmode = "template"\n'
                f'[profiles.soak-net]\nlanguage = "python"\n[profiles.soak-net.network]\nallow = ["{NET_ADDR}:{port}"]\n')
    tuns_before = host_tuns()
    # Where execution cgroups live on cgroup v1 (each hierarchy's sandbox/; v2: below the service's own).
    cgroup_roots = [os.path.join("/sys/fs/cgroup", c, "sandbox") for c in os.listdir("/sys/fs/cgroup")]
    cgroup_roots = [r for r in cgroup_roots if os.path.isdir(r)]
    server = subprocess.Popen([binary, "--config", config, "--data-dir", data, "serve", "--listen", "127.0.0.1:0"],
                              stdout=subprocess.PIPE, stderr=open(os.path.join(work, "serve.log"), "w"), text=True)
    line = server.stdout.readline()
    if "listening" not in line:
        check("service_started", False, open(os.path.join(work, "serve.log")).read()[-2000:])
        return
    url = line.split()[2]
    pid = server.pid
    own_cgroups = [l.split(":", 2) for l in open(f"/proc/{pid}/cgroup").read().splitlines()]
    executions_dir = os.path.join(data, "executions")

    # Everything the service ever ran: ids seen in its executions directory and in results,
    # processes below it and their network namespaces (sampled while the run goes on).
    seen_ids, seen_procs, seen_netns = set(), {}, set()
    stop = threading.Event()
    peak = [0]
    def watch():
        while not stop.is_set():
            try:
                seen_ids.update(os.listdir(executions_dir))
            except OSError:
                pass
            for p, start in descendants(pid).items():
                if p not in seen_procs:
                    seen_procs[p] = start
                    ns = netns_of(p)
                    if ns:
                        seen_netns.add(ns)
            try:
                peak[0] = max(peak[0], read_kib(pid, "VmRSS"))
            except OSError:
                pass
            stop.wait(0.25)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    service_netns = netns_of(pid)

    lock = threading.Lock()
    statuses = collections.Counter()
    wrong = collections.Counter()
    problems = []
    latencies = collections.defaultdict(list)
    def execute(i):
        kind, _, profile, code, timeout, want = SCHEDULE[i % len(SCHEDULE)]
        body = {"profile": profile, "code": code if code is not None else net_code}
        if timeout:
            body["timeout"] = timeout
        req = urllib.request.Request(f"{url}/v1/executions", data=json.dumps(body).encode(), headers={"content-type": "application/json"})
        t = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                result = json.load(r)
            got = result["status"]
            seen_ids.add(result.get("executionId", ""))
            good = got == want and (kind not in ("ok", "typescript") or result["stdout"] == "1\n") \
                and (kind != "network" or result["stdout"] == "hello\n")
        except urllib.error.HTTPError as e:
            got, good = f"http {e.code}", False
            try:
                problem = json.load(e)
            except ValueError:
                problem = {}
            with lock:
                problems.append(f"{kind}: {e.code} {problem.get('code')} {problem.get('detail')!r} {problem.get('executionId')}")
        except Exception as e:  # noqa: BLE001 - every failure is counted and shown
            got, good = f"failed {type(e).__name__}", False
        dt = (time.perf_counter() - t) * 1000
        with lock:
            statuses[f"{kind}:{got}"] += 1
            latencies[kind].append(dt)
            if not good:
                wrong[f"{kind}:{got}"] += 1

    def drive(first, last):
        index = [first]
        def worker():
            while True:
                with lock:
                    if index[0] >= last:
                        return
                    i = index[0]
                    index[0] += 1
                execute(i)
                if total >= 2000 and (i + 1) % (total // 10) == 0:
                    print(f"{i + 1}/{total} executions, {time.perf_counter() - start:.0f} s, service RSS {read_kib(pid, 'VmRSS') / 1024:.1f} MiB", flush=True)
        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        for t in threads: t.start()
        for t in threads: t.join()

    def metrics():
        out = {}
        for line in urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode().splitlines():
            if line.startswith("sandbox_warm_"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def settle():
        """Waits (at most 30 s) until every pool is full, every template ready, and the service's
        descriptors, children and mounts have not changed for a second; returns that state."""
        last, stable_since, deadline = None, time.monotonic(), time.monotonic() + 30
        while time.monotonic() < deadline:
            m = metrics()
            full = all(m.get(k.replace("_pool_ready", "_pool_size")) == v for k, v in m.items() if "_pool_ready" in k) \
                and all(v == 1 for k, v in m.items() if "_template_ready" in k)
            # A pooled sandbox holding a run file has taken an execution: it is one.
            taken = lambda n: n.startswith("pool-") and any(  # noqa: E731
                os.path.exists(os.path.join(executions_dir, n, code, "_sandbox_run.json")) for code in ("code", "warm/code"))
            entries = sorted(n + (" (taken)" if taken(n) else "") for n in os.listdir(executions_dir)) if os.path.isdir(executions_dir) else []
            state = (full, sum(fd_kinds(pid).values()), live_descendants(pid), len(mount_lines(pid)), tuple(entries))
            if state != last or not full:
                last, stable_since = state, time.monotonic()
            elif time.monotonic() - stable_since >= 1.0:
                break
            time.sleep(0.1)
        return {"fds": fd_kinds(pid), "children": live_descendants(pid), "mounts": len(mount_lines(pid)),
                "entries": last[4] if last else (), "rss_kib": read_kib(pid, "VmRSS"), "warm": metrics(),
                "host_mounts": sum(data in l for l in mount_lines(1))}

    start = time.perf_counter()
    drive(0, min(WARMUP, total))
    base = settle()
    # The baseline of children is the most a settled service showed over a few seconds: a pool
    # member or template between its start and its ready byte is one process short of its steady
    # shape, and a baseline taken then would make the steady end look like growth. A leak, one
    # process or more per leaked execution, still shows over hundreds of executions.
    for _ in range(3):
        time.sleep(1)
        again = settle()
        if again["children"] > base["children"]:
            base["children"] = again["children"]
    drive(min(WARMUP, total), total)
    wall = time.perf_counter() - start
    end = settle()
    # A template replaced or a pool refilled at the last moment can hold one more process for a
    # while (an old template's init waits for its last children): settle again, a few times.
    for _ in range(5):
        if end["children"] <= base["children"]:
            break
        time.sleep(2)
        end = settle()
    stop.set()
    watcher.join()

    # Figures.
    pct = lambda v, f: sorted(v)[min(len(v) - 1, int(f * len(v)))] if v else float("nan")
    print(f"{total} executions, concurrency {concurrency}, {wall:.1f} s, {total / wall:.1f} executions/s")
    print("kind: count, p50 / p99 ms")
    for kind, *_ in MIX:
        print(f"  {kind}: {len(latencies[kind])}, {pct(latencies[kind], .5):.0f} / {pct(latencies[kind], .99):.0f}")
    print("statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())))
    print(f"service RSS: {base['rss_kib'] / 1024:.1f} MiB after the {WARMUP} warm-up executions, "
          f"{end['rss_kib'] / 1024:.1f} MiB at the end (drift {(end['rss_kib'] - base['rss_kib']) / 1024:+.1f} MiB, "
          f"bound {RSS_DRIFT_MAX_MIB:.0f}), peak {peak[0] / 1024:.1f} MiB")
    print(f"service descriptors: {dict(base['fds'])} after warm-up, {dict(end['fds'])} at the end")
    print(f"children (templates, pools): {base['children']} / {end['children']}; mounts in the service's view: "
          f"{base['mounts']} / {end['mounts']}; host mounts under the data directory: {base['host_mounts']} / {end['host_mounts']}")
    print(f"executions directory: {list(base['entries'])} / {list(end['entries'])}")
    print("warm: " + ", ".join(f"{k.removeprefix('sandbox_')} {v:g}" for k, v in sorted(end["warm"].items()) if "_bytes" not in k))
    print(f"sampled while running: {len(seen_procs)} processes, {len(seen_netns - {service_netns})} network namespaces, {len(seen_ids)} ids")

    for p in problems[:5]:
        print(f"problem answer: {p}")
        ids = [w for w in p.split() if w.count("-") == 4]
        for line in open(os.path.join(work, "serve.log")):
            if any(i in line for i in ids):
                print(f"  serve.log: {line.rstrip()[:400]}")
    check("every_execution_had_its_expected_status", not wrong and sum(statuses.values()) == total,
          ", ".join(f"{k} {v}" for k, v in wrong.items()))
    # While the service runs: back to the state after the warm-up.
    check("service_descriptors_do_not_grow", sum(end["fds"].values()) <= sum(base["fds"].values()) and end["fds"]["tun"] == 0 and end["fds"]["netns"] <= base["fds"]["netns"],
          f"{dict(base['fds'])} -> {dict(end['fds'])}")
    check("service_children_do_not_grow", end["children"] <= base["children"], f"{base['children']} -> {end['children']}")
    check("service_mounts_do_not_grow", end["mounts"] <= base["mounts"] and end["host_mounts"] <= base["host_mounts"])
    waiting = lambda e: e.startswith(("template-", "pool-")) and not e.endswith(" (taken)")  # noqa: E731
    check("only_templates_and_waiting_pools_in_executions_dir", all(waiting(e) for e in end["entries"]),
          ", ".join(e for e in end["entries"] if not waiting(e)))
    drift_mib = (end["rss_kib"] - base["rss_kib"]) / 1024
    check("service_rss_drift_within_bound", drift_mib <= RSS_DRIFT_MAX_MIB, f"{drift_mib:+.1f} MiB, bound {RSS_DRIFT_MAX_MIB:.0f}")
    live = [i for i in seen_ids if i and not i.startswith(("template-", "pool-"))
            and any(os.path.isdir(os.path.join(r, i)) for r in cgroup_roots)]
    check("no_execution_cgroup_left_while_serving", not live, ", ".join(live[:5]))

    # Then stop it: nothing at all may be left.
    server.send_signal(signal.SIGTERM)
    try:
        code = server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        code = server.wait()
    check("service_stops_cleanly_on_sigterm", code == 0, f"exit {code}")
    left = os.listdir(executions_dir) if os.path.isdir(executions_dir) else []
    check("no_execution_directory_left", not left, ", ".join(left[:5]))
    host_mounts = [l for l in mount_lines(1) + mount_lines(os.getpid()) if data in l]
    check("no_mount_left", not host_mounts, "; ".join(host_mounts[:3]))
    cgroups = [os.path.join(r, i) for r in cgroup_roots for i in seen_ids if i and os.path.isdir(os.path.join(r, i))]
    # The service's own cgroup (v2: <own>/sandbox/<id> lives there) holds no execution either.
    for _, controllers, path in own_cgroups:
        for root in [os.path.join("/sys/fs/cgroup", c or "unified") for c in controllers.split(",")]:
            sub = os.path.join(root + path, "sandbox")
            if os.path.isdir(sub):
                cgroups += [os.path.join(sub, d) for d in os.listdir(sub) if d in seen_ids]
    check("no_cgroup_left", not cgroups, ", ".join(cgroups[:5]))
    # Helpers and pooled sandboxes die with the service (PR_SET_PDEATHSIG), a moment after it:
    # a process of it still alive 10 s after the service exited is a leak.
    def describe(p, now):
        try:
            return f"{p} {open(f'/proc/{p}/cmdline').read().replace(chr(0), ' ').strip()[:60]!r} ppid {now[p][0]}"
        except OSError:
            return str(p)
    exited, lingering, deadline = time.monotonic(), None, time.monotonic() + 10
    while True:
        now = processes()
        alive = [p for p, start in seen_procs.items() if p in now and now[p][1] == start]
        if lingering is None:
            lingering = [describe(p, now) for p in alive]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    print(f"processes of the service alive when it exited: {len(lingering)} {lingering[:3]}; "
          f"all gone {time.monotonic() - exited:.2f} s later" if not alive else "")
    check("no_process_left", not alive, ", ".join(describe(p, now) for p in alive[:5]))
    held = set()
    for p in now:
        if p == os.getpid():
            continue
        ns = netns_of(p)
        if ns in seen_netns and ns != service_netns:
            held.add(ns)
        try:
            for fd in os.listdir(f"/proc/{p}/fd"):
                try:
                    t = os.readlink(f"/proc/{p}/fd/{fd}")
                except OSError:
                    continue
                if t in seen_netns and t != service_netns:
                    held.add(t)
        except OSError:
            pass
    check("no_network_namespace_left", not held, ", ".join(sorted(held)[:5]))
    # TUN devices live in the sandboxes' network namespaces; none may appear in the host's.
    tuns = host_tuns() - tuns_before
    check("no_tun_device_in_the_host_namespace", not tuns, ", ".join(sorted(tuns)))

    db = sqlite3.connect(f"file:{os.path.join(data, 'audit.db')}?mode=ro", uri=True)
    kinds = dict(db.execute("SELECT kind, COUNT(*) FROM audit_events GROUP BY kind").fetchall())
    records = db.execute("SELECT COUNT(DISTINCT execution_id) FROM audit_events").fetchone()[0]
    db.close()
    print(f"audit log: {records} records, events {kinds}")
    check("audit_records_equal_executions", records == total and kinds.get("begin") == total and kinds.get("finish") == total
          and not kinds.get("rejected") and not kinds.get("interrupted"), f"{records} records, {kinds}")
    verify = subprocess.run([binary, "--data-dir", data, "audit", "verify"], capture_output=True, text=True)
    check("audit_chain_verifies", verify.returncode == 0, (verify.stdout + verify.stderr).strip()[-300:])
    httpd.shutdown()

main()
