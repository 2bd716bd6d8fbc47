#!/usr/bin/env bash
# Keeps every C file of the tree in the root .clang-format style (clang-format 14,
# Debian package clang-format).
#   scripts/format.sh --check   exit 1 listing the files that differ (ctest `format`, CI)
#   scripts/format.sh --write   reformat them in place
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:---check}
cf=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$cf" ]; then
  echo "format: clang-format (14) is not installed (scripts/deps.sh installs it)" >&2
  exit 1
fi
cd "$root"
mapfile -t files < <(find codec storage broker client tools test bench examples \
  \( -name node_modules -o -name 'build*' \) -prune -o \( -name '*.c' -o -name '*.h' \) -print |
  sort)
if [ "$mode" = "--write" ]; then
  "$cf" -i --style=file "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! "$cf" --dry-run --Werror --style=file "$f" >/dev/null 2>&1; then
    bad+=("$f")
  fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "format: these files differ from .clang-format (run scripts/format.sh --write):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "format: ${#files[@]} files checked"
