# The broker image: built from Debian 12 packages in two stages, so the image
# that runs holds the two programs and their shared libraries, not the compilers.
#   docker build -t queen-broker .        podman build --network=host -t queen-broker .
# (The compose file builds it as queen-broker:dev.)

# ---- build: the same package list as CI (scripts/deps.sh), less the tools the
# tests, fuzzers and benchmarks need (PostgreSQL, Python, clang, h2load, Chromium,
# Node.js; the console's built files are committed, so no npm either).
FROM debian:12 AS build
WORKDIR /src
COPY scripts/deps.sh scripts/deps.sh
RUN QN_DEPS_SKIP="git clang libclang-rt-14-dev postgresql-15 postgresql-client-15 python3 \
      python3-grpcio python3-protobuf protobuf-compiler-grpc python3-h2 python3-zstandard \
      python3-xxhash python3-jwt python3-cryptography python3-prometheus-client nghttp2-client \
      chromium chromium-driver \
      nodejs npm" scripts/deps.sh
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DQN_WERROR=ON -DQN_CONSOLE_TESTS=OFF \
 && cmake --build /build -j"$(nproc)" --target queen-broker queenctl \
 && deploy/runtime-packages.sh /build/broker/queen-broker /build/tools/queenctl >/build/runtime-packages

# ---- run: the packages holding the libraries the programs load (found by
# deploy/runtime-packages.sh), openssl for the development certificates
# (queen-dev-certs, the compose stack's one-shot), CA certificates.
FROM debian:12
COPY --from=build /build/runtime-packages /tmp/runtime-packages
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      $(cat /tmp/runtime-packages) openssl ca-certificates >/dev/null \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages
COPY --from=build /build/broker/queen-broker /build/tools/queenctl /usr/local/bin/
COPY deploy/dev-certs.sh /usr/local/bin/queen-dev-certs
# 6632 gRPC h2c, 6643 gRPC TLS, 6680 the HTTP side port (metrics, console)
EXPOSE 6632 6643 6680
USER nobody
ENTRYPOINT ["/usr/local/bin/queen-broker"]
