#!/usr/bin/env bash
# Fails when the committed generated code (src/gen) or built console (dist/) is not
# what the sources produce now: regenerates and rebuilds in a temp copy of console/
# (at another path, which also proves the build embeds no absolute path) and
# compares byte for byte. Fix a failure with `npm run generate && npm run build` in
# console/ and commit src/gen and dist/.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ -d "$here/node_modules" ] || { echo "check-fresh: run 'npm ci' in console/ first (scripts/ensure-deps.sh)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/queen-console-fresh.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

mkdir -p "$tmp/console"
cp -r "$here/../proto" "$tmp/proto"
tar -C "$here" --exclude=./node_modules --exclude=./dist --exclude=./test-results -cf - . | tar -C "$tmp/console" -xf -
ln -s "$here/node_modules" "$tmp/console/node_modules"
cd "$tmp/console"

status=0
scripts/gen.sh "$tmp/gen" >/dev/null
if ! diff -r "$here/src/gen" "$tmp/gen" >"$tmp/gen.diff"; then
  echo "check-fresh: console/src/gen differs from what proto/ generates now:" >&2
  head -40 "$tmp/gen.diff" >&2
  echo "run 'npm run generate' in console/ and commit src/gen" >&2
  status=1
fi

node_modules/.bin/tsc -p .
node_modules/.bin/vite build --logLevel warn --outDir "$tmp/dist"
if ! diff -r "$here/dist" "$tmp/dist" >"$tmp/dist.diff"; then
  echo "check-fresh: console/dist differs from a fresh build of the sources:" >&2
  head -20 "$tmp/dist.diff" | cut -c1-300 >&2
  echo "run 'npm run build' in console/ and commit dist/" >&2
  status=1
fi
if grep -rl -e "$here" -e "$tmp" "$tmp/dist" >/dev/null 2>&1; then
  echo "check-fresh: the build embeds an absolute path:" >&2
  grep -rl -e "$here" -e "$tmp" "$tmp/dist" >&2
  status=1
fi
[ $status -eq 0 ] && echo "check-fresh: src/gen and dist/ match a fresh build ($(find "$tmp/dist" -type f | wc -l) files)"
exit $status
