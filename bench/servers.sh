# Sourced by the benchmarks that start `sandbox serve` processes (warm.sh, ab.sh). Needs WORK (a
# scratch directory, removed by stop_servers) and the SB array (the binary and its global flags).

# start_server DATA_DIR [SERVE FLAGS...]: starts `${SB[@]} --data-dir DATA_DIR serve` on a free
# loopback port, records its pid in $WORK/pids and prints its URL once it listens.
start_server() {
  local data="$1"; shift
  "${SB[@]}" --data-dir "$data" serve --listen 127.0.0.1:0 "$@" > "$data.out" 2> "$data.log" &
  echo $! >> "$WORK/pids"
  for _ in $(seq 100); do
    if grep -q listening "$data.out" 2>/dev/null; then
      awk '{print $3; exit}' "$data.out"
      return
    fi
    sleep 0.1
  done
  echo "server did not start: $(cat "$data.log")" >&2
  exit 1
}

# The servers are not the calling shell's children (started in command substitutions): wait for
# each to finish its own clean-up (templates, pools, mounts) before removing their directories.
stop_servers() {
  local p
  kill $(cat "$WORK/pids" 2>/dev/null) 2>/dev/null || true
  for p in $(cat "$WORK/pids" 2>/dev/null); do
    while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
  done
  rm -rf "$WORK"
}
