#!/usr/bin/env bash
# Installs the Debian 12 packages Queen needs to build, test and run, if any are
# missing. As root it runs apt-get; otherwise it prints the exact command to run.
# Usage: scripts/deps.sh [--check]   (--check only reports, exit 1 when missing)
# QN_DEPS_SKIP: space-separated packages never to install (the Dockerfile's build
# stage skips the test, fuzz and benchmark tools).
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config git ca-certificates
  openssl                                  # the test CA and certificates made at test time
  libprotobuf-c-dev protobuf-c-compiler   # message code generation and runtime
  protobuf-compiler                        # descriptor sets for server reflection
  libnghttp2-dev                           # HTTP/2 framing (server and client library)
  libssl-dev                               # TLS; AES-256-GCM payload envelopes (codec, libcrypto)
  libcjose-dev                             # JWT: JWS verify/sign and JWK/JWKS import (broker/src/auth)
  libevent-dev                             # event loop, TLS buffers, timers
  libpq-dev                                # PostgreSQL client
  libzstd-dev zstd                         # segment compression
  libxxhash-dev xxhash                     # xxh3_128 transaction-id hashes
  check libsubunit-dev                     # unit and integration test framework
  libjansson-dev                           # JSON for queenctl and admin results
  postgresql-15 postgresql-client-15       # the database (tests start their own)
  python3 python3-grpcio python3-protobuf protobuf-compiler-grpc   # end-to-end tests
  python3-h2                               # raw HTTP/2 in the transport's end-to-end tests
  python3-zstandard python3-xxhash         # independent segment cross-check
  python3-jwt python3-cryptography         # independent JWT cross-check (token_crosscheck.py)
  python3-prometheus-client                # the text-format parser that checks /metrics (e2e_sideport_metrics)
  clang libclang-rt-14-dev                 # libFuzzer target and sanitizer runtime
  clang-format                             # clang-format-14: the style check of every C file (scripts/format.sh, ctest format)
  nghttp2-client                           # h2load for load lines in the README
  chromium chromium-driver                 # the web console's browser suite (playwright-core drives Debian's Chromium)
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

# Node.js and npm for examples/node: any build will do (Debian's nodejs + npm, or
# one whose nodejs package bundles npm), so each is only installed when absent.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ -n "${QN_DEPS_SKIP:-}" ]; then
  kept=()
  for p in "${missing[@]}"; do
    case " $QN_DEPS_SKIP " in *" $p "*) ;; *) kept+=("$p") ;; esac
  done
  missing=("${kept[@]}")
fi

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "${1:-}" = "--check" ]; then
  echo "missing packages: ${missing[*]}" >&2
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "missing packages; run:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
