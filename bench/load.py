"""Load generator for bench/load.sh (standard library only)."""
import json, os, subprocess, sys, tempfile, threading, time, urllib.error, urllib.request

binary, total, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
work = tempfile.mkdtemp(prefix="sandbox-load-")
os.chmod(work, 0o755)
data = os.path.join(work, "data")
server = subprocess.Popen([binary, "--data-dir", data, "serve", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
url = server.stdout.readline().split()[2]
body = json.dumps({"profile": "python-default", "code": "print(1)"}).encode()

peak_rss_kib = 0
stop = threading.Event()
def watch_rss():
    global peak_rss_kib
    while not stop.is_set():
        try:
            for line in open(f"/proc/{server.pid}/status"):
                if line.startswith("VmRSS:"):
                    peak_rss_kib = max(peak_rss_kib, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.02)
threading.Thread(target=watch_rss, daemon=True).start()

lock = threading.Lock()
next_index = 0
latencies, statuses = [], {}
def worker():
    global next_index
    while True:
        with lock:
            if next_index >= total:
                return
            next_index += 1
        t = time.perf_counter()
        req = urllib.request.Request(f"{url}/v1/executions", data=body, headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                result = json.load(r)
                key = f"200 {result['status']}"
                if result["stdout"] != "1\n":
                    key = "200 WRONG OUTPUT"
        except urllib.error.HTTPError as e:
            key = f"{e.code} {json.load(e).get('code')}"
        except Exception as e:  # noqa: BLE001 - every failure is counted and shown
            key = f"failed {type(e).__name__}"
        dt = (time.perf_counter() - t) * 1000
        with lock:
            statuses[key] = statuses.get(key, 0) + 1
            if key == "200 ok":
                latencies.append(dt)

start = time.perf_counter()
threads = [threading.Thread(target=worker) for _ in range(concurrency)]
for t in threads: t.start()
for t in threads: t.join()
wall = time.perf_counter() - start
stop.set()
slots = urllib.request.urlopen(f"{url}/metrics").read().decode()
server.terminate(); server.wait()

latencies.sort()
pct = lambda p: latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] if latencies else float("nan")
left = os.listdir(os.path.join(data, "executions")) if os.path.isdir(os.path.join(data, "executions")) else []
cgroups = [d for d in os.listdir("/sys/fs/cgroup/memory/sandbox") if os.path.isdir(os.path.join("/sys/fs/cgroup/memory/sandbox", d))] if os.path.isdir("/sys/fs/cgroup/memory/sandbox") else []
print(f"{total} requests, concurrency {concurrency}, {wall:.2f} s")
print(f"throughput {statuses.get('200 ok', 0) / wall:.1f} executions/s")
print(f"latency of ok executions: p50 {pct(50):.1f} ms, p99 {pct(99):.1f} ms")
print("responses: " + ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())))
print(f"server peak RSS {peak_rss_kib / 1024:.1f} MiB")
print(f"left behind: {len(left)} execution directories, {len(cgroups)} cgroups under memory/sandbox (other runs included)")
# Past the queue, refusals of one address are rate-limited too (429 rate_limited): both say back off.
bad = {k: v for k, v in statuses.items() if k not in ("200 ok", "429 queue_full", "429 rate_limited")}
sys.exit(1 if bad or left else 0)
