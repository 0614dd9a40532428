"""bench/warm.sh's measuring half: see that script. Arguments: N COLD_URL WARM_URL WARM_PID
PYTHON SITE CSV ROOT [REF_URL] (REF_URL: a reference build's warm server, or empty)."""

import concurrent.futures
import http.client
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

n = int(sys.argv[1])
cold_url, warm_url, warm_pid = sys.argv[2], sys.argv[3], int(sys.argv[4])
py, site, csv, root = sys.argv[5], sys.argv[6], sys.argv[7], sys.argv[8]
ref_url = sys.argv[9] if len(sys.argv) > 9 else ""
# Each mode a job runs in, and its server.
MODES = [("cold", cold_url), ("warm", warm_url)] + ([("warm (reference)", ref_url)] if ref_url else [])

with open(csv, encoding="utf-8") as f:
    CSV_TEXT = f.read()
with open(os.path.join(root, "examples/data-analyst/analysis.py"), encoding="utf-8") as f:
    ANALYSIS_PY = f.read()
with open(os.path.join(root, "examples/data-analyst/analysis.ts"), encoding="utf-8") as f:
    ANALYSIS_TS = f.read()

JOBS = {
    "print(1)": {"profile": "python-default", "language": "python", "code": "print(1)"},
    "data-analyst.py": {"profile": "python-analysis", "language": "python", "code": ANALYSIS_PY, "files": {"data.csv": CSV_TEXT}},
    "data-analyst.ts (function)": {
        "profile": "typescript-analysis",
        "language": "typescript",
        "harness": "function",
        "code": ANALYSIS_TS,
        "files": {"data.csv": CSV_TEXT},
    },
}

local = threading.local()


