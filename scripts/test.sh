#!/usr/bin/env bash
# The test command: installs dependencies, then runs every test of the workspace (unit tests,
# and the integration tests that create real namespaces and cgroups: run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --workspace --all-targets
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
