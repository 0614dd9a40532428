#!/usr/bin/env python3
"""Three `sandbox serve` nodes, each in its own network namespace, one PostgreSQL and HAProxy
(leastconn, /readyz checks, retry/redispatch) in front: the scenarios of issue 15, each asserting
counts. Run as root by scripts/cluster-test.sh; `--bench` prints throughput instead.

Ends with one pytest-style line ("N passed, M failed in Xs") that scripts/test.sh counts."""

import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
NET = os.path.join(HERE, "net.sh")
NODES = {1: "10.77.0.11", 2: "10.77.0.12", 3: "10.77.0.13"}
KEYS = {"load": "cluster-load-key", "quota": "cluster-quota-key", "audit": "cluster-audit-key"}
SLOTS = 2
# Requests a node queues past its slots; past both it answers 429 queue_full.
QUEUE = 2
LEASE_TTL_MS = 3000
# A dead node's executions are interrupted by a survivor within lease_ttl_ms * 4 / 3 of its last
# renewal (ARCHITECTURE.md "Several nodes"); the test allows a further second of scheduling.
INTERRUPT_BOUND_S = LEASE_TTL_MS * 4 / 3 / 1000 + 1.0


def sha(s):
    return hashlib.sha256(s.encode()).hexdigest()


class Cluster:
    def __init__(self, bin_path):
        self.dir = tempfile.mkdtemp(prefix="sbx-cluster.")
        self.env = dict(os.environ, SANDBOX_BIN=bin_path)
        try:
            last = self.net("up").strip().splitlines()[-1]
        except subprocess.CalledProcessError as e:
            self.down()
            raise AssertionError(f"cluster set-up failed: {e.stderr}") from e
        # "pg=<libpq URL> proxy=<URL>"
        pg, self.proxy = last[len("pg="):].split(" proxy=")
        with open(os.path.join(self.dir, "config.toml"), "w") as f:
            f.write(f"""
[service]
max_concurrency = {SLOTS}
queue_max = {QUEUE}
drain_delay_ms = 1200
shutdown_grace_ms = 20000
refusals_per_minute = 0

{os.environ.get("BENCH_RUNTIME", "")}
[audit]
url = "{pg}"
lease_ttl_ms = {LEASE_TTL_MS}

[[service.api_keys]]
name = "load"
sha256 = "{sha(KEYS['load'])}"

[[service.api_keys]]
name = "quota"
sha256 = "{sha(KEYS['quota'])}"
max_concurrent = 2

[[service.api_keys]]
name = "audit"
sha256 = "{sha(KEYS['audit'])}"
roles = ["audit"]
""")

    def net(self, *args):
        return subprocess.run(["bash", NET, args[0], self.dir, *args[1:]], env=self.env, check=True, capture_output=True, text=True).stdout

    def start(self, n):
        self.net("node-start", str(n))
        wait_for(lambda: status_of(f"http://{NODES[n]}:8080/readyz") == 200, 60, f"node n{n} ready")

    def pid(self, n):
        with open(os.path.join(self.dir, f"n{n}.pid")) as f:
            return int(f.read())

    def down(self):
        subprocess.run(["bash", NET, "down", self.dir], env=self.env, check=False)


