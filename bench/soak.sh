#!/usr/bin/env bash
# Soak test (issue 12, item 12): N executions (default 10000) of a fixed mix through one release
# `sandbox serve` at CONCURRENCY (default 4, also its execution slots): ok, error, timeout (200 ms),
# OOM (64 MiB profile, warm template), output flood (4 MiB against a 1 MiB cap), fork bomb (until
# pids_max, then its 500 ms timeout), allowlist network to a local HTTP server (198.18.251.7,
# added to lo for the run) and TypeScript (the warm pool); Python runs fork from warm templates.
# Then it asserts that nothing leaked, first while the service still runs (its descriptors,
# children, mounts and the executions directory back to what they were after a warm-up, RSS
# drift at most SOAK_RSS_DRIFT_MAX_MIB, default 16), then after SIGTERM (no execution directory,
# mount, cgroup, process, network namespace or TUN device left; audit records = executions and
# `sandbox audit verify` passes). Prints figures and one cargo-style line per check, ending with
# "test result: ..." (scripts/test.sh counts it). Needs root, like the service.
#   bash bench/soak.sh [N]              release build (CARGO_TARGET_DIR honoured)
#   SANDBOX_SOAK_BIN=target/debug/sandbox bash bench/soak.sh 500    an existing binary (CI)
#   SOAK_ONLY=fork_bomb,oom bash bench/soak.sh 600    only those kinds of the mix (to chase a failure)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
N="${1:-${N:-10000}}"
BIN="${SANDBOX_SOAK_BIN:-}"
if [ -z "$BIN" ]; then
  bash scripts/install-deps.sh >/dev/null
  cargo build --release -q -p sandbox
  BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/sandbox"
fi
exec python3 bench/soak.py "$BIN" "$N" "${CONCURRENCY:-4}"
