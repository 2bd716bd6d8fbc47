#!/usr/bin/env bash
# Fuzzes the codec's frame and segment decoding for SECONDS (default 30).
# Configures a separate clang build (build-fuzz, -DQN_FUZZ=ON), builds the
# libFuzzer target and the seed writer, writes a fresh seed corpus, and runs
# the fuzzer. Exits non-zero on a crash, a sanitizer report or a property
# violation; the offending input is left in build-fuzz/fuzz-artifacts/.
#
# Environment: QN_FUZZ_BUILD_DIR (default <repo>/build-fuzz).
set -euo pipefail
secs=${1:-30}
case "$secs" in
  ''|*[!0-9]*) echo "usage: $0 SECONDS" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
build=${QN_FUZZ_BUILD_DIR:-$root/build-fuzz}

if ! command -v clang >/dev/null; then
  echo "fuzz.sh: clang is not installed (scripts/deps.sh installs it)" >&2
  exit 1
fi
CC=clang cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DQN_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target fuzz_codec fuzz_codec_seed >/dev/null

corpus="$build/fuzz-corpus"
artifacts="$build/fuzz-artifacts"
rm -rf "$corpus"
mkdir -p "$artifacts"
"$build/codec/fuzz/fuzz_codec_seed" "$corpus"

echo "== fuzz_codec for ${secs} s"
log="$build/fuzz.log"
set +e
"$build/codec/fuzz/fuzz_codec" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
  -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" >"$log" 2>&1
rc=$?
set -e
# progress lines (#N ...) are noise; a crash report and the final stats are not
grep -v '^#[0-9]' "$log" | tail -n 200 || true
if [ "$rc" -ne 0 ]; then
  echo "fuzz.sh: fuzz_codec failed (exit $rc); full log: $log" >&2
fi
exit "$rc"
