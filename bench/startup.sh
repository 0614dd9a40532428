#!/usr/bin/env bash
# Startup-latency benchmark: `python3 -c pass` bare, under bubblewrap, under raw unshare(1), and
# under `sandbox run`. Variants run interleaved round-robin so machine noise hits all equally.
# Prints p50/p95 wall time and the mean CPU time all cores spent per run (/proc/stat).
#   N=100 bash bench/startup.sh      (N: timed runs per variant, default 100)
#   SANDBOX_BENCH_REF_BIN=/path/to/older/sandbox adds that binary's `run -c pass` as a variant
#   (its own data directory), interleaved with the others: a change measured against its base.
#   LOG_EXECUTIONS=10000 starts each data directory's audit log with that many finished
#   executions (copies of the check run's events), as a host's log is after months of use.
#   AUDIT_URL='host=127.0.0.1 port=5432 user=postgres dbname=bench' records both builds' runs
#   in that PostgreSQL database (`[audit] url`) instead of each data directory's SQLite file.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
N="${N:-100}"
WARMUP=5
JSON_RUNS=20
PY=/usr/bin/python3

# --- 1. dependencies (idempotent) -------------------------------------------------------------
# SANDBOX_BENCH_BIN: time this binary and install nothing (bench/startup-guest.sh runs this
# script inside a QEMU guest that sees the host's root read-only, after building on the host).
if [ -n "${SANDBOX_BENCH_BIN:-}" ]; then
  SANDBOX="$SANDBOX_BENCH_BIN"
else
  bash scripts/install-deps.sh
  if ! command -v bwrap >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq bubblewrap
  fi
  cargo build --release -q -p sandbox
  SANDBOX="${CARGO_TARGET_DIR:-$ROOT/target}/release/sandbox"
fi

DATA_DIR="$(mktemp -d /tmp/sandbox-bench.XXXXXX)"
chmod 0755 "$DATA_DIR"
# Every build runs from a copy made here, as an installed binary would: a file the linker just
# wrote sits in the page cache in small pieces, and each exec of it faults more than an exec of a
# copy (~0.4 ms per exec on this machine kind; a run execs the CLI, whose helper is forked), so a
# fresh build measured beside an older, copied one looked slower than it was. Every build's copy
# is made the same way here; bench/cli_ab.py also drops and re-reads each copy's cached pages.
BIN_DIR="$(mktemp -d /tmp/sandbox-bench-bin.XXXXXX)"
chmod 0755 "$BIN_DIR"
trap 'rm -rf "$DATA_DIR" "$BIN_DIR"' EXIT
copy_build() { # BINARY NAME: prints the copy's path (libsandbox_warm.so beside it goes along)
  mkdir -p "$BIN_DIR/$2"
  cp "$1" "$BIN_DIR/$2/sandbox"
  if [ -f "$(dirname "$1")/libsandbox_warm.so" ]; then cp "$(dirname "$1")/libsandbox_warm.so" "$BIN_DIR/$2/"; fi
  echo "$BIN_DIR/$2/sandbox"
}
SANDBOX="$(copy_build "$SANDBOX" build)"

BWRAP=(bwrap --unshare-all --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64
       --symlink usr/bin /bin --proc /proc --dev /dev --tmpfs /tmp "$PY" -c pass)
UNSHARE=(unshare --user --map-root-user --pid --fork --mount --net --ipc --uts "$PY" -c pass)
CONFIG_ARGS=()
if [ -n "${AUDIT_URL:-}" ]; then
  if [ -n "${LOG_EXECUTIONS:-}" ]; then echo "LOG_EXECUTIONS grows SQLite logs only: not with AUDIT_URL" >&2; exit 2; fi
  printf '[audit]\nurl = "%s"\n' "$AUDIT_URL" > "$BIN_DIR/audit.toml"
  CONFIG_ARGS=(--config "$BIN_DIR/audit.toml")
fi
SB=("$SANDBOX" "${CONFIG_ARGS[@]}" --data-dir "$DATA_DIR" run -c pass)

# Check every variant runs before timing it.
check() {
  local out
  if ! out=$("$@" 2>&1); then
    echo "variant failed: $*" >&2
    echo "$out" >&2
    exit 1
  fi
}
check "$PY" -c pass
check "${BWRAP[@]}"
check "${UNSHARE[@]}"
check "${SB[@]}"

# --- 2 + 3. timing loop and report ------------------------------------------------------------
REF="${SANDBOX_BENCH_REF_BIN:-}"
REF_DIR=""
if [ -n "$REF" ]; then
  REF="$(copy_build "$REF" reference)"
  REF_DIR="$(mktemp -d /tmp/sandbox-bench-ref.XXXXXX)"
  chmod 0755 "$REF_DIR"
  trap 'rm -rf "$DATA_DIR" "$REF_DIR" "$BIN_DIR"' EXIT
  check "$REF" "${CONFIG_ARGS[@]}" --data-dir "$REF_DIR" run -c pass
fi
"$PY" - "$N" "$WARMUP" "$JSON_RUNS" "$PY" "$SANDBOX" "$DATA_DIR" "$REF" "$REF_DIR" "${LOG_EXECUTIONS:-0}" "${CONFIG_ARGS[@]}" <<'EOF'
import json, os, sqlite3, statistics, subprocess, sys, time, uuid

