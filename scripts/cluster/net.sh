#!/usr/bin/env bash
# The cluster test's network and processes, driven by scripts/cluster/cluster.py:
#   up DIR            bridge sbxc-br (10.77.0.1/24), namespaces sbxc-n1..3 (10.77.0.11..13) on veths,
#                     a PostgreSQL and HAProxy (in front of the nodes) listening on the bridge's
#                     address only, on ports below Linux's ephemeral range (32768-60999): a port in
#                     it may be held by any connection's local end when they bind (CI once saw
#                     PostgreSQL, then on 55432, come up without 127.0.0.1, refusing the test's
#                     reader), and connections from the host to the nodes take theirs on the
#                     bridge's address too (pg-start binds again mid-test)
#   node-start DIR N  starts `sandbox serve` N in its namespace (pid in DIR/nN.pid, log DIR/nN.log)
#   pg-stop DIR | pg-start DIR
#   down DIR          stops everything and removes the namespaces, the bridge and DIR
# Needs root, iproute2, PostgreSQL (Debian's) and HAProxy (Debian's; installed if missing).
set -euo pipefail
cmd="$1"
dir="$2"
pgbin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
bridge=sbxc-br
pg_port=25432
proxy_port=28080

pg_ctl() { su postgres -s /bin/sh -c "'$pgbin/pg_ctl' -D '$dir/pg/data' -l '$dir/pg/server.log' $*" >/dev/null; }

case "$cmd" in
  up)
    if ! command -v haproxy >/dev/null; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null
    fi
    mkdir -p "$dir"
    chmod 0755 "$dir"
    ip link add "$bridge" type bridge
    ip addr add 10.77.0.1/24 dev "$bridge"
    ip link set "$bridge" up
    for n in 1 2 3; do
      ip netns add "sbxc-n$n"
      ip link add "sbxc-v$n" type veth peer name eth0 netns "sbxc-n$n"
      ip link set "sbxc-v$n" master "$bridge" up
      ip -n "sbxc-n$n" addr add "10.77.0.1$n/24" dev eth0
      ip -n "sbxc-n$n" link set eth0 up
      ip -n "sbxc-n$n" link set lo up
      ip -n "sbxc-n$n" route add default via 10.77.0.1
    done
    # PostgreSQL on the bridge (see above), trusting its subnet (the nodes' and the host's there).
    mkdir -p "$dir/pg"
    chown postgres "$dir/pg"
    su postgres -s /bin/sh -c "'$pgbin/initdb' -D '$dir/pg/data' -A trust -U postgres" >"$dir/pg/initdb.log" 2>&1
    echo "host all all 10.77.0.0/24 trust" >>"$dir/pg/data/pg_hba.conf"
    cat >>"$dir/pg/data/postgresql.conf" <<CONF
port = $pg_port
listen_addresses = '10.77.0.1'
unix_socket_directories = '$dir/pg'
max_connections = 100
CONF
    pg_ctl -w start
    cat >"$dir/haproxy.cfg" <<CONF
global
    maxconn 1000
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout queue 60s
    # Retry a request no node ran: the connection failed (a node stopped or died), or the node
    # answered 503 (audit unavailable). Not an empty response: that request may have run.
    # HAProxy 2.6 (Debian 12) cannot retry on 429: its retry-on takes only 401 403 404 408 425
    # and 500-504; leastconn keeps each node within its slots and queue, and a client retries a
    # 429 after its Retry-After.
    retries 3
    option redispatch 1
    retry-on conn-failure 503
    option http-server-close
frontend api
    bind 10.77.0.1:$proxy_port
    default_backend nodes
backend nodes
    balance leastconn
    option httpchk GET /readyz
    http-check expect status 200
    default-server check inter 300 fall 1 rise 2
    server n1 10.77.0.11:8080
    server n2 10.77.0.12:8080
    server n3 10.77.0.13:8080
CONF
    haproxy -D -f "$dir/haproxy.cfg" -p "$dir/haproxy.pid"
    echo "pg=host=10.77.0.1 port=$pg_port user=postgres proxy=http://10.77.0.1:$proxy_port"
    ;;
  node-start)
    n="$3"
    mkdir -p "$dir/n$n"
    # nsenter enters only the network namespace (`ip netns exec` would remount /sys and hide the
    # cgroup hierarchies). Requests through the balancer name its address in Host: a node answers
    # to it as to its own (--allowed-host, as a deployment names its public host).
    nsenter --net="/run/netns/sbxc-n$n" "$SANDBOX_BIN" serve --config "$dir/config.toml" --data-dir "$dir/n$n" \
      --listen "10.77.0.1$n:8080" --allowed-host "10.77.0.1:$proxy_port" --node-id "n$n" --no-warm >>"$dir/n$n.log" 2>&1 &
    echo $! >"$dir/n$n.pid"
    ;;
  pg-stop) pg_ctl -m fast -w stop ;;
  pg-start) pg_ctl -w start ;;
  down)
    [ -f "$dir/haproxy.pid" ] && kill "$(cat "$dir/haproxy.pid")" 2>/dev/null || true
    for n in 1 2 3; do
      [ -f "$dir/n$n.pid" ] && kill -9 "$(cat "$dir/n$n.pid")" 2>/dev/null || true
    done
    [ -d "$dir/pg/data" ] && pg_ctl -m immediate -w stop 2>/dev/null || true
    for n in 1 2 3; do ip netns del "sbxc-n$n" 2>/dev/null || true; done
    ip link del "$bridge" 2>/dev/null || true
    rm -rf "$dir"
    ;;
  *) echo "usage: $0 up|node-start|pg-stop|pg-start|down DIR [N]" >&2; exit 2 ;;
esac
