#!/usr/bin/env bash
# Runs the whole test suite: installs missing Debian packages (as root) and the
# Node.js example's npm packages, builds, and runs every ctest suite. The `pg`
# fixture starts a throwaway PostgreSQL for the integration and end-to-end suites
# and stops it afterwards.
#
# Environment: QN_BUILD_DIR (default build), QN_CMAKE_ARGS (extra cmake flags),
# QN_TEST_JOBS (parallel suites, default 2), QN_CTEST_ARGS (extra ctest flags).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
# examples_node needs the Node.js example's packages: install them from the
# committed lockfile when missing or older than it.
node_dir=$root/examples/node
if [ ! -f "$node_dir/node_modules/.package-lock.json" ] ||
   [ "$node_dir/package-lock.json" -nt "$node_dir/node_modules/.package-lock.json" ]; then
  if command -v npm >/dev/null 2>&1; then
    (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
  else
    echo "npm not found: examples_node will fail" >&2
  fi
fi
build=${QN_BUILD_DIR:-$root/build}
# shellcheck disable=SC2086
cmake -S "$root" -B "$build" ${QN_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)"
cd "$build"
# shellcheck disable=SC2086
ctest --output-on-failure -j"${QN_TEST_JOBS:-2}" ${QN_CTEST_ARGS:-}
