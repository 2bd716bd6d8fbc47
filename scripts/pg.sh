#!/usr/bin/env bash
# A throwaway PostgreSQL 15 cluster for tests, benchmarks and the Quick start.
#
#   scripts/pg.sh start DIR   create (if needed) and start a cluster in DIR on a free
#                             loopback port; writes the libpq URL to DIR/url and prints it
#   scripts/pg.sh stop DIR [--remove]   stop it (--remove also deletes the data)
#   scripts/pg.sh url DIR     print the URL of a running cluster
#
# As root the server runs as the `postgres` user (initdb refuses root). Environment:
#   QN_PG_FSYNC=off     faster, non-durable (the test suites use it; benchmarks do not)
#   QN_PG_PROFILE=1     load pg_stat_statements (track = all, track_planning on) and set
#                       track_functions = all, for per-statement and per-procedure profiles
#                       (CREATE EXTENSION pg_stat_statements in the database you profile)
#   QN_PG_OPTS="-c k=v" more server settings, after ours (e.g. a larger shared_buffers)
set -euo pipefail

cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|url DIR" >&2; exit 2; }

bindir=$(pg_config --bindir 2>/dev/null || true)
if [ ! -x "$bindir/initdb" ]; then bindir=/usr/lib/postgresql/15/bin; fi
[ -x "$bindir/initdb" ] || { echo "pg.sh: PostgreSQL server binaries not found (install postgresql-15)" >&2; exit 1; }

if [ "$(id -u)" -eq 0 ]; then
  as() { runuser -u postgres -- "$@"; }
  dbuser=postgres
else
  as() { "$@"; }
  dbuser=$(id -un)
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# As root the cluster lives in a directory of its own under /tmp: DIR may sit below
# a home directory the postgres user cannot traverse. DIR/home records where.
if [ "$(id -u)" -eq 0 ]; then
  if [ ! -s "$dir/home" ]; then
    [ "$cmd" = start ] || { echo "pg.sh: no cluster in $dir" >&2; exit 1; }
    home=$(mktemp -d /tmp/queen-pg.XXXXXX)
    echo "$home" >"$dir/home"
  fi
  home=$(cat "$dir/home")
else
  home="$dir"
fi
data="$home/data"

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

case "$cmd" in
start)
  if [ -f "$dir/url" ] && as "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    cat "$dir/url"; exit 0
  fi
  if [ ! -f "$data/PG_VERSION" ]; then
    mkdir -p "$home"
    chmod 755 "$home"
    if [ "$(id -u)" -eq 0 ]; then chown postgres: "$home"; fi
    as "$bindir/initdb" -D "$data" -U "$dbuser" --auth=trust -E UTF8 --locale=C.UTF-8 >"$home/initdb.log" 2>&1 \
      || { cat "$home/initdb.log" >&2; exit 1; }
  fi
  fsync=${QN_PG_FSYNC:-on}
  profile=""
  if [ "${QN_PG_PROFILE:-0}" = 1 ]; then
    profile="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all \
             -c pg_stat_statements.track_planning=on -c pg_stat_statements.max=10000 \
             -c track_functions=all"
  fi
  for attempt in 1 2 3 4 5 6 7 8 9 10; do
    port=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
    port_free "$port" || continue
    if as "$bindir/pg_ctl" -D "$data" -l "$home/server.log" -w -t 60 start \
        -o "-p $port -k $home -c listen_addresses=127.0.0.1 -c max_connections=300 \
            -c shared_buffers=512MB -c fsync=$fsync -c synchronous_commit=on \
            -c full_page_writes=$fsync -c max_wal_size=4GB -c checkpoint_timeout=15min \
            -c log_min_messages=warning -c wal_compression=on $profile ${QN_PG_OPTS:-}" >/dev/null 2>&1; then
      url="postgresql://$dbuser@127.0.0.1:$port/postgres"
      echo "$url" >"$dir/url"
      echo "$url"
      exit 0
    fi
  done
  echo "pg.sh: could not start PostgreSQL; see $home/server.log" >&2
  tail -n 20 "$home/server.log" >&2 || true
  exit 1
  ;;
stop)
  if [ -f "$data/PG_VERSION" ]; then
    as "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -f "$dir/url"
  if [ "${3:-}" = "--remove" ]; then rm -rf "$data"; fi
  ;;
url)
  cat "$dir/url"
  ;;
*)
  echo "usage: $0 start|stop|url DIR" >&2; exit 2 ;;
esac
