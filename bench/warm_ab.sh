#!/usr/bin/env bash
# Two warm `sandbox serve` processes side by side, this tree's release build against another
# build, on one job: the data-analyst example in Python (or `print(1)`, or the example in TypeScript,
# `harness: function`) under the built-in warm profiles, bench/warm.py's jobs. Requests go one at a time, to both servers in a random order each
# round, 0.25 s apart (so each child forked ahead is ready again); then at concurrency 2 in
# alternating rounds. Prints p50/mean end-to-end ms, `setupMs` mean and executions per second
# for each build. A change to a warm path measured against its base in minutes, not warm.sh's 10.
#   SANDBOX_BENCH_REF_BIN=/path/to/older/sandbox N=100 JOB=analyst|print|ts bash bench/warm_ab.sh
# (the reference's libsandbox_warm.so beside it; N: sequential requests per build, default 60).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
N="${N:-60}"
JOB="${JOB:-analyst}"
REF="${SANDBOX_BENCH_REF_BIN:?set SANDBOX_BENCH_REF_BIN to the build to compare with}"

bash scripts/install-deps.sh >/dev/null
cargo build --release -q -p sandbox -p sandbox-warm
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}/release"
WORK="$(mktemp -d /tmp/sandbox-bench-warm-ab.XXXXXX)"
chmod 0755 "$WORK"
ENVS="${SANDBOX_BENCH_ENVIRONMENTS:-/var/tmp/sandbox-test-environments}"
CONFIG="$WORK/config.toml"
printf '[runtime]\nenvironments_dir = "%s"\n[service]\nmax_concurrency = 8\nqueue_max = 256\nrefusals_per_minute = 0\n' "$ENVS" > "$CONFIG"
# Each build from a directory of its own (its helper library beside it).
mkdir -p "$WORK/new" "$WORK/ref"
cp "$TARGET/sandbox" "$TARGET/libsandbox_warm.so" "$WORK/new/"
cp "$REF" "$WORK/ref/sandbox"
cp "$(dirname "$REF")/libsandbox_warm.so" "$WORK/ref/" 2>/dev/null || true
"$WORK/new/sandbox" --config "$CONFIG" --data-dir "$WORK/install" env install python-analysis >/dev/null 2>&1
"$WORK/new/sandbox" --config "$CONFIG" --data-dir "$WORK/install" env install typescript-analysis >/dev/null 2>&1
CSV="$(bash examples/data-analyst/fetch-data.sh)"

start_server() { # BUILD -> prints the URL
  local data="$WORK/$1.data"
  "$WORK/$1/sandbox" --config "$CONFIG" --data-dir "$data" serve --listen 127.0.0.1:0 > "$data.out" 2> "$data.log" &
  echo $! >> "$WORK/pids"
  for _ in $(seq 100); do
    if grep -q listening "$data.out" 2>/dev/null; then
      awk '{print $3; exit}' "$data.out"
      return
    fi
    sleep 0.1
  done
  echo "server did not start: $(cat "$data.log")" >&2
  exit 1
}
stop_servers() {
  local p
  kill $(cat "$WORK/pids" 2>/dev/null) 2>/dev/null || true
  for p in $(cat "$WORK/pids" 2>/dev/null); do
    while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
  done
  rm -rf "$WORK"
}
trap stop_servers EXIT
NEW_URL="$(start_server new)"
REF_URL="$(start_server ref)"

python3 - "$NEW_URL" "$REF_URL" "$N" "$JOB" "$CSV" <<'PY'
import http.client, json, random, statistics, sys, threading, time, urllib.parse

new, ref, n, job, csv = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
if job == "analyst":
    body = {"profile": "python-analysis", "language": "python",
            "code": open("examples/data-analyst/analysis.py").read(), "files": {"data.csv": open(csv).read()}}
elif job == "print":
    body = {"profile": "python-default", "language": "python", "code": "print(1)"}
elif job == "ts":
    body = {"profile": "typescript-analysis", "language": "typescript", "harness": "function",
            "code": open("examples/data-analyst/analysis.ts").read(), "files": {"data.csv": open(csv).read()}}
else:
    sys.exit(f"unknown JOB {job}: analyst, print or ts")
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
# Until both serve warm (templates started, pools filled).
for b, c in conns.items():
    deadline = time.time() + 120
    while not post(c)["timing"].get("warm"):
        if time.time() > deadline:
            sys.exit(f"{b}: never warm")
        time.sleep(0.5)
ms, setup, warm = {b: [] for b in builds}, {b: [] for b in builds}, {b: 0 for b in builds}
for _ in range(n):
    order = list(builds); random.shuffle(order)
    for b in order:
        time.sleep(0.25)
        t = time.perf_counter(); r = post(conns[b]); ms[b].append((time.perf_counter() - t) * 1000)
        setup[b].append(r["timing"].get("setupMs", 0)); warm[b] += bool(r["timing"].get("warm"))

def burst(url, per):
    def worker():
        c = conn(url)
        for _ in range(per):
            post(c)
    ts = [threading.Thread(target=worker) for _ in range(2)]
    t = time.perf_counter(); [x.start() for x in ts]; [x.join() for x in ts]
    return 2 * per / (time.perf_counter() - t)

rate = {b: [] for b in builds}
for i in range(6):
    for b in (list(builds) if i % 2 == 0 else list(builds)[::-1]):
        time.sleep(1.5)
        rate[b].append(burst(builds[b], 10))
print(f"job {job}: {n} sequential requests per build, interleaved; concurrency 2: 6 alternating rounds of 20")
print(f"{'build':6} {'p50 ms':>8} {'mean ms':>8} {'p99 ms':>8} {'setupMs':>8} {'warm':>5} {'exec/s c2':>10}")
for b in builds:
    v = sorted(ms[b])
    print(f"{b:6} {statistics.median(v):8.1f} {statistics.mean(v):8.1f} {v[min(len(v) - 1, int(len(v) * 0.99))]:8.1f} "
          f"{statistics.mean(setup[b]):8.2f} {warm[b]:5} {statistics.mean(rate[b]):10.2f}")
PY
