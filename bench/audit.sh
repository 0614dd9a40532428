#!/usr/bin/env bash
# Audit log benchmark: records/s written by concurrent writers sharing one SQLite file, and the
# cost the log adds to one execution (begin + finish, p50/p99). WRITERS (16), PER_WRITER (200).
# AUDIT_BENCH_POSTGRES=URL: the writers share that PostgreSQL database instead, through a relay
# that counts round trips; AUDIT_BENCH_DELAY_US=N holds each chunk N µs each way (a network).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --release -q -p sandbox-audit --example audit_bench -- "${WRITERS:-16}" "${PER_WRITER:-200}"
