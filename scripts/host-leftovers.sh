#!/usr/bin/env bash
# What the test suite left on the host: `snapshot FILE` records the execution mounts, cgroups
# and sandbox processes that exist now; `check FILE` lists those that exist now and did not at
# the snapshot (waiting up to 20 s for teardowns still under way), and fails if there are any.
# Every test promises to leave nothing behind (no process, cgroup, mount or directory of an
# execution, a template or a pooled sandbox); a test that breaks it passes on its own, and what
# it leaves (mounts, empty cgroups) slowed every later run on the host until removed by hand.
# Only what an execution, a template or a pool makes is counted: mounts below an `executions/`
# or a test directory (`sandbox-it-*`), cgroups named by an execution id (a UUIDv7) or
# `template-`/`pool-`, and processes whose argv0 is `sandbox-init` or that run a template or
# harness script.
set -euo pipefail
cmd="$1"
file="$2"
now() {
  awk '{ print $5 }' /proc/self/mountinfo | grep -E '/executions/|/sandbox-it-[^/]+/' | sed 's/^/mount /' || true
  find /sys/fs/cgroup -mindepth 2 -maxdepth 5 -type d 2>/dev/null \
    | grep -E '/(template-|pool-)?[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$' | sed 's/^/cgroup /' || true
  for p in /proc/[0-9]*; do
    a="$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null || true)"
    case "$a" in
      sandbox-init*|*_sandbox_template.py*|*_sandbox_harness*) echo "process ${p#/proc/} $a" ;;
    esac
  done
}
case "$cmd" in
  snapshot) now | sort > "$file" ;;
  check)
    deadline=$((SECONDS + 20))
    while :; do
      left="$(now | sort | comm -13 "$file" - || true)"
      if [ -z "$left" ] || [ "$SECONDS" -ge "$deadline" ]; then break; fi
      sleep 1
    done
    if [ -n "$left" ]; then
      echo "host leftovers of the test suite ($(echo "$left" | wc -l)):"
      echo "$left" | head -50
      echo "0 passed, 1 failed in 0.0s (host leftovers)"
      exit 1
    fi
    echo "host leftovers of the test suite: none"
    echo "1 passed, 0 failed in 0.0s (host leftovers)"
    ;;
  *) echo "usage: $0 snapshot|check FILE" >&2; exit 2 ;;
esac
