#!/bin/bash
# Prints the Debian packages that hold the shared libraries the given programs
# load, one per line: what the broker image's runtime stage installs, so it
# stays right when a module links a new library. Fails when a library belongs
# to no package (it would be missing at run time).
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: runtime-packages.sh PROGRAM..." >&2; exit 2; }
libs=$(ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u)
for lib in $libs; do
  real=$(readlink -f "$lib")
  # With merged /usr the package database may list either spelling of the path.
  pkg=""
  for path in "$lib" "$real" "/usr$lib" "${lib#/usr}" "/usr$real" "${real#/usr}"; do
    if out=$(dpkg-query -S "$path" 2>/dev/null); then
      pkg=${out%%: *}
      break
    fi
  done
  [ -n "$pkg" ] || { echo "runtime-packages: no package holds $lib" >&2; exit 1; }
  echo "${pkg%%:*}"
done | sort -u
