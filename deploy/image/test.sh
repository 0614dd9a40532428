#!/usr/bin/env bash
# The container stage of CI (scripts/test.sh runs it): builds the image (deploy/image/build.sh)
# and runs it with rootful podman.
#
#   ready:     `--privileged`: `serve` inside answers print(6*7) with 42 over HTTP from the host,
#              a memory bomb ends `memory_limit`, an allowlist profile reaches a server the test
#              starts on the host (198.18.99.2:8080, on the host's loopback) and is refused the
#              same server's port that the profile does not list.
#   not ready: the image without `--privileged` (podman's default capabilities, seccomp, masked
#              /proc, read-only cgroupfs), and `--privileged` with one piece taken away: a
#              read-only cgroupfs, no /dev/net/tun (with an allowlist profile), a seccomp profile
#              that refuses user namespaces, a masked /proc; and the minimal set below less
#              CAP_SYS_PTRACE or CAP_NET_ADMIN. Each: GET /readyz is 503 naming the failing
#              step while /healthz is 200, and `sandbox doctor` exits 3 naming it.
#   minimal:   the ready checks again without --privileged, with only what the service needs.
#
# Prints one "test image::NAME ... ok|FAILED" line per case and cargo's "test result:" line,
# which scripts/test.sh's closing line counts. Exit 1 when a case failed.
# Knobs: SANDBOX_IMAGE (localhost/sandbox:latest), SANDBOX_IMAGE_PORT (18480).
set -euo pipefail
cd "$(dirname "$0")/../.."
here="$PWD/deploy/image"
image="${SANDBOX_IMAGE:-localhost/sandbox:latest}"
port="${SANDBOX_IMAGE_PORT:-18480}"
start=$(date +%s)

