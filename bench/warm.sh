#!/usr/bin/env bash
# Warm-start benchmark (issue 11): cold and warm executions through two release `sandbox serve`
# processes over HTTP (one started with --no-warm), interleaved in one run, beside the same
# Python job in-process on the host with its libraries already imported (the floor), in a child
# forked per job from such a host Python with no sandbox (the fork floor, bench/fork_floor.py:
# what any fork-based warm start costs before isolation adds anything) and as a bare host
# python3 process (what a user would do without us). Prints sequential p50/p99,
# throughput at concurrency 2 and 8, the templates' memory and each child's own memory.
#   N=20 bash bench/warm.sh      (N: timed sequential runs per variant, default 20; ROUNDS:
#   interleaved rounds of the throughput runs, default 3)
#   SANDBOX_BENCH_REF_BIN=/path/to/older/sandbox adds that build's warm server (with the
#   libsandbox_warm.so beside it), interleaved with the others: a change measured against its base
#   (its environments in SANDBOX_BENCH_REF_ENVIRONMENTS, default the environments directory + "-ref").
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
N="${N:-20}"
PY=/usr/bin/python3

bash scripts/install-deps.sh >/dev/null
cargo build --release -q -p sandbox
SANDBOX="${CARGO_TARGET_DIR:-$ROOT/target}/release/sandbox"
WORK="$(mktemp -d /tmp/sandbox-bench-warm.XXXXXX)"
chmod 0755 "$WORK"
ENVS="${SANDBOX_BENCH_ENVIRONMENTS:-/var/tmp/sandbox-test-environments}"
CONFIG="$WORK/config.toml"
printf '[runtime]\nenvironments_dir = "%s"\n[service]\nmax_concurrency = 8\nqueue_max = 256\nrefusals_per_minute = 0\n' "$ENVS" > "$CONFIG"
SB=("$SANDBOX" --config "$CONFIG")
"${SB[@]}" --data-dir "$WORK/cold" env install python-analysis >/dev/null 2>&1
"${SB[@]}" --data-dir "$WORK/cold" env install typescript-analysis >/dev/null 2>&1
# The current version's directory (its spec hash, as `env list` prints it): `env install` keeps
# other versions in a shared environments_dir.
SITE="$ENVS/python-analysis-$("${SB[@]}" --data-dir "$WORK/cold" env list | awk '$1 == "python-analysis" && $2 == "installed" { print $4 }')/python"
CSV="$(bash examples/data-analyst/fetch-data.sh)"

source "$ROOT/bench/servers.sh"
trap stop_servers EXIT
COLD_URL="$(start_server "$WORK/cold" --no-warm)"
REF_URL=""
if [ -n "${SANDBOX_BENCH_REF_BIN:-}" ]; then
  # A copy, as an installed build would run (see bench/startup.sh), with its own warm library.
  mkdir -p "$WORK/ref-bin"
  cp "$SANDBOX_BENCH_REF_BIN" "$WORK/ref-bin/sandbox"
  cp "$(dirname "$SANDBOX_BENCH_REF_BIN")/libsandbox_warm.so" "$WORK/ref-bin/"
  # Its environments in a directory of their own: installing one build's version of an
  # environment removes the other's from a shared one (when they differ, as after a layout change).
  REF_CONFIG="$WORK/ref-config.toml"
  sed "s|^environments_dir = .*|environments_dir = \"${SANDBOX_BENCH_REF_ENVIRONMENTS:-$ENVS-ref}\"|" "$CONFIG" > "$REF_CONFIG"
  for e in python-analysis typescript-analysis; do
    "$WORK/ref-bin/sandbox" --config "$REF_CONFIG" --data-dir "$WORK/ref" env install "$e" >/dev/null 2>&1
  done
fi
start_warm() {
  WARM_URL="$(start_server "$WORK/warm")"
  WARM_PID="$(tail -1 "$WORK/pids")"
}
start_ref() {
  REF_URL="$(SB=("$WORK/ref-bin/sandbox" --config "$REF_CONFIG"); start_server "$WORK/ref")"
}
# The two warm servers start in a random order (printed): the one started first has been seen
# slower in A/A runs of bench/ab.sh, and warm.sh always started the reference last.
if [ -z "${SANDBOX_BENCH_REF_BIN:-}" ]; then
  start_warm
elif [ $((RANDOM % 2)) -eq 0 ]; then
  echo "warm servers started in this order: this build, the reference"
  start_warm
  start_ref
else
  echo "warm servers started in this order: the reference, this build"
  start_ref
  start_warm
fi

"$PY" "$ROOT/bench/warm.py" "$N" "$COLD_URL" "$WARM_URL" "$WARM_PID" "$PY" "$SITE" "$CSV" "$ROOT" "$REF_URL"
