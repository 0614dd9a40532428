#!/usr/bin/env bash
# A throwaway PostgreSQL for the audit tests: `start DIR` initialises a cluster in DIR (trust
# auth, loopback, a free port), starts it and prints the libpq URL; `stop DIR` stops it and
# removes DIR. Runs the server as the `postgres` system user (the Debian package creates it).
set -euo pipefail
cmd="$1"
dir="$2"
bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
case "$cmd" in
  start)
    mkdir -p "$dir"
    chown postgres "$dir"
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    su postgres -s /bin/sh -c "'$bin/initdb' -D '$dir/data' -A trust -U postgres" >"$dir/initdb.log" 2>&1
    su postgres -s /bin/sh -c "'$bin/pg_ctl' -D '$dir/data' -l '$dir/server.log' -w -o \"-p $port -k '$dir' -c listen_addresses=127.0.0.1 -c fsync=on\" start" >/dev/null
    echo "host=127.0.0.1 port=$port user=postgres"
    ;;
  stop)
    su postgres -s /bin/sh -c "'$bin/pg_ctl' -D '$dir/data' -m fast -w stop" >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
