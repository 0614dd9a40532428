#!/usr/bin/env bash
# Creates (once) a Python virtualenv at $1 with the host's python3, installing python3-venv from
# Debian first if the module is missing (as root). Idempotent: a working venv is left as it is.
# Used by the Python SDK's and the MCP server's test runners.
set -euo pipefail
VENV="$1"
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
