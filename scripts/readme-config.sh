#!/usr/bin/env bash
# Keeps README.md's configuration table equal to the broker's table (config.c).
#   scripts/readme-config.sh BROKER --check   exit 1 (with a diff) when they differ
#   scripts/readme-config.sh BROKER --write   rewrite the table in README.md
set -euo pipefail
broker=${1:?usage: readme-config.sh BROKER --check|--write}
mode=${2:---check}
root=$(cd "$(dirname "$0")/.." && pwd)
readme="$root/README.md"
begin='<!-- config-table:begin -->'
end='<!-- config-table:end -->'
want=$("$broker" --config-table)
have=$(sed -n "/^$begin\$/,/^$end\$/p" "$readme" | sed '1d;$d')
if [ "$mode" = "--write" ]; then
  tmp=$(mktemp)
  awk -v b="$begin" -v e="$end" -v t="$want" '
    $0 == b { print; print t; skip = 1; next }
    $0 == e { skip = 0 }
    !skip { print }' "$readme" >"$tmp"
  mv "$tmp" "$readme"
  exit 0
fi
if [ "$want" != "$have" ]; then
  echo "README.md's configuration table differs from the broker's (run scripts/readme-config.sh $broker --write):" >&2
  diff <(echo "$have") <(echo "$want") >&2 || true
  exit 1
fi
