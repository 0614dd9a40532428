#!/usr/bin/env bash
# Two `sandbox serve` processes side by side, this tree's release build against another build,
# on one job: the data-analyst example in Python (or `print(1)`, or the example in TypeScript,
# `harness: function`) under the built-in warm profiles, bench/warm.py's jobs; or, with
# JOB=cold, `print(1)` with both servers started `--no-warm` (every execution a cold start), or
# JOB=ts-imports, a TypeScript script importing the four packages of `typescript-analysis`
# (papaparse, simple-statistics, zod, lodash) with both servers `--no-warm`.
# The servers start in a random order; once both serve warm, 5 untimed rounds, then requests go
# one at a time, to both servers in a random order each round, 0.25 s apart (so each child
# forked ahead is ready again); then at concurrency 2 in alternating rounds. Prints p50/mean end-to-end ms, `setupMs` mean, executions per second and
# the CPU time all cores spent per execution at concurrency 2 (`/proc/stat`) for each build. A
# change measured against its base in minutes, not warm.sh's 10.
#   SANDBOX_BENCH_REF_BIN=/path/to/older/sandbox N=100 JOB=analyst|print|ts|cold|ts-imports bash bench/ab.sh
# (the reference's libsandbox_warm.so beside it; N: sequential requests per build, default 60;
# the reference's environments in SANDBOX_BENCH_REF_ENVIRONMENTS, default the directory + "-ref").
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
N="${N:-60}"
JOB="${JOB:-analyst}"
REF="${SANDBOX_BENCH_REF_BIN:?set SANDBOX_BENCH_REF_BIN to the build to compare with}"

bash scripts/install-deps.sh >/dev/null
cargo build --release -q -p sandbox -p sandbox-warm
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}/release"
WORK="$(mktemp -d /tmp/sandbox-bench-ab.XXXXXX)"
chmod 0755 "$WORK"
ENVS="${SANDBOX_BENCH_ENVIRONMENTS:-/var/tmp/sandbox-test-environments}"
CONFIG="$WORK/config.toml"
printf '[runtime]\nenvironments_dir = "%s"\n[service]\nmax_concurrency = 8\nqueue_max = 256\nrefusals_per_minute = 0\n' "$ENVS" > "$CONFIG"
# Each build from a directory of its own (its helper library beside it).
mkdir -p "$WORK/new" "$WORK/ref"
cp "$TARGET/sandbox" "$TARGET/libsandbox_warm.so" "$WORK/new/"
cp "$REF" "$WORK/ref/sandbox"
cp "$(dirname "$REF")/libsandbox_warm.so" "$WORK/ref/" 2>/dev/null || true
# The reference's environments in a directory of their own: installing one build's version of an
# environment removes the other's from a shared one (when they differ, as after a layout change).
REF_CONFIG="$WORK/ref-config.toml"
sed "s|^environments_dir = .*|environments_dir = \"${SANDBOX_BENCH_REF_ENVIRONMENTS:-$ENVS-ref}\"|" "$CONFIG" > "$REF_CONFIG"
for e in python-analysis typescript-analysis; do
  "$WORK/new/sandbox" --config "$CONFIG" --data-dir "$WORK/install" env install "$e" >/dev/null 2>&1
  "$WORK/ref/sandbox" --config "$REF_CONFIG" --data-dir "$WORK/install-ref" env install "$e" >/dev/null 2>&1
done
CSV="$(bash examples/data-analyst/fetch-data.sh)"

FLAGS=()
if [ "$JOB" = cold ] || [ "$JOB" = ts-imports ]; then FLAGS=(--no-warm); fi
source "$ROOT/bench/servers.sh"
trap stop_servers EXIT
# Which server starts first is drawn at random (and printed): with "new" always first, an A/A run
# (the same build in both columns) showed the first column's setupMs mean and p99 higher.
start_new() { NEW_URL="$(SB=("$WORK/new/sandbox" --config "$CONFIG"); start_server "$WORK/new.data" "${FLAGS[@]}")"; }
start_ref() { REF_URL="$(SB=("$WORK/ref/sandbox" --config "$REF_CONFIG"); start_server "$WORK/ref.data" "${FLAGS[@]}")"; }
if [ $((RANDOM % 2)) -eq 0 ]; then FIRST=new; start_new; start_ref; else FIRST=ref; start_ref; start_new; fi

python3 - "$NEW_URL" "$REF_URL" "$N" "$JOB" "$CSV" "$FIRST" <<'PY'
import http.client, json, os, random, statistics, sys, threading, time, urllib.parse

