#!/usr/bin/env bash
# Cold start on cgroup v2, side by side with this host: bench/startup.sh and
# bench/setup_phases.py run on the host, then inside a QEMU guest booted with only the unified
# hierarchy (scripts/v2-guest/run.sh, Debian's backports kernel by default), on the same release
# binary. TCG makes everything in the guest tens of times slower, so compare ratios: a phase
# whose guest/host ratio is far above the bare interpreter's is a cost of cgroup v2 or of that
# kernel, not of emulation.
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
python3 bench/setup_phases.py "$BIN" "$N" --json "$OUT/host-phases.json"

echo "== guest (Debian's $KERNEL kernel, cgroup_no_v1=all, TCG)"
V2VM_KERNEL="$KERNEL" V2VM_MEM="${V2VM_MEM:-2048}" V2VM_TIMEOUT="${V2VM_TIMEOUT:-1500}" V2VM_SHARE="$OUT" \
  bash scripts/v2-guest/run.sh bash -c "
    cd '$ROOT'
    SANDBOX_BENCH_BIN='$BIN' N='$N' bash bench/startup.sh | tee '$OUT/guest-startup.txt'
    python3 bench/setup_phases.py '$BIN' '$N' --json '$OUT/guest-phases.json'"

python3 - "$OUT" <<'EOF'
import json, re, sys
out = sys.argv[1]

def p50s(path):
    rows = {}
    for line in open(path):
        m = re.match(r"^(bare python3|bwrap|unshare|sandbox run)\s+([\d.]+)", line)
        if m:
            rows[m.group(1)] = float(m.group(2))
    return rows

h, g = p50s(f"{out}/host-startup.txt"), p50s(f"{out}/guest-startup.txt")
hp, gp = json.load(open(f"{out}/host-phases.json")), json.load(open(f"{out}/guest-phases.json"))
print(f"== side by side: host {hp['kernel']} (v1) against guest {gp['kernel']} (v2, TCG)")
print(f"{'p50 of':<16} {'host ms':>9} {'guest ms':>9} {'guest/host':>10}")
for k in h:
    print(f"{k:<16} {h[k]:>9.1f} {g[k]:>9.1f} {g[k] / h[k]:>9.1f}x")
print(f"{'phase (strace)':<16} {'host ms':>9} {'guest ms':>9} {'guest/host':>10}")
for k in hp["ms"]:
    a, b = hp["ms"][k], gp["ms"][k]
    print(f"{k:<16} {a:>9.1f} {b:>9.1f} {b / a if a else 0:>9.1f}x")
EOF
