#!/usr/bin/env bash
# Push throughput of two broker builds side by side, interleaved in one sitting
# (the machine is shared and noisy: only ratios measured together mean much).
#
#   bench/ab-push.sh BROKER_A BENCH_E2E_A BROKER_B BENCH_E2E_B [ROUNDS] [SECONDS]
#
# Starts one PostgreSQL cluster (scripts/pg.sh, fsync and synchronous_commit on),
# then ROUNDS times (default 3): broker A with a fresh database, `bench_e2e push
# --batch 100 --partitions 16` for SECONDS (default 10), broker A stopped; the
# same for B. Each result line is bench_e2e's, followed by the CPU the broker
# and PostgreSQL used meanwhile (percent of one core).
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,12p' "$0"; exit 2; }
A=$1; BA=$2; B=$3; BB=$4; ROUNDS=${5:-3}; SECS=${6:-10}
here=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d /tmp/queen-ab.XXXXXX)
url=$("$here/scripts/pg.sh" start "$dir/pg")
trap '"$here/scripts/pg.sh" stop "$dir/pg" --remove >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT

cpu_of() { # total utime+stime ticks of the processes whose command matches $1
  local t=0 p
  for p in $(pgrep -f "$1" || true); do
    t=$(( t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0) ))
  done
  echo "$t"
}

run() { # label broker bench db
  local label=$1 broker=$2 bench=$3 db=$4 port pid
  psql -q "$url" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null 2>&1
  local dburl=${url%/*}/$db
  port=$(( 20000 + RANDOM % 20000 ))
  QUEEN_DATABASE_URL=$dburl QUEEN_PORT=$port QUEEN_HTTP_PORT=0 QUEEN_LOG_LEVEL=warn \
    "$broker" >"$dir/$label.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    "$bench" stats --addr 127.0.0.1:$port >/dev/null 2>&1 && break
    sleep 0.1 # polling for the broker to listen, not a synchronisation of results
  done
  local hz b0 p0 b1 p1 t0 t1 line
  hz=$(getconf CLK_TCK)
  b0=$(awk '{print $14 + $15}' /proc/$pid/stat); p0=$(cpu_of "postgres: .*$db")
  t0=$(date +%s.%N)
  line=$("$bench" push --addr 127.0.0.1:$port --batch 100 --partitions 16 --duration "$SECS" | grep '^push ')
  t1=$(date +%s.%N)
  b1=$(awk '{print $14 + $15}' /proc/$pid/stat); p1=$(cpu_of "postgres: .*$db")
  kill "$pid"; wait "$pid" || true
  awk -v l="$label" -v line="$line" -v b=$(( b1 - b0 )) -v p=$(( p1 - p0 )) -v hz="$hz" \
      -v t="$(echo "$t1 - $t0" | bc)" \
      'BEGIN { printf "%s %s broker_cpu=%.0f%% pg_backends_cpu=%.0f%%\n", l, line, 100*b/hz/t, 100*p/hz/t }'
}

for r in $(seq "$ROUNDS"); do
  run "A(round $r)" "$A" "$BA" ab_a_$r
  run "B(round $r)" "$B" "$BB" ab_b_$r
done
