#!/usr/bin/env bash
# Creates (once) a virtualenv in .venv, installs the package with its test extras, runs pytest
# against a real `sandbox serve` (binary: $SANDBOX_BIN, else ../../target/debug/sandbox, built
# with cargo if missing). Extra arguments go to pytest.
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

"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'

if [ -z "${SANDBOX_BIN:-}" ] && [ ! -x ../../target/debug/sandbox ]; then
    (cd ../.. && cargo build -p sandbox)
fi

exec "$VENV/bin/python" -m pytest "$@"
