#!/usr/bin/env bash
# Installs cargo-fuzz (the `cargo fuzz` subcommand that builds and runs fuzz/), idempotently, from
# crates.io at a pinned version. It needs no nightly toolchain of its own: scripts/fuzz.sh runs it
# on the machine's stable toolchain with RUSTC_BOOTSTRAP=1 (the sanitizer and coverage flags are
# unstable `-Z` flags). The first install compiles it: about 3 minutes on 2 cores.
set -euo pipefail
VERSION=0.13.2
if [ "$(cargo fuzz --version 2>/dev/null)" = "cargo-fuzz $VERSION" ]; then
  exit 0
fi
echo "installing cargo-fuzz $VERSION"
cargo install cargo-fuzz --locked --version "$VERSION" --quiet
