#!/usr/bin/env bash
# Cold start on cgroup v2, side by side with this host: bench/startup.sh runs on the host, then
# inside a QEMU guest booted with only the unified hierarchy (scripts/v2-guest/run.sh, Debian's
# backports kernel by default), on the same release binary. TCG makes everything in the guest
# many times slower, so compare ratios: a part whose guest/host ratio is far above the bare
# interpreter's is a cost of cgroup v2 or of that kernel, not of emulation. The parts are the
# result's own timing (setupMs: request to the program's execve; runMs; collectMs) and what the
# CLI spends outside them (process start, config, audit log). strace-based phase timing
# (bench/setup_phases.py) is not used in the guest: under TCG each ptrace stop costs so much
# that it inflates the set-up ~10x.
#   N=20 bash bench/startup-guest.sh            (N: runs per variant and phase; default 20)
#   SANDBOX_V2_KERNEL=stable bash bench/startup-guest.sh   (Debian 12's 6.1 instead)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
N="${N:-20}"
KERNEL="${SANDBOX_V2_KERNEL:-backports}"

bash scripts/install-deps.sh
command -v bwrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; }
command -v strace >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace; }
cargo build --release -q -p sandbox
BIN="$(realpath "${CARGO_TARGET_DIR:-$ROOT/target}/release/sandbox")"

OUT="$(mktemp -d /tmp/sandbox-startup-guest.XXXXXX)"
chmod 0755 "$OUT"
trap 'rm -rf "$OUT"' EXIT

echo "== host ($(uname -r), cgroup $(stat -fc %T /sys/fs/cgroup | sed 's/cgroup2fs/v2/; s/tmpfs/v1/'))"
SANDBOX_BENCH_BIN="$BIN" N="$N" bash bench/startup.sh | tee "$OUT/host-startup.txt"

echo "== guest (Debian's $KERNEL kernel, cgroup_no_v1=all, TCG)"
V2VM_KERNEL="$KERNEL" V2VM_MEM="${V2VM_MEM:-2048}" V2VM_TIMEOUT="${V2VM_TIMEOUT:-1500}" V2VM_SHARE="$OUT" \
  bash scripts/v2-guest/run.sh bash -c "
    cd '$ROOT'
    SANDBOX_BENCH_BIN='$BIN' N='$N' bash bench/startup.sh | tee '$OUT/guest-startup.txt'"

python3 - "$OUT" "$KERNEL" <<'EOF'
import re, sys
out, kernel = sys.argv[1], sys.argv[2]

def parse(path):
    rows = {}
    for line in open(path):
        m = re.match(r"^(bare python3|bwrap|unshare|sandbox run)\s+([\d.]+)", line)
        if m:
            rows[m.group(1)] = float(m.group(2))
        m = re.match(r"^sandbox run --json timing medians.*: (.*)$", line)
        if m:
            for kv in m.group(1).split(", "):
                k, v = kv.split("=")
                rows[f"  {k}"] = float(v)
    rows["  outside the execution"] = rows["sandbox run"] - sum(rows[f"  {k}"] for k in ("setupMs", "runMs", "collectMs"))
    return rows

h, g = parse(f"{out}/host-startup.txt"), parse(f"{out}/guest-startup.txt")
print(f"== side by side: host (cgroup v1) against the guest ({kernel} kernel, cgroup v2, TCG), p50 / median ms")
print(f"{'':<24} {'host':>8} {'guest':>8} {'guest/host':>10}")
for k in h:
    print(f"{k:<24} {h[k]:>8.1f} {g[k]:>8.1f} {g[k] / h[k] if h[k] else 0:>9.1f}x")
EOF
