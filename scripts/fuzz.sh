#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ (cargo fuzz, libFuzzer with AddressSanitizer) for SECONDS each
# (default 300; CI runs `bash scripts/fuzz.sh 25` from scripts/test.sh), starting from the seed
# corpus recorded in fuzz/corpus/<target>/. Targets (fuzz/README.md): admit (request JSON into
# admission), config (the TOML loader), packet and dns (the allowlist's packet filter and DNS
# resolver, which parse the sandbox's bytes as host root), mcp_args (MCP tool arguments into a
# request). A target fails on a panic, a sanitizer report, a leak, a single allocation over
# 256 MiB (-malloc_limit_mb) or an RSS over 2 GiB (-rss_limit_mb); the input that did it is kept in
# fuzz/artifacts/<target>/ (replay: `RUSTC_BOOTSTRAP=1 cargo fuzz run <target> <file>` in fuzz/).
# New inputs found go to a temporary corpus, not into the repository; `FUZZ_KEEP=1` merges them
# into fuzz/corpus/ (minimized, cargo fuzz cmin) to record them.
#
# cargo fuzz wants nightly compiler flags (-Zsanitizer, -Cpasses=sancov); the machine has only
# the stable toolchain, so RUSTC_BOOTSTRAP=1 lets stable rustc accept them. Builds go to
# ${CARGO_TARGET_DIR:-target}/fuzz, or FUZZ_TARGET_DIR (its own flags, never shared with the main
# build).
# Prints one cargo-style line per target and a closing "test result:" line; exit 1 on a failure.
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
SECONDS_EACH="${1:-300}"
shift || true
bash scripts/install-fuzz.sh
export RUSTC_BOOTSTRAP=1
TARGET_DIR="${FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/fuzz}"
cd fuzz
mapfile -t TARGETS < <(if [ "$#" -gt 0 ]; then printf '%s\n' "$@"; else cargo fuzz list; fi)
work="$(mktemp -d /tmp/sandbox-fuzz.XXXXXX)"
trap 'rm -rf "$work"' EXIT
if ! cargo fuzz build --target-dir "$TARGET_DIR" >"$work/build.log" 2>&1; then
  tail -40 "$work/build.log"
  echo "test fuzz::build ... FAILED"
  echo "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out"
  exit 1
fi
passed=0 failed=0
for t in "${TARGETS[@]}"; do
  mkdir -p "$work/$t"
  log="$work/$t.log"
  if cargo fuzz run --target-dir "$TARGET_DIR" "$t" "$work/$t" "corpus/$t" -- \
      -max_total_time="$SECONDS_EACH" -max_len=65536 -timeout=10 \
      -rss_limit_mb=2048 -malloc_limit_mb=256 -print_final_stats=1 >"$log" 2>&1; then
    runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')"
    cov="$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)"
    echo "test fuzz::$t ... ok ($runs runs in ${SECONDS_EACH} s, $cov, $(ls "$work/$t" | wc -l) new inputs)"
    passed=$((passed + 1))
    if [ "${FUZZ_KEEP:-0}" = 1 ]; then
      cargo fuzz cmin --target-dir "$TARGET_DIR" "$t" "corpus/$t" -- "$work/$t" >/dev/null 2>&1 || true
    fi
  else
    echo "test fuzz::$t ... FAILED"
    grep -E 'panicked|ERROR: |SUMMARY|Test unit written|out-of-memory|malloc\(' "$log" | head -20 || tail -30 "$log"
    failed=$((failed + 1))
  fi
done
echo
if [ "$failed" -eq 0 ]; then r=ok; else r=FAILED; fi
echo "test result: $r. $passed passed; $failed failed; 0 ignored; 0 measured; 0 filtered out"
[ "$failed" -eq 0 ]
