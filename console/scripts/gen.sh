#!/usr/bin/env bash
# Generates the TypeScript messages and service descriptors (Protobuf-ES) for
# queen/v1/*.proto into $1 (default src/gen). Uses Debian's protoc with the
# protoc-gen-es plugin from node_modules. The output is committed; `npm run check`
# regenerates it into a temp dir and fails when it differs.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/src/gen}
proto=$here/../proto
plugin=$here/node_modules/.bin/protoc-gen-es
command -v protoc >/dev/null || { echo "gen: protoc not found (Debian package protobuf-compiler; scripts/deps.sh installs it)" >&2; exit 1; }
[ -x "$plugin" ] || { echo "gen: $plugin missing: run 'npm ci' in console/ first" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
cd "$proto"
protoc -I . --plugin=protoc-gen-es="$plugin" --es_out="$out" --es_opt=target=ts \
  queen/v1/common.proto queen/v1/queue.proto queen/v1/admin.proto
