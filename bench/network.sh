#!/usr/bin/env bash
# Network benchmark (not a test): (1) the extra start-up time of an allowlist profile over
# `network = "none"` (`sandbox run -c pass`, interleaved, N runs each, default 40), and (2) the
# throughput of a 100 MiB HTTP download from an allowed local server, inside an allowlist sandbox
# versus the same Python client on the host. The server listens on 198.18.250.2 (added to lo
# for the run, removed afterwards).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
bash scripts/install-deps.sh >/dev/null
cargo build --release -q -p sandbox
exec python3 bench/network.py "${CARGO_TARGET_DIR:-$ROOT/target}/release/sandbox" "${N:-40}"
