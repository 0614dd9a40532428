#!/usr/bin/env bash
# Creates (once) a virtualenv in .venv, installs the package with its test extras, runs pytest
# against a real `sandbox serve` (binary: $SANDBOX_BIN, else ../../target/debug/sandbox, built
# with cargo if missing). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"

VENV=.venv
bash ../../scripts/python-venv.sh "$VENV"

"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'

if [ -z "${SANDBOX_BIN:-}" ] && [ ! -x ../../target/debug/sandbox ]; then
    (cd ../.. && cargo build -p sandbox)
fi

exec "$VENV/bin/python" -m pytest "$@"
