#!/usr/bin/env bash
# The test command: installs dependencies, then runs every test: the Rust workspace (unit tests,
# and integration tests that create real namespaces and cgroups: run as root), the warm modes' and
# the static musl build's stages, the cgroup v2 guest stage (scripts/v2-guest/ci.sh), the
# container image stage (deploy/image/test.sh), the fuzz targets briefly (scripts/fuzz.sh), a
# short soak (bench/soak.sh), the TypeScript and Python SDKs against a real `sandbox serve`, the
# MCP server through the official Python MCP SDK, the multi-node test and the Helm chart's
# validation on paper (deploy/helm/validate.sh); after the Rust suites, that they left nothing on
# the host (scripts/host-leftovers.sh). Ends with one summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The audit log's PostgreSQL backend runs the same suite against a real server.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql
fi
cargo fmt --check
cargo build --workspace --all-targets
cargo clippy --workspace --all-targets -- -D warnings
# The API docs build without a broken or private intra-doc link (public items' docs link only
# what a reader of those docs can open).
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps -q
log="$(mktemp)"
pgdir="$(mktemp -d /tmp/sandbox-test-pg.XXXXXX)"
chmod 0755 "$pgdir"
trap 'rm -f "$log"; bash scripts/test-postgres.sh stop "$pgdir"' EXIT
SANDBOX_TEST_POSTGRES_URL="$(bash scripts/test-postgres.sh start "$pgdir")"
export SANDBOX_TEST_POSTGRES_URL
export SANDBOX_BIN="$PWD/target/debug/sandbox"
status=0
# What the Rust suites leave on the host (execution mounts, cgroups, sandbox processes): none.
leftovers="$(mktemp)"
trap 'rm -f "$log" "$leftovers"; bash scripts/test-postgres.sh stop "$pgdir"' EXIT
bash scripts/host-leftovers.sh snapshot "$leftovers"
cargo test --workspace 2>&1 | tee "$log" || status=1
# The attack, limit, timeout, file, harness and real-world-case tests, the bases', the OCI images',
# the environments', the examples' and the basics, again, every Python execution forked from a warm
# template (`sandbox run --warm`): same expected outcomes, the same root seen.
SANDBOX_TEST_WARM=1 cargo test -p sandbox --test it -- attacks:: limits:: timeouts:: files:: harness:: cases:: bases:: oci:: environments:: examples:: basics:: 2>&1 | tee -a "$log" || status=1
# The same suites, the bases', images' and environments' among them, with every execution in a
# pre-started pooled sandbox (`sandbox run --warm=pool`; python-default's own warm mode under
# `sandbox serve`, and TypeScript's), and the allowlist network suite with each sandbox's TUN
# device made before its request.
SANDBOX_TEST_WARM=pool cargo test -p sandbox --test it -- attacks:: limits:: timeouts:: files:: harness:: cases:: network:: bases:: oci:: environments:: 2>&1 | tee -a "$log" || status=1
# And with every Python execution in a child its template forked and sandboxed before the
# request (`sandbox run --warm=prefork`; python-analysis's own warm start under `sandbox serve`).
SANDBOX_TEST_WARM=prefork cargo test -p sandbox --test it -- attacks:: limits:: timeouts:: files:: harness:: cases:: bases:: oci:: environments:: 2>&1 | tee -a "$log" || status=1
# The static musl build (README "A static build"): the same code over another C library, so the
# attack, limit, timeout, file, harness, real-world-case and network suites run against it too,
# cold and with every Python execution in a child forked ahead (the warm path that lifts a child's
# scheduling policy, which musl's sched_setscheduler() refused), the warm library (a glibc
# cdylib: the templates' Python loads it) beside the binary; and the runtime's and engine's unit
# tests but the seccomp ones (which run the host's libseccomp, a glibc library).
bash scripts/install-musl.sh
cargo build -p sandbox-warm
mkdir -p target/x86_64-unknown-linux-musl/debug
cp target/debug/libsandbox_warm.so target/x86_64-unknown-linux-musl/debug/
musl=(--target x86_64-unknown-linux-musl)
cargo test "${musl[@]}" -p sandbox --test it -- attacks:: limits:: timeouts:: files:: harness:: cases:: network:: 2>&1 | tee -a "$log" || status=1
SANDBOX_TEST_WARM=prefork cargo test "${musl[@]}" -p sandbox --test it -- attacks:: limits:: timeouts:: files:: harness:: cases:: 2>&1 | tee -a "$log" || status=1
cargo test "${musl[@]}" -p sandbox-runtime -p sandbox-engine --lib -- --skip seccomp:: 2>&1 | tee -a "$log" || status=1
bash scripts/host-leftovers.sh check "$leftovers" 2>&1 | tee -a "$log" || status=1
# Fuzzing (issue 12, item 11): every fuzz target of fuzz/ for 25 s from its recorded corpus.
bash scripts/fuzz.sh 25 2>&1 | tee -a "$log" || status=1
# Soak (item 12), short: 500 executions of the mix through the debug `sandbox serve`, then the
# leak checks (bench/soak.sh; the 10,000-run figures are in the README).
SANDBOX_SOAK_BIN="$SANDBOX_BIN" bash bench/soak.sh 500 2>&1 | tee -a "$log" || status=1
# cgroup v2 for real: the limits and isolation tests in QEMU guests on Debian's 6.1 and 6.12
# kernels with only the unified hierarchy (scripts/v2-guest/; this host is v1).
bash scripts/v2-guest/ci.sh 2>&1 | tee -a "$log" || status=1
# Inside a container: the OCI image (deploy/image/build.sh: release build, Debian base cached in
# /var/cache/sandbox-image) run with rootful podman, privileged and with the minimal capability
# set, then with each piece missing (not ready, the self-test step named).
# The image is made from the debug build this script made above (a release build from nothing
# would add ~10 min): what is tested is the image's make-up and the container's needs.
SANDBOX_IMAGE_PROFILE=debug bash deploy/image/test.sh 2>&1 | tee -a "$log" || status=1
bash clients/typescript/run-tests.sh 2>&1 | tee -a "$log" || status=1
bash clients/python/run-tests.sh -q 2>&1 | tee -a "$log" || status=1
# The MCP server through the official Python MCP SDK (stdio and streamable HTTP).
bash crates/sandbox-mcp/tests/python/run-tests.sh -q 2>&1 | tee -a "$log" || status=1
# Several nodes: three `sandbox serve` in network namespaces, PostgreSQL and HAProxy (issue 15).
bash scripts/cluster-test.sh 2>&1 | tee -a "$log" || status=1
# The Helm chart on paper (issue 15): helm lint, helm template for both security profiles,
# Kubernetes 1.33 and 1.36 schemas, the deployment rules and their negative cases.
bash deploy/helm/validate.sh --sandbox target/debug/sandbox 2>&1 | tee -a "$log" || status=1
# One closing line for every runner: cargo's "test result:" lines, node's "# pass/# fail", pytest's "N passed, M failed".
awk '
  /^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
  /^# pass / { p += $3 } /^# fail / { f += $3 }
  /^[0-9]+ (passed|failed)/ && / in [0-9.]+s/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
  END { printf "all tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