# crun (podman's default here) refuses this host's hybrid layout ("cgroups in hybrid mode not
# supported, drop all controllers from cgroupv2": the unified hierarchy carries hugetlb); runc
# handles it. Both from Debian.
need=()
for pkg in podman runc; do dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg"); done
if [ "${#need[@]}" -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
t0=$(date +%s)
bash "$here/build.sh" >/dev/null
echo "== image stage: $image built in $(($(date +%s) - t0)) s"

# --runtime runc: see above. --network host: the service's port and the test's server are the
# host's own (executions still get network namespaces of their own). --ulimit: podman asks for
# more open files and processes than this host's hard limits, and its root has no
# CAP_SYS_RESOURCE to raise them (crun/runc: "setrlimit RLIMIT_NPROC: Operation not permitted").
podman=(podman --runtime runc --cgroup-manager cgroupfs)
nproc=$(ulimit -Hu); { [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; } && nproc=32768
common=(--network host --ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit "nproc=$nproc:$nproc")

work=$(mktemp -d /tmp/sandbox-image-test.XXXXXX)
chmod 0755 "$work"
containers=()
cleanup() {
  for c in "${containers[@]}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
  [ -z "${server_pid:-}" ] || kill "$server_pid" 2>/dev/null || true
  ip addr del 198.18.99.2/32 dev lo 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The allowed server: plain HTTP on an address of the host's loopback (loopback itself is the
# sandbox's own, so no rule may name 127.0.0.1).
ip addr del 198.18.99.2/32 dev lo 2>/dev/null || true
ip addr add 198.18.99.2/32 dev lo
mkdir -p "$work/www" && echo "hello from the host" >"$work/www/index.html"
python3 -m http.server --bind 198.18.99.2 --directory "$work/www" 8080 >/dev/null 2>&1 &
server_pid=$!
cat >"$work/config.toml" <<'EOF'
[profiles.net-py]
language = "python"
[profiles.net-py.network]
allow = ["198.18.99.2:8080"]
EOF
chmod 0644 "$work/config.toml"
config=(-v "$work/config.toml:/etc/sandbox/config.toml:ro")

passed=0 failed=0
result() { # NAME OK(0/1) [why]
  if [ "$2" = 0 ]; then echo "test image::$1 ... ok"; passed=$((passed + 1));
  else echo "test image::$1 ... FAILED: $3"; failed=$((failed + 1)); fi
}
# split_args FLAGS... [-- PRELUDE]: sets flags=(podman flags) and prelude (a shell line run as
# root in the container before the command; the container's own mount namespace).
split_args() {
  flags=() prelude=""
  while [ $# -gt 0 ]; do
    if [ "$1" = -- ]; then prelude=$2; break; fi
    flags+=("$1"); shift
  done
}
# cmd ARGS...: the podman arguments that run `sandbox ARGS...` after the prelude (tini stays pid 1).
cmd() {
  if [ -z "$prelude" ]; then echo "$image"; printf '%s\n' "$@"
  else printf '%s\n' --entrypoint /usr/bin/tini "$image" -- /bin/sh -c "$prelude; exec /usr/local/bin/sandbox $*"; fi
}
# start NAME FLAGS... [-- PRELUDE]: `serve` in container sandbox-image-test-NAME; waits until
# /readyz answers anything (up to 90 s); sets $code (its HTTP status) and $detail (its body's
# detail, or the body).
start() {
  local name=$1; shift
  split_args "$@"
  local c="sandbox-image-test-$name"
  podman rm -f -t 0 "$c" >/dev/null 2>&1 || true
  containers+=("$c")
  mapfile -t run < <(cmd serve --listen "127.0.0.1:$port")
  "${podman[@]}" run -d --name "$c" "${common[@]}" "${config[@]}" "${flags[@]}" "${run[@]}" >/dev/null
  code=000
  for _ in $(seq 1 180); do
    code=$(curl -s -o "$work/$name.readyz" -w '%{http_code}' "http://127.0.0.1:$port/readyz" || true)
    [ "$code" != 000 ] && break
    [ "$(podman inspect -f '{{.State.Running}}' "$c")" = true ] || break
    sleep 0.5
  done
  local body; body=$(cat "$work/$name.readyz" 2>/dev/null || true)
  detail=$(field detail <<<"$body")
  [ "$detail" != - ] || detail=$body
  echo "   $name: /readyz $code: $(head -c 300 <<<"$detail" | tr '\n' ' ')"
}
stop() { podman rm -f -t 2 "sandbox-image-test-$1" >/dev/null 2>&1 || true; }
execute() { # JSON body -> result JSON on stdout
  curl -s -m 60 -H 'content-type: application/json' -d "$1" "http://127.0.0.1:$port/v1/executions"
}
field() { # DOTTED.PATH (list indices as numbers) of the JSON on stdin; "-" when absent
  python3 -c 'import json,sys
try:
    v = json.load(sys.stdin)
    for k in sys.argv[1].split("."): v = v[int(k)] if isinstance(v, list) else v[k]
except Exception: v = "-"
print(v)' "$1"; }
check() { # NAME WANT GOT RESULT-JSON
  if [ "$2" = "$3" ]; then result "$1" 0; else result "$1" 1 "want $2, got $3: $(head -c 600 <<<"$4")"; fi
}

# ready NAME FLAGS... [-- PRELUDE]: the node is ready and runs executions.
ready() {
  local name=$1; shift
  start "$name" "$@"
  check "${name}_is_ready" 200 "$code" "$detail"
  local r py
  r=$(execute '{"code": "print(6*7)"}')
  check "${name}_python_6x7" ok/42 "$(field status <<<"$r")/$(field stdout <<<"$r")" "$r"
  r=$(execute '{"language": "typescript", "code": "const x: number = 6 * 7; console.log(x)"}')
  check "${name}_typescript_6x7" ok/42 "$(field status <<<"$r")/$(field stdout <<<"$r")" "$r"
  r=$(execute '{"code": "a = []\nwhile True:\n    a.append(bytearray(64 << 20))"}')
  check "${name}_memory_bomb" memory_limit/True "$(field status <<<"$r")/$(field oomKilled <<<"$r")" "$r"
  py='import urllib.request\nprint(urllib.request.urlopen(\"http://198.18.99.2:8080/\", timeout=8).read().decode().strip())'
  r=$(execute "{\"profile\": \"net-py\", \"code\": \"$py\"}")
  check "${name}_allowlist_reaches_allowed_server" "ok/hello from the host/allowlist" \
    "$(field status <<<"$r")/$(field stdout <<<"$r")/$(field enforcement.network <<<"$r")" "$r"
  py='import socket\ntry:\n    socket.create_connection((\"198.18.99.2\", 8081), timeout=8); print(\"connected\")\nexcept OSError as e:\n    print(type(e).__name__)'
  r=$(execute "{\"profile\": \"net-py\", \"code\": \"$py\"}")
  check "${name}_allowlist_refuses_unlisted_port" ConnectionRefusedError/8081/not_allowed \
    "$(field stdout <<<"$r")/$(field network.blocked.0.port <<<"$r")/$(field network.blocked.0.reason <<<"$r")" "$r"
  # Execution cgroups live inside the container's own (v1: the container's directory is what
  # is mounted at /sys/fs/cgroup/<controller>), so podman's limits contain them: seen from the host.
  local c="sandbox-image-test-$name" cid host_dir
  cid=$(podman inspect -f '{{.Id}}' "$c")
  host_dir=$(awk -F: '$2 == "memory" { print $3 }' "/proc/$(podman inspect -f '{{.State.Pid}}' "$c")/cgroup")
  check "${name}_execution_cgroups_inside_the_containers" "yes" \
    "$(grep -q "$cid" <<<"$host_dir" && [ -d "/sys/fs/cgroup/memory$host_dir/sandbox" ] && echo yes || echo no)" "host memory cgroup $host_dir"
  # doctor in the running container: every self-test step passes (tun included: net-py is an
  # allowlist profile). It exits 1, not 0: the image carries no environments (README).
  local out rc steps
  out=$(podman exec "$c" /usr/local/bin/sandbox doctor 2>&1) && rc=0 || rc=$?
  steps=$(sed -n '/^Self-test/,/^Runtimes/p' <<<"$out")
  check "${name}_doctor_self_test_passes" "1/8" \
    "$rc/$(grep -cE '\[ok\] (cgroup|cgroup_join|namespaces|uid_map|tun|proc|landlock|seccomp) ' <<<"$steps")" "$out"
  stop "$name"
}

# not_ready NAME STEP FLAGS... [-- PRELUDE]: /readyz is 503 naming STEP, and `sandbox doctor`
# in the same setting exits 3 naming it.
not_ready() {
  local name=$1 step=$2; shift 2
  start "$name" "$@"
  check "${name}_readyz_503" "503/self-test step $step" "$code/$(grep -o "self-test step $step" <<<"$detail" | head -1)" "$detail"
  # Alive but not ready: an orchestrator keeps it and sends it nothing.
  check "${name}_healthz_200" 200 "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz")" ""
  stop "$name"
  local out rc line
  mapfile -t run < <(cmd doctor)
  out=$("${podman[@]}" run --rm "${common[@]}" "${config[@]}" "${flags[@]}" "${run[@]}" 2>&1) && rc=0 || rc=$?
  line=$(grep -m1 -E "^\s*\[FAIL\] $step\s" <<<"$out" || true)
  echo "   $name: doctor exit $rc: $line"
  check "${name}_doctor_exit_3" "3/yes" "$rc/$([ -n "$line" ] && echo yes || echo no)" "$out"
}

# --- ready ----------------------------------------------------------------------------------
ready privileged --privileged
# The minimal set instead of --privileged: CAP_SYS_ADMIN (with it podman's default seccomp
# profile allows clone(CLONE_NEWUSER) and mount), CAP_SYS_PTRACE and CAP_NET_ADMIN (the helper
# opens the network namespace of an init that is not root's and creates its TUN device in it:
# root owns neither namespace, so needs both capabilities), an unmasked /proc,
# /dev/net/tun, and the container's own cgroup mounts made writable (podman mounts them
# read-only without --privileged on cgroup v1; remounting one's own bind mount needs
# CAP_SYS_ADMIN).
minimal=(--cap-add SYS_ADMIN,SYS_PTRACE,NET_ADMIN --security-opt unmask=ALL --device /dev/net/tun)
ready minimal "${minimal[@]}" -- 'for m in /sys/fs/cgroup/*/; do mount -o remount,bind,rw "$m"; done'

# --- not ready: each missing piece ----------------------------------------------------------
not_ready unprivileged 'cgroup'
# Read-only cgroupfs: the controllers' bind mounts made read-only in the container's own mount
# namespace (what podman does without --privileged); the host's mounts are untouched.
not_ready ro_cgroupfs 'cgroup' --privileged -- \
  'for m in /sys/fs/cgroup/*; do mount -o remount,bind,ro "$m"; done'
not_ready no_tun 'tun' --privileged -- 'rm -f /dev/net/tun'
not_ready seccomp_no_userns 'namespaces' --privileged --security-opt "seccomp=$here/seccomp-no-userns.json"
# A masked /proc as podman leaves it without --privileged (a read-only /proc/sys and a tmpfs over
# a /proc directory; `--security-opt mask=` is ignored with --privileged), in the container's
# own mount namespace: the kernel then refuses a fresh proc mount in a new user namespace.
not_ready masked_proc 'proc' --privileged -- \
  'mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && mount -t tmpfs -o ro tmpfs /proc/bus'

# The minimal set less one capability: the self-test creates its user namespace as the
# helper does (owned by an unprivileged uid), so a missing one is seen at step tun, not by the
# first allowlist execution.
not_ready minimal_no_ptrace 'tun' --cap-add SYS_ADMIN,NET_ADMIN --security-opt unmask=ALL --device /dev/net/tun -- \
  'for m in /sys/fs/cgroup/*/; do mount -o remount,bind,rw "$m"; done'
not_ready minimal_no_net_admin 'tun' --cap-add SYS_ADMIN,SYS_PTRACE --security-opt unmask=ALL --device /dev/net/tun -- \
  'for m in /sys/fs/cgroup/*/; do mount -o remount,bind,rw "$m"; done'

echo "== image stage: $(($(date +%s) - start)) s"
status=ok; [ "$failed" = 0 ] || status=FAILED
echo "test result: $status. $passed passed; $failed failed; 0 ignored; 0 measured; 0 filtered out; finished in $(($(date +%s) - start))s"
[ "$failed" = 0 ]
