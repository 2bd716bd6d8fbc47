#!/bin/bash
# Entrypoint of the CI PostgreSQL stand-in (see Dockerfile beside it).
#   docker-entrypoint.sh postgres [postgres options...]   initialise if needed, then run
#   docker-entrypoint.sh OTHER...                          run OTHER as given
# On first start (no PG_VERSION in PGDATA) it runs initdb with POSTGRES_USER as
# the superuser and POSTGRES_PASSWORD as its password (scram-sha-256 over TCP
# from anywhere, trust over the local socket), then creates POSTGRES_DB.
set -euo pipefail

if [ "${1:-}" != postgres ]; then
  exec "$@"
fi
shift

: "${PGDATA:=/var/lib/postgresql/data}"
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" postgres "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "entrypoint: POSTGRES_PASSWORD must be set to initialise the database" >&2
    exit 1
  fi
  user=${POSTGRES_USER:-postgres}
  db=${POSTGRES_DB:-$user}
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  if [ "$db" != postgres ]; then
    # single-user mode: no server, no network, exits when stdin ends
    printf 'CREATE DATABASE "%s"\n' "${db//\"/\"\"}" | postgres --single -D "$PGDATA" postgres >/dev/null
  fi
  echo "entrypoint: initialised $PGDATA (superuser $user, database $db)"
fi

exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
