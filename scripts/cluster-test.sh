#!/usr/bin/env bash
# The multi-node test (issue 15): three `sandbox serve` nodes in network namespaces on a bridge,
# one PostgreSQL, HAProxy in front; scenarios in scripts/cluster/cluster.py, each printing its
# counts, then one "N passed, M failed in Xs" line. Root; about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/cluster/cluster.py --bin "${SANDBOX_BIN:-target/debug/sandbox}" "$@"