new, ref, n, job, csv, first = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
if job == "analyst":
    body = {"profile": "python-analysis", "language": "python",
            "code": open("examples/data-analyst/analysis.py").read(), "files": {"data.csv": open(csv).read()}}
elif job in ("print", "cold"):
    body = {"profile": "python-default", "language": "python", "code": "print(1)"}
elif job == "ts":
    body = {"profile": "typescript-analysis", "language": "typescript", "harness": "function",
            "code": open("examples/data-analyst/analysis.ts").read(), "files": {"data.csv": open(csv).read()}}
elif job == "ts-imports":
    body = {"profile": "typescript-analysis", "language": "typescript",
            "code": "import Papa from 'papaparse';\nimport { mean } from 'simple-statistics';\nimport { z } from 'zod';\nimport _ from 'lodash';\n"
                    "const rows = Papa.parse<{ v: number }>('v\\n1\\n2', { header: true, dynamicTyping: true }).data;\n"
                    "console.log(z.number().parse(mean(rows.map((r) => r.v))), _.sum([1, 2]));\n"}
else:
    sys.exit(f"unknown JOB {job}: analyst, print, ts, cold or ts-imports")
body = json.dumps(body).encode()
builds = {"new": new, "ref": ref}

def conn(url):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=120)

def post(c):
    c.request("POST", "/v1/executions", body=body, headers={"content-type": "application/json"})
    r = json.loads(c.getresponse().read())
    if r.get("status") != "ok":
        sys.exit(f"not ok: {json.dumps(r)[:2000]}")
    return r

conns = {b: conn(u) for b, u in builds.items()}
# Until both serve warm (templates started, pools filled), asking each in turn; then SETTLE
# untimed rounds, so neither column's first timed requests meet the other's start-up work.
deadline, ready = time.time() + 120, set()
while job not in ("cold", "ts-imports") and len(ready) < len(builds):
    for b in set(builds) - ready:
        if post(conns[b])["timing"].get("warm"):
            ready.add(b)
    if time.time() > deadline:
        sys.exit(f"never warm: {sorted(set(builds) - ready)}")
    time.sleep(0.5)
SETTLE = 5
ms, setup, warm = {b: [] for b in builds}, {b: [] for b in builds}, {b: 0 for b in builds}
for i in range(SETTLE + n):
    order = list(builds); random.shuffle(order)
    for b in order:
        time.sleep(0.25)
        t = time.perf_counter(); r = post(conns[b]); elapsed = (time.perf_counter() - t) * 1000
        if i >= SETTLE:
            ms[b].append(elapsed); setup[b].append(r["timing"].get("setupMs", 0)); warm[b] += bool(r["timing"].get("warm"))

def busy_ms():
    """CPU time all cores have spent so far, ms (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) * 1000 / os.sysconf("SC_CLK_TCK")

def burst(url, per):
    failed = []
    def worker():
        c = conn(url)
        try:
            for _ in range(per):
                post(c)
        except BaseException as e:  # post's exit included: a thread's SystemExit ends only it
            failed.append(e)
    ts = [threading.Thread(target=worker) for _ in range(2)]
    c0, t = busy_ms(), time.perf_counter(); [x.start() for x in ts]; [x.join() for x in ts]
    if failed:
        sys.exit(f"a request at concurrency 2 failed: {failed[0]}")
    return 2 * per / (time.perf_counter() - t), (busy_ms() - c0) / (2 * per)

per = 40 if job in ("print", "cold") else 10
rate, cpu = {b: [] for b in builds}, {b: [] for b in builds}
for i in range(6):
    for b in (list(builds) if i % 2 == 0 else list(builds)[::-1]):
        time.sleep(1.5)
        r, c = burst(builds[b], per)
        rate[b].append(r); cpu[b].append(c)
print(f"job {job}: {n} sequential requests per build, interleaved, after {SETTLE} untimed; concurrency 2: "
      f"6 alternating rounds of {2 * per}; the {first} server started first")
print(f"{'build':6} {'p50 ms':>8} {'mean ms':>8} {'p99 ms':>8} {'setupMs':>8} {'warm':>5} {'exec/s c2':>10} {'CPU ms/exec':>12}")
for b in builds:
    v = sorted(ms[b])
    print(f"{b:6} {statistics.median(v):8.1f} {statistics.mean(v):8.1f} {v[min(len(v) - 1, int(len(v) * 0.99))]:8.1f} "
          f"{statistics.mean(setup[b]):8.2f} {warm[b]:5} {statistics.mean(rate[b]):10.2f} {statistics.mean(cpu[b]):12.1f}")
PY
