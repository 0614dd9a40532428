#!/usr/bin/env bash
# Regenerates the locks of the built-in environments (crates/sandbox-core/src/locks/), which the
# binary embeds: `sandbox env lock` for each, from the pins in crates/sandbox-core/src/defaults.toml
# (uv pip compile --generate-hashes for [runtime] python, or for the Python of the environment's
# base, built first when missing; wheels only; npm install
# --package-lock-only --ignore-scripts). Run it after changing a built-in pin, then commit the
# locks with the pins: `cargo test -p sandbox-core lock` checks they agree. A changed lock is a new
# environment version (the spec hash covers it). Needs the network (PyPI, the npm registry).
# SANDBOX_BIN: the sandbox binary to use (default: build the debug one).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${SANDBOX_BIN:-}"
if [ -z "$bin" ]; then
  cargo build -q -p sandbox
  bin="${CARGO_TARGET_DIR:-target}/debug/sandbox"
fi
# The built-in configuration alone: an empty config file, so no user file lays over it.
empty="$(mktemp)"
trap 'rm -f "$empty"' EXIT
for name in python-analysis python-3.13-analysis typescript-analysis; do
  "$bin" --config "$empty" env lock "$name" --dir crates/sandbox-core/src/locks >/dev/null
done
git status --short crates/sandbox-core/src/locks
