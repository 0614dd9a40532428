#!/usr/bin/env bash
# Throughput of `print(1)` and of the data-analyst job (examples/data-analyst, python-analysis)
# on one node against three nodes behind HAProxy, alternating in one run (the multi-node test's
# set-up: scripts/cluster/: three `sandbox serve` in network namespaces, one PostgreSQL,
# HAProxy with leastconn). Root. All three nodes share this machine's cores, so the figure shows
# what the balancer and the shared database cost, not what more machines would add.
#   bash bench/cluster.sh [SECONDS]    (SECONDS per round and variant, default 10; 3 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh >/dev/null
cargo build --release -q -p sandbox
SANDBOX="${CARGO_TARGET_DIR:-$PWD/target}/release/sandbox"
ENVS="${SANDBOX_BENCH_ENVIRONMENTS:-/var/tmp/sandbox-test-environments}"
RUNTIME="$(printf '[runtime]\nenvironments_dir = "%s"\n' "$ENVS")"
CFG="$(mktemp)"
printf '%s\n' "$RUNTIME" > "$CFG"
"$SANDBOX" --config "$CFG" env install python-analysis >/dev/null
rm -f "$CFG"
BENCH_CSV="$(bash examples/data-analyst/fetch-data.sh)" BENCH_RUNTIME="$RUNTIME" \
  exec python3 scripts/cluster/cluster.py --bin "$SANDBOX" --bench "${1:-10}"
