#!/usr/bin/env bash
# Throughput of `print(1)` on one node against three nodes behind HAProxy, in the same run
# (the multi-node test's set-up: scripts/cluster/). Root. Usage: bench/cluster.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p sandbox >/dev/null
exec python3 scripts/cluster/cluster.py --bin "${CARGO_TARGET_DIR:-target}/release/sandbox" --bench "${1:-10}"
