#!/usr/bin/env bash
# Installs, builds and tests the TypeScript client against a real `sandbox serve` (run as root).
#   SANDBOX_BIN=/path/to/sandbox  use that server binary (default: ../../target/debug/sandbox,
#                                 built here first with `cargo build -p sandbox`)
#   SANDBOX_SKIP_SERVER_BUILD=1   do not run cargo; use the binary as it is
set -euo pipefail
cd "$(dirname "$0")"

if [ -z "${SANDBOX_BIN:-}" ] && [ "${SANDBOX_SKIP_SERVER_BUILD:-0}" != 1 ] && command -v cargo >/dev/null; then
  (cd ../.. && cargo build -q -p sandbox)
fi

if [ -f package-lock.json ]; then
  npm ci --no-audit --no-fund
else
  npm install --no-audit --no-fund
fi
npm run build
npm test
