#!/usr/bin/env bash
# Builds and runs the broker. When QUEEN_DATABASE_URL is unset, starts (or reuses)
# a local PostgreSQL in .queen/pg and points the broker at it. Ctrl-C stops the
# broker; the local database keeps running (scripts/pg.sh stop .queen/pg).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
build=${QN_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target queen-broker queenctl
if [ -z "${QUEEN_DATABASE_URL:-}" ]; then
  QUEEN_DATABASE_URL=$("$root/scripts/pg.sh" start "$root/.queen/pg")
  export QUEEN_DATABASE_URL
  echo "using local PostgreSQL at $QUEEN_DATABASE_URL" >&2
fi
exec "$build/broker/queen-broker" "$@"