def post(url, body):
    """One execution over a kept-alive connection of this thread; returns (ms, result)."""
    u = urllib.parse.urlparse(url)
    conns = getattr(local, "conns", None)
    if conns is None:
        conns = local.conns = {}
    conn = conns.get(url)
    if conn is None:
        conn = conns[url] = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
    data = json.dumps(body).encode()
    t = time.perf_counter()
    conn.request("POST", "/v1/executions", body=data, headers={"content-type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read()
    ms = (time.perf_counter() - t) * 1000
    r = json.loads(raw)
    if resp.status != 200 or r.get("status") != "ok":
        sys.exit(f"{url} {body['profile']}: HTTP {resp.status}: {raw[:500]!r}")
    return ms, r


def pct(xs, p):
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


# Wait until the warm servers' templates are ready.
deadline = time.time() + 300
for url in [u for mode, u in MODES if mode != "cold"]:
    for job in ("print(1)", "data-analyst.py"):
        while True:
            _, r = post(url, JOBS[job])
            if r["timing"].get("warm"):
                break
            if time.time() > deadline:
                sys.exit(f"the warm server {url} never started {job} warm")
            time.sleep(0.5)

# The floor: the same job in-process in a host Python that has already imported its libraries.
FLOOR = r"""
import io, os, runpy, sys, tempfile, time, contextlib
import pandas, matplotlib.pyplot as plt
csv = sys.argv[1]
for line in sys.stdin:
    d = tempfile.mkdtemp()
    os.symlink(csv, os.path.join(d, "data.csv"))
    os.chdir(d)
    t = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        runpy.run_path(sys.argv[2], run_name="__main__")
    plt.close("all")
    print((time.perf_counter() - t) * 1000, flush=True)
"""
# Every directory the host-side variants make (the floors' per-job directories, matplotlib's
# cache, the fork floor's socket) is under this one, removed at the end.
scratch = tempfile.mkdtemp()
host_env = dict(os.environ, PYTHONPATH=site, MPLBACKEND="Agg", MPLCONFIGDIR=os.path.join(scratch, "mpl"), TMPDIR=scratch)
floor = subprocess.Popen([py, "-S", "-c", FLOOR, csv, os.path.join(root, "examples/data-analyst/analysis.py")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=host_env)


def floor_once():
    floor.stdin.write("go\n")
    floor.stdin.flush()
    return float(floor.stdout.readline())


# The fork floor (bench/fork_floor.py): the same job in a child forked per request from a host
# Python that has imported its libraries, run the job and frozen its heap, with no sandbox: what
# any fork-based warm start costs here before isolation adds anything.
fork_socket = os.path.join(scratch, "fork-floor.sock")
fork_floor = subprocess.Popen([py, "-S", os.path.join(root, "bench/fork_floor.py"), csv, os.path.join(root, "examples/data-analyst/analysis.py"), fork_socket],
                              stdout=subprocess.PIPE, text=True, env=host_env)
if fork_floor.stdout.readline().strip() != "ready":
    sys.exit("the fork floor did not start")


def fork_once():
    """One job in a child of the fork floor, over this thread's connection; returns ms (client side)."""
    conn = getattr(local, "fork_conn", None)
    if conn is None:
        conn = local.fork_conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(fork_socket)
        local.fork_reply = conn.makefile("r", encoding="ascii")
    t = time.perf_counter()
    conn.sendall(b"\n")
    status, _ = local.fork_reply.readline().split()
    ms = (time.perf_counter() - t) * 1000
    if status != "0":
        sys.exit(f"the fork floor's child exited {status}")
    return ms


work = tempfile.mkdtemp(dir=scratch)
os.symlink(csv, os.path.join(work, "data.csv"))


def process(argv, env=None, cwd=None):
    t = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - t) * 1000


variants = [("host python3 -c pass (process)", lambda: process([py, "-c", "pass"]))]
for job in JOBS:
    for mode, url in MODES:
        variants.append((f"{job}: {mode}", lambda url=url, job=job: post(url, JOBS[job])))
variants += [
    ("data-analyst.py: host python3 (process)", lambda: process([py, "-S", os.path.join(root, "examples/data-analyst/analysis.py")], host_env, work)),
    ("data-analyst.py: in-process floor", floor_once),
    ("data-analyst.py: fork floor (no sandbox)", fork_once),
]

for _, f in variants:  # warm-up: page cache, connections
    f()
times = {name: [] for name, _ in variants}
memory = {name: [] for name, _ in variants}
warm_flags = {name: [] for name, _ in variants}
t0 = time.perf_counter()
# Each round runs the variants in a new random order (seeded, so runs repeat): a run pays part
# of the one before it (a server refills its pool or spare after each execution), and in a fixed
# or rotated order each variant would always follow the same neighbour (a build measured beside
# a copy of itself came out 5-6 ms slower on the pooled jobs, following the other's refill).
order = random.Random(11)
for _ in range(n):
    for name, f in order.sample(variants, len(variants)):
        out = f()
        if isinstance(out, tuple):
            ms, r = out
            memory[name].append(r["resourceUsage"]["peakMemoryBytes"])
            warm_flags[name].append(r["timing"].get("warmStart") if r["timing"].get("warm", False) else None)
        else:
            ms = out
        times[name].append(ms)
elapsed = time.perf_counter() - t0
print(f"warm starts: sequential, N={n} interleaved runs per variant ({elapsed:.1f} s), end to end over HTTP")
print(f"{'variant':<44} {'p50 ms':>9} {'p99 ms':>9} {'child peak MiB':>15} {'warm (how)':>16}")
for name, _ in variants:
    xs = times[name]
    mem = f"{pct(memory[name], 50) / 2**20:.1f}" if memory[name] else "-"
    hows = sorted({h for h in warm_flags[name] if h})
    warm = f"{sum(1 for h in warm_flags[name] if h)}/{len(warm_flags[name])} {','.join(hows)}" if warm_flags[name] else "-"
    print(f"{name:<44} {pct(xs, 50):>9.1f} {pct(xs, 99):>9.1f} {mem:>15} {warm:>16}")

bare = pct(times["host python3 -c pass (process)"], 50)
warm_print = pct(times["print(1): warm"], 50)
floor_ms = pct(times["data-analyst.py: in-process floor"], 50)
warm_job = pct(times["data-analyst.py: warm"], 50)
print(f"warm print(1) p50 {warm_print:.1f} ms vs bare host python3 -c pass {bare:.1f} ms ({warm_print / bare:.2f}x)")
print(f"warm data-analyst p50 {warm_job:.1f} ms vs in-process floor {floor_ms:.1f} ms (+{warm_job - floor_ms:.1f} ms)")
fork_ms = pct(times["data-analyst.py: fork floor (no sandbox)"], 50)
print(f"warm data-analyst p50 {warm_job:.1f} ms vs fork floor {fork_ms:.1f} ms (+{warm_job - fork_ms:.1f} ms: the sandbox's own cost on a forked start)")
if ref_url:
    for job in JOBS:
        new, old = pct(times[f"{job}: warm"], 50), pct(times[f"{job}: warm (reference)"], 50)
        print(f"warm {job} p50 {new:.1f} ms vs the reference build's {old:.1f} ms ({new - old:+.1f} ms)")


def busy_ms():
    """CPU time spent by every core of this machine so far (all but idle and iowait), in ms
    (/proc/stat's first line, in USER_HZ ticks)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) * 1000 / os.sysconf("SC_CLK_TCK")


def settle(quiet=0.1, window_s=0.2, limit_s=10):
    """Waits until the machine is quiet (all cores busy less than `quiet` of a window, or
    `limit_s`): the block before has refilled its pools and spares. Without it each block paid
    for the previous one's refill, and with the seeded order the same modes always followed
    the same neighbours: TypeScript at concurrency 2 read 8-12% apart for two builds in three
    runs, where bench/ab.sh (1.5 s between bursts) read them within 2%."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        busy = busy_ms()
        time.sleep(window_s)
        if busy_ms() - busy < quiet * window_s * 1000 * os.cpu_count():
            return


print()
print("throughput (executions/s) from C client threads, in ROUNDS rounds of M requests per mode,")
print("the modes in a new random order each round (their totals), each block begun on a quiet machine;")
print("CPU: all cores' busy time per execution (the server, its sandboxes and this client), which")
print("bounds the rate at C >= cores")
rounds = int(os.environ.get("ROUNDS", "3"))
throughput = {}
for job, m in (("print(1)", 20), ("data-analyst.py", 16), ("data-analyst.ts (function)", 20)):
    runs = [(mode, lambda url=url: post(url, JOBS[job])) for mode, url in MODES]
    if job == "data-analyst.py":
        runs.append(("fork floor", fork_once))
    for c in (2, 8):
        # Interleaved, as the sequential runs are: one block per mode gave figures that moved
        # by 10% between runs of the same builds (the machine's speed drifts within a minute).
        totals = {mode: [0, 0.0, 0.0] for mode, _ in runs}  # requests, seconds, busy ms
        for _ in range(rounds):
            for mode, once in order.sample(runs, len(runs)):
                settle()
                busy = busy_ms()
                t = time.perf_counter()
                with concurrent.futures.ThreadPoolExecutor(c) as pool:
                    list(pool.map(lambda _: once(), range(m)))
                total = totals[mode]
                total[0] += m
                total[1] += time.perf_counter() - t
                total[2] += busy_ms() - busy
        for mode, _ in runs:
            done, seconds, busy = totals[mode]
            throughput[(job, c, mode)] = done / seconds
            print(f"  {job:<18} C={c}  {mode:<16}: {done / seconds:6.2f}/s  CPU {busy / done:6.1f} ms per execution")
        ratios = ", ".join(f"{mode}/cold {throughput[(job, c, mode)] / throughput[(job, c, 'cold')]:.1f}x" for mode, _ in runs[1:])
        print(f"  {job:<18} C={c}  {ratios}")
busy = busy_ms()
for _ in range(10):
    floor_once()
print(f"  the floor: CPU {(busy_ms() - busy) / 10:.1f} ms per job (in-process, one after another)")


def descendants(pid):
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        out.append(p)
        for task in os.listdir(f"/proc/{p}/task"):
            try:
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack += [int(x) for x in f.read().split()]
            except OSError:
                pass
    return out


print()
print("templates of the warm server (Rss and Pss of the interpreter process), and their children")
print("forked ahead, waiting for a request (the program process; Pss counts its own copies)")
for p in descendants(warm_pid):
    try:
        with open(f"/proc/{p}/cmdline", "rb") as f:
            if b"_sandbox_template.py" not in f.read():
                continue
        with open(f"/proc/{p}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{ppid}/cmdline", "rb") as f:
            template = f.read().split(b"\0")[0] == b"sandbox-init"
        with open(f"/proc/{p}/task/{p}/children") as f:
            leaf = not f.read().split()
        if not template and not leaf:
            continue  # a forked child's own parent and its sandbox's pid 1
        with open(f"/proc/{p}/smaps_rollup") as f:
            fields = dict(line.split(":", 1) for line in f.read().splitlines()[1:])
    except OSError:
        continue
    kb = lambda k: int(fields[k].split()[0]) / 1024  # noqa: E731
    what = "template" if template else "forked ahead"
    print(f"  {what} pid {p}: Rss {kb('Rss'):.1f} MiB, Pss {kb('Pss'):.1f} MiB")
print("each warm child's own memory is its execution cgroup's peak ('child peak MiB' above)")
floor.stdin.close()
floor.wait()
fork_floor.kill()
fork_floor.wait()
shutil.rmtree(scratch, ignore_errors=True)
