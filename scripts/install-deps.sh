#!/usr/bin/env bash
# Installs what building and testing the Sandbox Service needs on Debian 12, idempotently:
# libseccomp (the build exports the seccomp filters with it), pkg-config, the pinned Node.js LTS that
# TypeScript profiles run on (scripts/install-node.sh), uv, which installs environments'
# Python packages (scripts/install-uv.sh), cargo-fuzz for the fuzz targets
# (scripts/install-fuzz.sh), and mmdebstrap, which builds the Debian bases of environments.
# Python is the host's /usr/bin/python3; `sandbox doctor` says if a runtime is missing.
set -euo pipefail
need=()
# iproute2 and openssl: the network tests add test addresses and serve HTTPS with a test CA.
# umoci: sandbox-oci's tests build an OCI image layout with it.
# mmdebstrap and debian-archive-keyring: environments on a debian base (python-3.13-analysis).
# e2fsprogs: an audit test puts a data directory on an ext4 image to cut its power.
# strace: an audit test traces a run's syncs.
for pkg in libseccomp-dev pkg-config python3 iproute2 openssl umoci mmdebstrap debian-archive-keyring e2fsprogs strace; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
if ! command -v npm >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq npm
fi
bash "$(dirname "$0")/install-node.sh"
bash "$(dirname "$0")/install-uv.sh"
# cargo-fuzz, for the fuzz targets (scripts/fuzz.sh).
bash "$(dirname "$0")/install-fuzz.sh"
