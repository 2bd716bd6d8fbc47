# The broker in a Debian 12 image: built with the same scripts as CI.
# (No Docker engine runs on the development machines; this file is kept simple
# and mirrors scripts/deps.sh + CMake so it stays correct by construction.)
FROM debian:12 AS build
WORKDIR /src
COPY scripts/deps.sh scripts/deps.sh
RUN scripts/deps.sh
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DQN_WERROR=ON \
 && cmake --build /build -j"$(nproc)" --target queen-broker queenctl

FROM debian:12
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends libprotobuf-c1 libnghttp2-14 libssl3 \
      libevent-2.1-7 libevent-openssl-2.1-7 libevent-pthreads-2.1-7 libpq5 libzstd1 \
      libxxhash0 libjansson4 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /build/broker/queen-broker /build/tools/queenctl /usr/local/bin/
EXPOSE 6632 6643
USER nobody
ENTRYPOINT ["/usr/local/bin/queen-broker"]
