#!/usr/bin/env bash
# The MCP server through the official Python MCP SDK (`mcp` from PyPI): creates (once) a
# virtualenv in .venv with requirements.txt, then runs pytest against a real `sandbox mcp`
# (stdio) and `sandbox serve` (/mcp, streamable HTTP). Binary: $SANDBOX_BIN, else
# ../../../../target/debug/sandbox (built with cargo if missing). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"

VENV=.venv
bash ../../../../scripts/python-venv.sh "$VENV"

# Idempotent: pip skips what requirements.txt already pins.
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt

if [ -z "${SANDBOX_BIN:-}" ] && [ ! -x ../../../../target/debug/sandbox ]; then
    (cd ../../../.. && cargo build -p sandbox)
fi

exec "$VENV/bin/python" -m pytest "$@"
