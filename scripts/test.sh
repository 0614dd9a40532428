#!/usr/bin/env bash
# The test command: installs dependencies, then runs every test of the workspace (unit tests,
# and the integration tests that create real namespaces and cgroups: run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --workspace --all-targets
cargo clippy --workspace --all-targets -- -D warnings
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
cargo test --workspace 2>&1 | tee "$log"
# One closing line for all test binaries (cargo prints one per binary, the last often a doc-test run of 0).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "workspace: %d passed, %d failed\n", p, f }' "$log"
