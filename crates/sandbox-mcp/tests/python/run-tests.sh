#!/usr/bin/env bash
# The MCP server through the official Python MCP SDK (`mcp` from PyPI): creates (once) a
# virtualenv in .venv with requirements.txt, then runs pytest against a real `sandbox mcp`
# (stdio) and `sandbox serve` (/mcp, streamable HTTP). Binary: $SANDBOX_BIN, else
# ../../../../target/debug/sandbox (built with cargo if missing). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"

VENV=.venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    rm -rf "$VENV"
    if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
        rm -rf "$VENV"
        echo "python3 -m venv failed; installing python3-venv" >&2
        if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
            ver=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
            apt-get update -qq
            apt-get install -y -qq python3-venv || apt-get install -y -qq "python${ver}-venv"
        fi
        python3 -m venv "$VENV"
    fi
fi

# Idempotent: pip skips what requirements.txt already pins.
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt

if [ -z "${SANDBOX_BIN:-}" ] && [ ! -x ../../../../target/debug/sandbox ]; then
    (cd ../../../.. && cargo build -p sandbox)
fi

exec "$VENV/bin/python" -m pytest "$@"
