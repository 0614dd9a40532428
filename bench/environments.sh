#!/usr/bin/env bash
# Environment benchmark (issue 6): `import pandas, matplotlib.pyplot` inside a python-analysis
# sandbox versus the same interpreter and packages on the host, and the data-analyst example's
# whole wall time (Python: statistics + PNG; TypeScript: function harness), through
# `sandbox run`; and (issue 16) the same start-up, import and example on the Debian trixie base
# (python-3.13-analysis: CPython 3.13 from the base) next to the host base (python-analysis),
# with the ratio debian/host of the medians. Variants run interleaved round-robin; medians and
# p90 are printed.
#   N=10 bash bench/environments.sh      (N: timed runs per variant, default 10)
#   SANDBOX_BENCH_BIN=path/to/sandbox    (use this binary instead of building the release one)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
N="${N:-10}"
PY=/usr/bin/python3

bash scripts/install-deps.sh >/dev/null
if [ -n "${SANDBOX_BENCH_BIN:-}" ]; then
  SANDBOX="$SANDBOX_BENCH_BIN"
else
  cargo build --release -q -p sandbox
  SANDBOX="${CARGO_TARGET_DIR:-$ROOT/target}/release/sandbox"
fi
DATA_DIR="$(mktemp -d /tmp/sandbox-bench.XXXXXX)"
chmod 0755 "$DATA_DIR"
trap 'rm -rf "$DATA_DIR"' EXIT
ENVS="${SANDBOX_BENCH_ENVIRONMENTS:-/var/tmp/sandbox-test-environments}"
CONFIG="$DATA_DIR/config.toml"
printf '[runtime]\nenvironments_dir = "%s"\n' "$ENVS" > "$CONFIG"
SB=("$SANDBOX" --config "$CONFIG" --data-dir "$DATA_DIR")
"${SB[@]}" env install python-analysis >/dev/null 2>&1
"${SB[@]}" env install typescript-analysis >/dev/null 2>&1
"${SB[@]}" env install python-3.13-analysis >/dev/null 2>&1
# The current version's directory (its spec hash, as `env list` prints it): `env install` keeps
# other versions in a shared environments_dir.
SITE="$ENVS/python-analysis-$("${SB[@]}" env list | awk '$1 == "python-analysis" && $2 == "installed" { print $4 }')/python"
CSV="$(bash examples/data-analyst/fetch-data.sh)"

"$PY" - "$N" "$PY" "$SITE" "$CSV" "$ROOT" "${SB[@]}" <<'PYEOF'
import json, os, statistics, subprocess, sys, tempfile, time

n, py, site, csv, root = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
sb = sys.argv[6:]
imp = "import time; t = time.perf_counter()\nimport pandas, matplotlib.pyplot\nprint(round((time.perf_counter() - t) * 1000, 1))"
host_env = dict(os.environ, PYTHONPATH=site, MPLBACKEND="Agg", MPLCONFIGDIR=tempfile.mkdtemp())
work = tempfile.mkdtemp()
os.symlink(csv, os.path.join(work, "data.csv"))
variants = [
    # -S: no site module, so the host's dist-packages and .pth files stay out, as inside.
    ("import: host python3 (process)", [py, "-S", "-c", imp], host_env, work),
    ("import: sandbox run (whole CLI)", sb + ["run", "-p", "python-analysis", "-c", imp], None, None),
    ("example.py: host python3", [py, "-S", os.path.join(root, "examples/data-analyst/analysis.py")], host_env, work),
    ("example.py: sandbox run", sb + ["run", "-p", "python-analysis", "--file", f"data.csv={csv}", "--out-dir", tempfile.mkdtemp(),
                                      os.path.join(root, "examples/data-analyst/analysis.py")], None, None),
    ("example.ts: sandbox run (function)", sb + ["run", "-p", "typescript-analysis", "--harness", "function", "--file", f"data.csv={csv}",
                                                 os.path.join(root, "examples/data-analyst/analysis.ts")], None, None),
    # Host base against Debian base, same pins: start-up alone (`pass`), the import, the example.
    ("start-up: host base", sb + ["run", "-p", "python-analysis", "-c", "pass"], None, None),
    ("start-up: debian base", sb + ["run", "-p", "python-3.13-analysis", "-c", "pass"], None, None),
    ("import: host base", sb + ["run", "-p", "python-analysis", "-c", imp], None, None),
    ("import: debian base", sb + ["run", "-p", "python-3.13-analysis", "-c", imp], None, None),
    ("example.py: host base", sb + ["run", "-p", "python-analysis", "--file", f"data.csv={csv}", "--out-dir", tempfile.mkdtemp(),
                                    os.path.join(root, "examples/data-analyst/analysis.py")], None, None),
    ("example.py: debian base", sb + ["run", "-p", "python-3.13-analysis", "--file", f"data.csv={csv}", "--out-dir", tempfile.mkdtemp(),
                                      os.path.join(root, "examples/data-analyst/analysis.py")], None, None),
]
wall = {v[0]: [] for v in variants}
inner = {v[0]: [] for v in variants if v[0].startswith("import:")}
for v in variants:  # warm-up: page cache, font cache
    subprocess.run(v[1], env=v[2], cwd=v[3], check=True, capture_output=True)
for _ in range(n):
    for name, cmd, env, cwd in variants:
        t = time.perf_counter()
        out = subprocess.run(cmd, env=env, cwd=cwd, check=True, capture_output=True, text=True)
        wall[name].append((time.perf_counter() - t) * 1000)
        if name in inner:
            inner[name].append(float(out.stdout.strip().splitlines()[-1]))
def p(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]
print(f"{n} runs each, interleaved; ms")
print(f"{'variant':40} {'wall p50':>9} {'wall p90':>9} {'import p50':>11}")
for name in wall:
    imp_ms = f"{statistics.median(inner[name]):.1f}" if name in inner else "-"
    print(f"{name:40} {statistics.median(wall[name]):9.1f} {p(wall[name], 0.9):9.1f} {imp_ms:>11}")
print("debian base / host base, ratio of the wall medians:")
for what in ("start-up", "import", "example.py"):
    host, debian = statistics.median(wall[f"{what}: host base"]), statistics.median(wall[f"{what}: debian base"])
    print(f"  {what:12} {debian / host:5.2f}x  ({debian:.1f} / {host:.1f} ms)")
PYEOF
