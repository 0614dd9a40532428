#!/usr/bin/env bash
# The cgroup v2 stage of CI (scripts/test.sh runs it after the host's tests): boots QEMU guests
# with only the unified hierarchy on Debian 12's stock kernel (6.1) and on bookworm-backports'
# (6.12), and runs inside each the integration tests listed in tests.sh from the test binary
# built here (`cargo test --no-run`; the guest sees this machine's / read-only). Prints the
# kernels, the tests and cargo's "test result:" lines (counted by test.sh's closing line), and
# the time each guest took. Knobs: SANDBOX_V2_KERNELS ("stable backports"), V2VM_* (run.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
kernels=${SANDBOX_V2_KERNELS:-stable backports}
start=$(date +%s)
built=$(cargo test -p sandbox --test it --no-run 2>&1) || { echo "$built"; exit 1; }
bin=$(sed -n 's/.*Executable tests\/it\/main.rs (\(.*\))/\1/p' <<<"$built")
[ -x "$bin" ] || { echo "v2 guest stage: no test binary in: $built"; exit 1; }
# Absolute: the guest runs it from another directory (cargo prints it relative to the workspace
# unless CARGO_TARGET_DIR is absolute).
bin=$(realpath "$bin")
# Every name tests.sh lists must exist: `--exact` skips a renamed test silently.
known=$("$bin" --list --format terse 2>/dev/null | sed -n 's/: test$//p')
missing=$(bash -c 'source "$1"; printf "%s\n" "${COLD[@]}" "${WARM[@]}" "${PREFORK[@]}"' _ scripts/v2-guest/tests.sh | sort -u | grep -vxF -f <(printf '%s\n' "$known") || true)
[ -z "$missing" ] || { echo "v2 guest stage: scripts/v2-guest/tests.sh names tests that do not exist: $missing"; exit 1; }
status=0
for k in $kernels; do
  t0=$(date +%s)
  echo "== v2 guest stage: Debian's $k kernel (cgroup_no_v1=all)"
  rc=0
  V2VM_KERNEL=$k V2VM_MEM=${V2VM_MEM:-2048} V2VM_TIMEOUT=${V2VM_TIMEOUT:-420} V2VM_SHARE='' \
    bash scripts/v2-guest/run.sh bash "$PWD/scripts/v2-guest/inside.sh" "$bin" || rc=$?
  [ $rc -eq 0 ] || status=1
  echo "== v2 guest stage: $k kernel done in $(($(date +%s) - t0)) s, exit $rc"
done
echo "== v2 guest stage: $(($(date +%s) - start)) s for kernels: $kernels"
exit $status
