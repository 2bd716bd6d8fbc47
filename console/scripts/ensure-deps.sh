#!/usr/bin/env bash
# Installs console/node_modules from package-lock.json with `npm ci` when it is
# missing or was installed from another lockfile; otherwise does nothing. Node.js
# 20.19 or newer and npm must be on PATH (nothing is installed globally).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
command -v node >/dev/null && command -v npm >/dev/null ||
  { echo "console: node and npm are needed (Node.js 20.19 or newer)" >&2; exit 1; }
node -e '
const [a, b] = process.versions.node.split(".").map(Number);
if (a < 20 || (a === 20 && b < 19)) { console.error(`console: Node.js ${process.versions.node} is too old; Vite 7 needs 20.19 or newer`); process.exit(1); }'
stamp=node_modules/.queen-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
echo "$want" > "$stamp"
