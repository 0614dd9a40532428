#!/usr/bin/env bash
# Installs what building and testing the Sandbox Service needs on Debian 12, idempotently:
# libseccomp (the seccomp filter is built with it) and pkg-config. Python 3 and Node.js are the
# host's own (/usr/bin/python3, /usr/bin/node); `sandbox doctor` says if one is missing.
set -euo pipefail
need=()
for pkg in libseccomp-dev pkg-config python3; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
if ! command -v node >/dev/null 2>&1; then
  echo "warning: node not found; TypeScript profiles will report runtime_unavailable (install nodejs)" >&2
fi
