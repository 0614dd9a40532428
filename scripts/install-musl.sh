#!/usr/bin/env bash
# Installs what a static musl build of `sandbox` needs (README "A static build"), idempotently:
# Debian's musl-tools (musl-gcc, which compiles the bundled SQLite for that target) and the Rust
# standard library for x86_64-unknown-linux-musl (rustup). scripts/test.sh runs it before the
# static build's test stage.
set -euo pipefail
if ! dpkg -s musl-tools >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq musl-tools
fi
if ! command -v rustup >/dev/null 2>&1; then
  echo "install-musl.sh: the musl target is added with rustup, which is not installed (https://rustup.rs)" >&2
  exit 1
fi
if ! rustup target list --installed | grep -qx x86_64-unknown-linux-musl; then
  rustup target add x86_64-unknown-linux-musl
fi
