#!/usr/bin/env bash
# Builds the OCI image of the Sandbox Service with Debian's podman, from Debian's packages only
# (no registry pulls):
#
#   1. the base: a minimal bookworm root made by mmdebstrap from the packages in
#      deploy/image/packages.txt, kept as a tarball under $SANDBOX_IMAGE_CACHE
#      (/var/cache/sandbox-image) keyed by a hash of the package list, suite and mirror, and
#      imported as localhost/sandbox-base:<hash> (`podman import`). Made once; later runs reuse it.
#   2. the image: deploy/image/Containerfile on that base, with the release `sandbox` binary and
#      `libsandbox_warm.so` (cargo build --release, run here unless SANDBOX_IMAGE_NO_CARGO=1),
#      and the Node.js and uv that scripts/install-node.sh and install-uv.sh provision under
#      /usr/local/lib/sandbox. Tagged localhost/sandbox:latest (or $SANDBOX_IMAGE).
#
# Idempotent: podman's layer cache makes a second run with the same inputs a no-op. Installs
# podman and mmdebstrap from Debian's packages when missing. Prints the image name last.
set -euo pipefail
cd "$(dirname "$0")/../.."
image="${SANDBOX_IMAGE:-localhost/sandbox:latest}"
cache="${SANDBOX_IMAGE_CACHE:-/var/cache/sandbox-image}"
suite=bookworm
mirror="${SANDBOX_IMAGE_MIRROR:-http://deb.debian.org/debian}"

need=()
for pkg in podman runc mmdebstrap; do dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg"); done
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# 1. The base root, cached by the hash of what goes into it.
packages=$(grep -v '^\s*#' deploy/image/packages.txt | tr -s ' \n' ' ' | xargs)
key=$(printf '%s\n%s\n%s\n' "$suite" "$mirror" "$packages" | sha256sum | cut -c1-16)
base="localhost/sandbox-base:$key"
tarball="$cache/base-$key.tar"
mkdir -p "$cache"
if [ ! -s "$tarball" ]; then
  echo "making the base root ($suite, $packages) into $tarball"
  rm -f "$tarball.partial"
  # minbase: essential packages + apt; no recommends; documentation and apt lists dropped.
  mmdebstrap --quiet --variant=minbase --include="${packages// /,}" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    --format=tar "$suite" "$tarball.partial" "deb $mirror $suite main" \
    "deb $mirror $suite-updates main" "deb http://deb.debian.org/debian-security $suite-security main"
  mv "$tarball.partial" "$tarball"
  # Only the current base is kept (an old one is rebuilt if its list comes back).
  find "$cache" -maxdepth 1 -name 'base-*.tar' ! -name "base-$key.tar" -delete
fi
if ! podman image exists "$base"; then
  podman import --quiet --change 'CMD ["/bin/bash"]' "$tarball" "$base" >/dev/null
  echo "imported $tarball as $base"
  # Older bases go (a tag still under an image built on it stays until that image is rebuilt).
  podman images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/sandbox-base:' | grep -v ":$key\$" \
    | xargs -r podman rmi >/dev/null 2>&1 || true
fi

# 2. What the image adds: the release binary and the warm-start library, Node.js and uv.
# SANDBOX_IMAGE_PROFILE=debug takes the debug build instead (CI: scripts/test.sh has built it
# already, and a release build from nothing costs ~10 min on 2 cores); the image is otherwise
# the same.
profile="${SANDBOX_IMAGE_PROFILE:-release}"
case "$profile" in
  release) cargo_flags=(--release) ;;
  debug) cargo_flags=() ;;
  *) echo "build.sh: SANDBOX_IMAGE_PROFILE is release or debug, not $profile" >&2; exit 2 ;;
esac
if [ "${SANDBOX_IMAGE_NO_CARGO:-0}" != 1 ]; then
  bash scripts/install-deps.sh >/dev/null
  cargo build "${cargo_flags[@]}" -q -p sandbox -p sandbox-warm
fi
target="${CARGO_TARGET_DIR:-target}/$profile"
prefix="${SANDBOX_RUNTIME_PREFIX:-/usr/local/lib/sandbox}"
ctx=$(mktemp -d /tmp/sandbox-image-context.XXXXXX)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/bin" "$ctx/lib"
for f in "$target/sandbox" "$target/libsandbox_warm.so"; do
  [ -f "$f" ] || { echo "build.sh: $f is missing (cargo build ${cargo_flags[*]} -p sandbox -p sandbox-warm)" >&2; exit 1; }
  # Without debug info (the release profile keeps it for profiling): ~100 MiB less.
  objcopy --strip-debug "$f" "$ctx/bin/$(basename "$f")"
done
# The versions the symlinks point at, with the symlinks themselves (as install-*.sh leave them).
for tool in node uv; do
  [ -L "$prefix/$tool" ] || { echo "build.sh: $prefix/$tool is missing (scripts/install-deps.sh)" >&2; exit 1; }
  cp -a "$prefix/$tool" "$prefix/$(readlink "$prefix/$tool")" "$ctx/lib/"
done
# runc, not crun, and ulimits within this host's hard limits: see deploy/image/test.sh.
nproc=$(ulimit -Hu); { [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; } && nproc=32768
previous=$(podman image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
podman build --quiet --pull=never --runtime runc --network none \
  --ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit "nproc=$nproc:$nproc" --build-arg "BASE=$base" -f deploy/image/Containerfile -t "$image" "$ctx" >/dev/null
# The image this one replaces goes (the disk is shared; layers still in use stay).
current=$(podman image inspect -f '{{.Id}}' "$image")
[ -z "$previous" ] || [ "$previous" = "$current" ] || podman rmi "$previous" >/dev/null 2>&1 || true
echo "$image"
