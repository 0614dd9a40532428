#!/usr/bin/env bash
# Load benchmark of the HTTP API: starts a release `sandbox serve` on a free loopback port and
# drives REQUESTS (default 500) `print(1)` executions at CONCURRENCY (default 16) through it.
# Prints throughput, latency p50/p99, status counts (429s are the admission limit at work),
# the server's peak RSS, and whether anything was left behind.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
bash scripts/install-deps.sh >/dev/null
cargo build --release -q -p sandbox
exec python3 bench/load.py "$ROOT/target/release/sandbox" "${REQUESTS:-500}" "${CONCURRENCY:-16}"
