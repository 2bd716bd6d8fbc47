#!/usr/bin/env bash
# Runs every libFuzzer target for SECONDS each (default 30).
# Configures a separate clang build (build-fuzz, -DQN_FUZZ=ON), builds the
# targets and their seed writers, writes a fresh seed corpus per target, and
# runs each fuzzer. Exits non-zero on a crash, a sanitizer report or a property
# violation in any target; the offending input is left in
# build-fuzz/fuzz-artifacts/<target>/.
#
# Environment: QN_FUZZ_BUILD_DIR (default <repo>/build-fuzz);
#              QN_FUZZ_ONLY (run only the target of that name).
set -euo pipefail
secs=${1:-30}
case "$secs" in
  ''|*[!0-9]*) echo "usage: $0 SECONDS" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
build=${QN_FUZZ_BUILD_DIR:-$root/build-fuzz}

# The targets: name | path of the binary in the build | seed writer target
# ("-" for none, "dir" to copy the files of a committed seed directory) | path
# of the seed writer (or of that directory, relative to the repository) |
# -max_len
TARGETS=(
  "fuzz_codec|codec/fuzz/fuzz_codec|fuzz_codec_seed|codec/fuzz/fuzz_codec_seed|65536"
  "fuzz_envelope|codec/fuzz/fuzz_envelope|fuzz_envelope_seed|codec/fuzz/fuzz_envelope_seed|16384"
  "fuzz_pb_scan|test/broker/fuzz_pb_scan|-|-|8192"
  "fuzz_grpc_wire|test/broker/fuzz_grpc_wire|fuzz_grpc_wire_seed|test/broker/fuzz_grpc_wire_seed|4096"
  "fuzz_http_wire|test/broker/fuzz_http_wire|dir|test/broker/transport/http_wire_seeds|20000"
  "fuzz_client|client/fuzz/fuzz_client|fuzz_client_seed|client/fuzz/fuzz_client_seed|65536"
  "fuzz_store|storage/fuzz/fuzz_store|fuzz_store_seed|storage/fuzz/fuzz_store_seed|16384"
)

if ! command -v clang >/dev/null; then
  echo "fuzz.sh: clang is not installed (scripts/deps.sh installs it)" >&2
  exit 1
fi
CC=clang cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DQN_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null

status=0
for t in "${TARGETS[@]}"; do
  IFS='|' read -r name bin seedtgt seedbin maxlen <<<"$t"
  if [ -n "${QN_FUZZ_ONLY:-}" ] && [ "$QN_FUZZ_ONLY" != "$name" ]; then
    continue
  fi
  tgts=("$name")
  case "$seedtgt" in -|dir) ;; *) tgts+=("$seedtgt") ;; esac
  cmake --build "$build" -j"$(nproc)" --target "${tgts[@]}" >/dev/null

  corpus="$build/fuzz-corpus/$name"
  artifacts="$build/fuzz-artifacts/$name"
  rm -rf "$corpus"
  mkdir -p "$corpus" "$artifacts"
  case "$seedtgt" in
    -) ;;
    dir) cp "$root/$seedbin"/* "$corpus"/ ;;
    *) "$build/$seedbin" "$corpus" ;;
  esac

  echo "== $name for ${secs} s"
  log="$build/$name.log"
  set +e
  "$build/$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -max_len="$maxlen" -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" >"$log" 2>&1
  rc=$?
  set -e
  # progress lines (#N ...) are noise; a crash report and the final stats are not
  grep -v '^#[0-9]' "$log" | tail -n 60 || true
  if [ "$rc" -ne 0 ]; then
    echo "fuzz.sh: $name failed (exit $rc); full log: $log" >&2
    status=1
  fi
done
exit "$status"
