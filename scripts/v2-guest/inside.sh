#!/usr/bin/env bash
# Runs inside a v2 guest (scripts/v2-guest/ci.sh boots it): the chosen integration tests, from
# the test binary built on the host, in a nested cgroup like a systemd unit's.
#   usage: inside.sh TEST-BINARY
set -uo pipefail
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
echo "== guest kernel $(uname -r): cgroup2 $(awk '$3 == "cgroup2" {print $4}' /proc/mounts), controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
# Like a systemd unit with Delegate=yes: the tests (and each `sandbox` they start) run in
# /ci.slice/stage.service; the first `sandbox` moves them into its sandbox-service leaf and
# puts executions in /ci.slice/stage.service/sandbox/<id>.
mkdir -p /sys/fs/cgroup/ci.slice/stage.service
echo "+memory +cpu +pids" > /sys/fs/cgroup/ci.slice/cgroup.subtree_control
echo $$ > /sys/fs/cgroup/ci.slice/stage.service/cgroup.procs
export SANDBOX_TEST_CGROUP=v2 SANDBOX_TEST_TIME_FACTOR=4 RUST_BACKTRACE=0
cd /tmp
status=0
# shellcheck source=scripts/v2-guest/tests.sh
. "$here/tests.sh"
echo "== cold: ${#COLD[@]} tests"
"$bin" --exact --test-threads=2 "${COLD[@]}" || status=1
echo "== warm (SANDBOX_TEST_WARM=1): ${#WARM[@]} tests"
SANDBOX_TEST_WARM=1 "$bin" --exact --test-threads=2 "${WARM[@]}" || status=1
echo "== prefork (SANDBOX_TEST_WARM=prefork): ${#PREFORK[@]} tests"
SANDBOX_TEST_WARM=prefork "$bin" --exact --test-threads=2 "${PREFORK[@]}" || status=1
exit $status