n, warmup, json_runs = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
py, sandbox, data_dir = sys.argv[4], sys.argv[5], sys.argv[6]
ref, ref_dir = sys.argv[7], sys.argv[8]
log_executions = int(sys.argv[9])
config = sys.argv[10:]  # [] or ["--config", FILE]

def grow_log(dir, executions):
    # Copies of the check run's begin and finish under new ids, appended after it. They are not
    # chained (`audit verify` would name the first), which no run reads: a run reads the newest
    # event, the head's, and the open executions.
    db = sqlite3.connect(f"{dir}/audit.db")
    cols = "execution_id, kind, at_ms, caller, profile, language, status, body, prev_hash, hash"
    events = db.execute(f"SELECT {cols} FROM audit_events ORDER BY seq").fetchall()
    seq = db.execute("SELECT MAX(seq) FROM audit_events").fetchone()[0]
    rows = []
    for _ in range(executions):
        id = str(uuid.uuid4())
        for e in events:
            seq += 1
            rows.append((seq, id) + e[1:])
    db.executemany(f"INSERT INTO audit_events (seq, {cols}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()

if log_executions:
    for d in [data_dir] + ([ref_dir] if ref else []):
        grow_log(d, log_executions)
    print(f"each audit log starts with {log_executions} finished executions")

variants = [
    ("bare python3", [py, "-c", "pass"]),
    ("bwrap", ["bwrap", "--unshare-all", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
               "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin", "--proc", "/proc",
               "--dev", "/dev", "--tmpfs", "/tmp", py, "-c", "pass"]),
    ("unshare", ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount", "--net",
                 "--ipc", "--uts", py, "-c", "pass"]),
    ("sandbox run", [sandbox, *config, "--data-dir", data_dir, "run", "-c", "pass"]),
]
if ref:
    variants.append(("reference run", [ref, *config, "--data-dir", ref_dir, "run", "-c", "pass"]))

def busy_ticks():
    """CPU time all cores have spent so far, in USER_HZ ticks (/proc/stat: all but idle, iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4]

cpu_ticks = {}

def once(argv, name=None):
    c0, t0 = busy_ticks(), time.perf_counter()
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = (time.perf_counter() - t0) * 1000.0
    if name is not None:
        cpu_ticks[name] = cpu_ticks.get(name, 0) + busy_ticks() - c0
    if r.returncode != 0:
        sys.exit(f"{argv[0]} exited {r.returncode}: {r.stderr.decode(errors='replace')}")
    return dt

def pct(xs, p):
    # Linear interpolation between closest ranks (numpy's default).
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo = int(k); hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)

for _ in range(warmup):
    for _, argv in variants:
        once(argv)
samples = {name: [] for name, _ in variants}
t_start = time.perf_counter()
# The order rotates every round: a run pays part of the one before it (a network namespace is
# torn down by a kernel worker after its last process exits), so in a fixed order each variant
# would always pay the same neighbour's (the same build as "sandbox run" and "reference run"
# measured 0.6-0.8 ms apart in a fixed order).
for i in range(n):
    for name, argv in variants[i % len(variants):] + variants[:i % len(variants)]:
        samples[name].append(once(argv, name))
elapsed = time.perf_counter() - t_start

base = pct(samples["bare python3"], 50)
print(f"startup latency, N={n} interleaved runs per variant after {warmup} warm-ups ({elapsed:.1f} s)")
# CPU: every core's busy time while the run lasted (the run's processes, the kernel workers that
# tear its namespaces down, and this driver's spawn; anything else on the host too, so a mean
# over N runs), from /proc/stat's tick counts. A run on 2 cores is CPU-bound.
tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
cpu_base = cpu_ticks["bare python3"] * tick_ms / n
print(f"{'variant':<14} {'p50 ms':>9} {'p95 ms':>9} {'p50 overhead ms':>16} {'CPU ms/run':>11} {'CPU overhead':>13}")
for name, _ in variants:
    xs = samples[name]
    p50, p95 = pct(xs, 50), pct(xs, 95)
    cpu = cpu_ticks[name] * tick_ms / n
    print(f"{name:<14} {p50:>9.2f} {p95:>9.2f} {p50 - base:>+16.2f} {cpu:>11.1f} {cpu - cpu_base:>+13.1f}")
sb_over = pct(samples["sandbox run"], 50) - base
bw_over = pct(samples["bwrap"], 50) - base
ratio = f"{sb_over / bw_over:.1f}x" if bw_over > 0 else "n/a"
print(f"sandbox overhead {sb_over:.2f} ms vs bubblewrap overhead {bw_over:.2f} ms "
      f"({ratio}, {sb_over - bw_over:+.2f} ms)")

keys = ("setupMs", "runMs", "collectMs")
timing = {k: [] for k in keys}
for _ in range(json_runs):
    r = subprocess.run([sandbox, *config, "--data-dir", data_dir, "run", "--json", "-c", "pass"],
                       stdin=subprocess.DEVNULL, capture_output=True, check=True)
    t = json.loads(r.stdout)["timing"]
    for k in keys:
        timing[k].append(t[k])
print(f"sandbox run --json timing medians over {json_runs} runs: "
      + ", ".join(f"{k}={statistics.median(timing[k]):g}" for k in keys))
EOF