def status_of(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def wait_for(cond, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def execute(base, code, key="load", timeout_s=60):
    """POST one execution; returns (HTTP status, body as JSON or None, Retry-After or None)."""
    body = json.dumps({"profile": "python-default", "language": "python", "code": code}).encode()
    req = urllib.request.Request(f"{base}/v1/executions", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEYS[key]}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status, json.loads(r.read()), None
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        return e.code, doc, e.headers.get("Retry-After")
    except OSError as e:
        return None, {"error": str(e)}, None


def audit_get(base, path):
    req = urllib.request.Request(f"{base}{path}", headers={"Authorization": f"Bearer {KEYS['audit']}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def records(base, since_ms, caller):
    out, cursor = [], None
    while True:
        q = f"/v1/executions?caller={caller}&sinceMs={since_ms}&limit=1000" + (f"&cursor={cursor}" if cursor else "")
        page = audit_get(base, q)
        out += page["records"]
        cursor = page.get("nextCursor")
        if not cursor:
            return out


def audit_events(c):
    """Every event of the log, read from the database (what `sandbox audit export` reads).

    It connects where the nodes do, the bridge's address (net.sh says why not loopback). psql's
    exit 2 (it could not connect, or the connection broke) is retried for up to 10 s, each
    failure printed with psql's own message: the scenario tests the nodes, not this reader's
    one connection."""
    deadline = time.monotonic() + 10
    while True:
        p = subprocess.run(["psql", "-X", "-At", "-h", "10.77.0.1", "-p", "25432", "-U", "postgres", "-c",
                            "SELECT execution_id, kind FROM audit_events ORDER BY seq"], capture_output=True, text=True)
        if p.returncode == 0:
            return [{"executionId": line.split("|")[0], "kind": line.split("|")[1]} for line in p.stdout.splitlines() if line]
        print(f"psql exited {p.returncode}: {p.stderr.strip()}", flush=True)
        if p.returncode != 2 or time.monotonic() > deadline:
            raise AssertionError(f"psql exited {p.returncode}: {p.stderr.strip()}")
        time.sleep(0.5)


def node_of(record):
    return record["request"].get("owner", {}).get("node")


def now_ms():
    return int(time.time() * 1000)


def burst(base, codes, key="load"):
    with cf.ThreadPoolExecutor(len(codes)) as pool:
        return list(pool.map(lambda c: execute(base, c, key), codes))


def max_overlap(intervals):
    points = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals], key=lambda p: (p[0], p[1]))
    best = cur = 0
    for _, d in points:
        cur += d
        best = max(best, cur)
    return best


# Scenarios. Each returns a line of counts; an AssertionError fails it.

def spread_and_overflow(c):
    since = now_ms()
    n = 3 * SLOTS * 2
    retried = [0]

    def with_retry(code):
        # HAProxy 2.6 cannot retry a 429 itself: the client does, after its Retry-After.
        for _ in range(20):
            s, b, retry = execute(c.proxy, code)
            if s != 429:
                return s, b, retry
            retried[0] += 1
            time.sleep(float(retry))
        return s, b, retry

    with cf.ThreadPoolExecutor(n) as pool:
        results = list(pool.map(with_retry, ["import time; time.sleep(0.6); print(1)"] * n))
    ok = sum(1 for s, b, _ in results if s == 200 and b["status"] == "ok")
    assert ok == n, f"{ok}/{n} ok: {[r for r in results if r[0] != 200][:3]}"
    recs = records(c.proxy, since, "key:load")
    per_node = {f"n{n}": sum(1 for r in recs if node_of(r) == f"n{n}") for n in NODES}
    assert all(v > 0 for v in per_node.values()), per_node
    assert sum(per_node.values()) == n, per_node
    # A full node (slots and queue taken) answers 429 queue_full with Retry-After itself.
    node1 = f"http://{NODES[1]}:8080"
    with cf.ThreadPoolExecutor(SLOTS + QUEUE) as pool:
        busy = [pool.submit(execute, node1, "import time; time.sleep(1.5)") for _ in range(SLOTS + QUEUE)]
        time.sleep(0.8)
        s, b, retry = execute(node1, "print(1)")
        assert (s, b["code"], retry) == (429, "queue_full", "1"), (s, b, retry)
        # Through the balancer the same request is served meanwhile (by another node, or after
        # the client's retry when leastconn, blind to the direct connections, picked node 1).
        s2, b2, _ = with_retry("print(1)")
        assert s2 == 200 and b2["status"] == "ok", (s2, b2)
        assert all(f.result()[0] == 200 for f in busy)
    return f"{n}/{n} ok through the balancer ({SLOTS} slots per node, {retried[0]} retried after a 429), per node {per_node}; a full node answered 429 queue_full Retry-After 1 while the balancer served the same request"


def kill_a_node(c):
    since = now_ms()
    n = 3 * (SLOTS + QUEUE)
    with cf.ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(execute, c.proxy, "import time; time.sleep(2); print(1)") for _ in range(n)]
        time.sleep(0.8)
        os.kill(c.pid(2), signal.SIGKILL)
        killed_at = time.monotonic()
        results = [f.result() for f in futures]
    ok = [b for s, b, _ in results if s == 200 and b["status"] == "ok"]
    failed = [(s, b) for s, b, _ in results if not (s == 200 and b["status"] == "ok")]
    # Every failure is a 502 from the balancer: a request in flight on the killed node (running
    # or in its queue); the others' requests all ran.
    assert all(s == 502 for s, _ in failed), failed
    assert 1 <= len(failed) <= SLOTS + QUEUE, f"{len(failed)} failed"
    # Its records become interrupted via a survivor within the bound.
    state = {}

    def settled():
        state["recs"] = records(c.proxy, since, "key:load")
        return not any(r["status"] == "running" for r in state["recs"])
    wait_for(settled, INTERRUPT_BOUND_S + 5, "no running record left")
    took = time.monotonic() - killed_at
    recs = state["recs"]
    interrupted = [r for r in recs if r["status"] == "interrupted"]
    finished = [r for r in recs if r["state"] == "finished"]
    assert 1 <= len(interrupted) <= SLOTS and len(interrupted) <= len(failed), (len(interrupted), len(failed))
    assert all(node_of(r) == "n2" for r in interrupted), [node_of(r) for r in interrupted]
    assert took <= INTERRUPT_BOUND_S, f"interrupted after {took:.1f} s, bound {INTERRUPT_BOUND_S:.1f} s"
    # Exactly one record per accepted request, each finished or interrupted: the finished ones
    # are exactly the answered ones.
    assert len(recs) == len(finished) + len(interrupted), [r["state"] for r in recs]
    assert sorted(r["executionId"] for r in finished) == sorted(b["executionId"] for b in ok)
    events = [e for e in audit_events(c) if e["executionId"] in {r["executionId"] for r in recs} and e["kind"] in ("finish", "interrupted")]
    assert len(events) == len(recs), (len(events), len(recs))
    c.start(2)
    return f"{len(ok)} ok, {len(failed)} failed (502, in flight on n2), {len(interrupted)} interrupted via a survivor within {took:.1f} s (bound {INTERRUPT_BOUND_S:.1f} s), {len(recs)} records with one end event each for {len(ok) + len(interrupted)} accepted"


def rolling_restart(c):
    stop = threading.Event()
    outcomes = []
    lock = threading.Lock()

    def client():
        while not stop.is_set():
            r = execute(c.proxy, "import time; time.sleep(0.3); print(1)")
            with lock:
                outcomes.append(r)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        time.sleep(1)
        for n in NODES:
            os.kill(c.pid(n), signal.SIGTERM)
            # Readiness turns false first, while the node still serves.
            wait_for(lambda: status_of(f"http://{NODES[n]}:8080/readyz") == 503, 5, f"n{n} not ready")
            pid = c.pid(n)
            wait_for(lambda: not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z", 30, f"n{n} exited")
            c.start(n)
            # Let the balancer's rise count see it before the next node goes.
            time.sleep(1)
    finally:
        stop.set()
        for t in threads:
            t.join()
    bad = [r for r in outcomes if not (r[0] == 200 and r[1]["status"] == "ok")]
    assert not bad, f"{len(bad)} of {len(outcomes)} failed: {bad[:3]}"
    assert len(outcomes) > 20, len(outcomes)
    return f"{len(outcomes)} requests during a rolling restart of 3 nodes, 0 failed"


def database_down(c):
    c.net("pg-stop")
    try:
        direct = [execute(f"http://{ip}:8080", "print(1)") for ip in NODES.values()]
        proxied = burst(c.proxy, ["print(1)"] * 6)
        got = [(s, (b or {}).get("code"), retry) for s, b, retry in direct + proxied]
        assert all(g == (503, "audit_unavailable", "1") for g in got), got
    finally:
        c.net("pg-start")
    def all_recovered():
        return all(execute(f"http://{ip}:8080", "print(1)")[0] == 200 for ip in NODES.values())
    t0 = time.monotonic()
    wait_for(all_recovered, 30, "every node running again")
    return f"{len(got)} requests refused 503 audit_unavailable with Retry-After (3 direct, 6 through the balancer); every node ran again {time.monotonic() - t0:.1f} s after the database returned"


def quota(c):
    since = now_ms()
    limited = [0]

    def until_run(_):
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            s, b, retry = execute(c.proxy, "import time; time.sleep(1); print(1)", key="quota")
            if s == 429 and b and b.get("code") == "concurrency_limited":
                limited[0] += 1
                time.sleep(float(retry or 1) / 4)
                continue
            return s, b
        return None, None

    with cf.ThreadPoolExecutor(10) as pool:
        results = list(pool.map(until_run, range(10)))
    assert all(s == 200 and b["status"] == "ok" for s, b in results), results
    recs = [r for r in records(c.proxy, since, "key:quota") if r["state"] == "finished"]
    assert len(recs) == 10, len(recs)
    nodes = {node_of(r) for r in recs}
    overlap = max_overlap([(r["receivedAtMs"], r["finishedAtMs"]) for r in recs])
    assert overlap == 2, f"at most {overlap} running at once"
    assert limited[0] > 0
    return f"10/10 ran on nodes {sorted(nodes)}, at most {overlap} running at once (audit timestamps), {limited[0]} refusals 429 concurrency_limited"


SCENARIOS = [spread_and_overflow, kill_a_node, rolling_restart, database_down, quota]


def post_job(base, job, timeout_s=120):
    """POST one execution request `job` (a dict); returns the HTTP status."""
    req = urllib.request.Request(f"{base}/v1/executions", data=json.dumps(job).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEYS['load']}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        e.read()
        return e.code
    except OSError:
        return None


def bench(c, seconds, rounds=3):
    """Throughput of each job on one node and on three behind HAProxy, alternating in `rounds`
    rounds of `seconds` each (so load from elsewhere on the machine hits both alike); prints
    the median of each. The data-analyst job runs when BENCH_CSV names its input."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    jobs = {"print(1)": {"profile": "python-default", "language": "python", "code": "print(1)"}}
    csv = os.environ.get("BENCH_CSV")
    if csv:
        with open(csv, encoding="utf-8") as f, open(os.path.join(root, "examples/data-analyst/analysis.py"), encoding="utf-8") as a:
            jobs["data-analyst.py"] = {"profile": "python-analysis", "language": "python", "code": a.read(), "files": {"data.csv": f.read()}}

    def throughput(base, job):
        count, stop = [0], time.monotonic() + seconds
        lock = threading.Lock()

        def worker():
            while time.monotonic() < stop:
                if post_job(base, job) == 200:
                    with lock:
                        count[0] += 1
        threads = [threading.Thread(target=worker) for _ in range(3 * SLOTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return count[0] / seconds

    for name, job in jobs.items():
        one, three = [], []
        for _ in range(rounds):
            one.append(throughput(f"http://{NODES[1]}:8080", job))
            three.append(throughput(c.proxy, job))
        o, t = sorted(one)[rounds // 2], sorted(three)[rounds // 2]
        print(f"{name}: {3 * SLOTS} clients, {SLOTS} slots per node, {rounds} alternating rounds of {seconds:.0f} s: "
              f"one node {o:.1f}/s, three nodes behind HAProxy {t:.1f}/s ({t / o:.2f}x)", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.environ.get("SANDBOX_BIN", "target/debug/sandbox"))
    ap.add_argument("--bench", type=float, metavar="SECONDS", help="print throughput of one node against three instead of testing")
    args = ap.parse_args()
    t0 = time.monotonic()
    c = Cluster(os.path.abspath(args.bin))
    passed = failed = 0
    try:
        for n in NODES:
            c.start(n)
        wait_for(lambda: execute(c.proxy, "print(1)")[0] == 200, 30, "the balancer to see the nodes")
        if args.bench:
            bench(c, args.bench)
            return 0
        for s in SCENARIOS:
            started = time.monotonic()
            try:
                line = s(c)
                passed += 1
                print(f"cluster::{s.__name__} PASSED ({time.monotonic() - started:.1f} s): {line}", flush=True)
            except Exception:
                failed += 1
                print(f"cluster::{s.__name__} FAILED ({time.monotonic() - started:.1f} s)", flush=True)
                traceback.print_exc()
                for n in NODES:
                    log = os.path.join(c.dir, f"n{n}.log")
                    if os.path.exists(log):
                        print(f"--- n{n}.log (tail)\n" + "".join(open(log).readlines()[-15:]), flush=True)
                pg_log = os.path.join(c.dir, "pg", "server.log")
                if os.path.exists(pg_log):
                    print("--- pg/server.log (tail)\n" + "".join(open(pg_log).readlines()[-15:]), flush=True)
                # Later scenarios need every node up.
                for n in NODES:
                    if status_of(f"http://{NODES[n]}:8080/readyz") != 200:
                        try:
                            c.start(n)
                        except Exception:
                            traceback.print_exc()
    finally:
        c.down()
    print(f"{passed} passed, {failed} failed in {time.monotonic() - t0:.1f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
