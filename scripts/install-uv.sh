#!/usr/bin/env bash
# Provisions uv, the Python package installer `sandbox env install` uses: a pinned release from
# PyPI's `uv` wheel (pip checks the download against PyPI's hashes), its one binary unpacked
# under /usr/local/lib/sandbox/uv-<version>/ and switched in atomically through the symlink
# /usr/local/lib/sandbox/uv. Idempotent: a second run with the same version does nothing.
set -euo pipefail
version="${SANDBOX_UV_VERSION:-0.13.9}"
prefix="${SANDBOX_RUNTIME_PREFIX:-/usr/local/lib/sandbox}"
target="$prefix/uv-$version"
switch() { ln -sfn "uv-$version" "$prefix/uv.tmp" && mv -T "$prefix/uv.tmp" "$prefix/uv"; }
if [ -x "$target/uv" ] && "$target/uv" --version | grep -qx "uv $version.*"; then
  switch
  exit 0
fi
python=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -m pip --version >/dev/null 2>&1; then python="$p"; break; fi
done
if [ -z "$python" ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-pip
  python=/usr/bin/python3
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "installing uv $version into $target"
"$python" -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
  --dest "$work" "uv==$version"
mkdir -p "$work/unpacked"
"$python" -m zipfile -e "$work"/uv-*.whl "$work/unpacked"
mkdir -p "$prefix"
rm -rf "$target.partial"
mkdir -p "$target.partial"
mv "$work"/unpacked/uv-*.data/scripts/uv "$target.partial/uv"
chmod 0755 "$target.partial/uv"
"$target.partial/uv" --version | grep -qx "uv $version.*" || { echo "install-uv: unpacked uv is not $version" >&2; exit 1; }
rm -rf "$target"
mv "$target.partial" "$target"
switch
echo "$("$prefix/uv/uv" --version) at $prefix/uv/uv"
