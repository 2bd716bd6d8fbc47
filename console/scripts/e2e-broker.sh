#!/usr/bin/env bash
# Runs the browser suite against a broker this script starts and stops:
#
#   scripts/e2e-broker.sh BROKER DATABASE [--bridge]
#
# BROKER is the queen-broker binary; DATABASE a libpq URL, or a file holding one
# (the ctest `pg` fixture's testpg/url). The broker listens on free ports
# (QUEEN_PORT=0, QUEEN_HTTP_PORT=0) and reports them in QUEEN_PORT_FILE: "port=N"
# for gRPC and "http_port=N" for the HTTP side port, which must serve the console
# and gRPC-Web. --bridge instead serves dist/ and gRPC-Web from
# test/support/sideport.mjs in front of the gRPC port: it tests the console, not
# the broker's side port (for use until the broker has one).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 2 ] || { echo "usage: $0 BROKER DATABASE_URL|URL_FILE [--bridge]" >&2; exit 2; }
broker=$1
db=$2
bridge=${3:-}
[ -x "$broker" ] || { echo "e2e-broker: $broker is not an executable broker" >&2; exit 1; }
if [ -f "$db" ]; then db=$(cat "$db"); fi
[ -n "$db" ] || { echo "e2e-broker: empty database URL" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/queen-console-e2e.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# Waits (bounded) until FILE has a line KEY=VALUE; prints VALUE.
wait_key() {
  local file=$1 key=$2 what=$3 pid=$4
  for _ in $(seq 300); do
    if [ -f "$file" ] && grep -q "^$key=" "$file"; then
      grep "^$key=" "$file" | head -1 | cut -d= -f2-
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { echo "e2e-broker: $what exited before it was ready:" >&2; tail -20 "$work"/*.log >&2; return 1; }
    sleep 0.1
  done
  echo "e2e-broker: $what not ready after 30 s" >&2
  return 1
}

QUEEN_DATABASE_URL=$db QUEEN_PORT=0 QUEEN_TLS_PORT=0 QUEEN_HTTP_PORT=0 QUEEN_BIND_ADDR=127.0.0.1 \
  QUEEN_PORT_FILE="$work/ports" "$broker" >"$work/broker.log" 2>&1 &
pids+=($!)
port=$(wait_key "$work/ports" port broker "${pids[0]}")
export QUEEN_ADDR=127.0.0.1:$port

if [ "$bridge" = "--bridge" ]; then
  node "$here/test/support/sideport.mjs" --listen 127.0.0.1:0 --grpc "$QUEEN_ADDR" >"$work/bridge.out" 2>"$work/bridge.log" &
  pids+=($!)
  for _ in $(seq 300); do grep -q '^listening ' "$work/bridge.out" 2>/dev/null && break; sleep 0.1; done
  url=$(sed -n 's/^listening \([^ ]*\).*/\1/p' "$work/bridge.out")
  [ -n "$url" ] || { echo "e2e-broker: the bridge did not start" >&2; cat "$work/bridge.log" >&2; exit 1; }
  export QUEEN_CONSOLE_URL=$url
else
  # The port file is complete once it has the gRPC port; no http_port then means no side port.
  http=$(grep '^http_port=' "$work/ports" | head -1 | cut -d= -f2- || true)
  if [ -z "$http" ] || [ "$http" = "-1" ]; then
    echo "e2e-broker: the broker reported no HTTP side port (no http_port= line in QUEEN_PORT_FILE): it does not serve the console yet" >&2
    exit 1
  fi
  export QUEEN_CONSOLE_URL=http://127.0.0.1:$http/
fi

echo "e2e-broker: console $QUEEN_CONSOLE_URL, gRPC $QUEEN_ADDR"
cd "$here"
status=0
npm run --silent test:e2e || status=$?
if [ $status -ne 0 ]; then echo "--- broker log (last 30 lines)" >&2; tail -30 "$work/broker.log" >&2; fi
exit $status
