#!/usr/bin/env bash
# The compose dev stack, run for real with Podman (CI runs this from .ci/run):
# installs podman, podman-compose and runc, makes the debian:12 base image with
# debootstrap (no image registry is reachable), builds the broker image, the
# example image and the CI stand-in for postgres:15, brings docker-compose.yml
# up with deploy/compose.ci.yml, and then, from this machine, through the
# published TLS port and verifying the broker against the generated CA:
#   1. waits for the broker's health service to report SERVING (bounded);
#   2. checks that the one-shot producer container pushed its 100 messages;
#   3. pushes and consumes with the Python example and checks the group's lag,
#      then /healthz, /readyz, /metrics and the console through the published
#      HTTP side port 6680 (scripts/stack-verify.py);
#   4. checks the broker did not restart while it served.
# The stack is taken down (`down -v`) and the scratch files removed however the
# run ends. As root. Prints how long each step took.
#
# Environment:
#   QN_STACK_REUSE_BASE=1   reuse an existing localhost/debian:12 instead of
#                           running debootstrap (local iteration; CI makes it anew)
#   QN_STACK_KEEP_IMAGES=1  keep the images it made afterwards (they are removed
#                           by default, so nothing is cached between runs)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$(date +%s)
project=queen-ci
step() { echo "== stack: $* (at $(($(date +%s) - start)) s)"; }

if [ "$(id -u)" -ne 0 ]; then
  echo "stack-test.sh: run as root (it installs packages and runs rootful Podman)" >&2
  exit 2
fi

# ---- packages: Podman with runc, netavark + aardvark-dns for service-name DNS
# on the compose network, iptables for published ports, debootstrap.
pkgs=(podman podman-compose runc netavark aardvark-dns iptables debootstrap)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  step "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

work=$(mktemp -d /var/tmp/queen-stack.XXXXXX)
export QUEEN_CERTS_DIR=$work/certs
compose=(podman-compose -p "$project" -f docker-compose.yml -f deploy/compose.ci.yml)

# ---- engine settings (containers.md): no default rlimits (the VM refuses
# them), runc (crun fails on its hybrid cgroups), netavark networking. Through
# CONTAINERS_CONF, so the host's own files stay as they are.
cat >"$work/containers.conf" <<'EOF'
[containers]
default_ulimits = []

[engine]
runtime = "runc"

[network]
network_backend = "netavark"
EOF
export CONTAINERS_CONF=$work/containers.conf

images=(queen-broker:dev queen-examples:dev queen-ci-postgres:15)
cleanup() {
  status=$?
  set +e
  if [ $status -ne 0 ]; then
    echo "== stack: FAILED; containers and the last broker and producer logs:"
    podman ps -a --filter "label=io.podman.compose.project=$project"
    podman logs --tail 40 "${project}_queen_1"
    podman logs --tail 20 "${project}_producer_1"
  fi
  "${compose[@]}" down -v >"$work/down.log" 2>&1 || cat "$work/down.log"
  podman network rm -f "${project}_default" >/dev/null 2>&1  # podman-compose 1.0 leaves it
  if [ "${QN_STACK_KEEP_IMAGES:-}" != 1 ]; then
    podman rmi -f "${images[@]}" >/dev/null 2>&1
  fi
  rm -rf "$work"
  echo "== stack: $([ $status -eq 0 ] && echo passed || echo failed) in $(($(date +%s) - start)) s"
  exit $status
}
trap cleanup EXIT

for port in 6643 6680; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "stack-test.sh: port $port is in use on this machine; the stack publishes it" >&2
    exit 1
  fi
done
# A failed earlier run may have left containers behind (containers.md).
"${compose[@]}" down -v >/dev/null 2>&1 || true
podman network rm -f "${project}_default" >/dev/null 2>&1 || true

# ---- base image
if [ "${QN_STACK_REUSE_BASE:-}" = 1 ] && podman image exists docker.io/library/debian:12; then
  step "reusing the existing debian:12 image"
else
  mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  step "debootstrap bookworm from $mirror"
  rootfs=$work/rootfs
  debootstrap --foreign --variant=minbase bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log"; exit 1; }
  # As in the official image: dpkg without an fsync per file (a container
  # build is thrown away when it fails), no translated package descriptions.
  mkdir -p "$rootfs/etc/dpkg/dpkg.cfg.d" "$rootfs/etc/apt/apt.conf.d"
  echo force-unsafe-io >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-apt-speedup"
  echo 'Acquire::Languages "none";' >"$rootfs/etc/apt/apt.conf.d/docker-no-languages"
  chroot "$rootfs" /debootstrap/debootstrap --second-stage >>"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log"; exit 1; }
  for m in dev/pts dev/shm dev sys proc; do # whatever the second stage left mounted
    if mountpoint -q "$rootfs/$m"; then umount -l "$rootfs/$m"; fi
  done
  # The host's sources (with updates and security), as the official image has.
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    cp /etc/apt/sources.list.d/debian.sources "$rootfs/etc/apt/sources.list.d/"
    rm -f "$rootfs/etc/apt/sources.list"
  fi
  tar -C "$rootfs" -c . | podman import - localhost/debian:12 >"$work/import.log" 2>&1 ||
    { cat "$work/import.log"; exit 1; }
  podman tag localhost/debian:12 docker.io/library/debian:12
  images+=(localhost/debian:12 docker.io/library/debian:12)
  rm -rf "$rootfs"
fi

# ---- images (the names the compose files use; `up` builds only missing ones).
# The three builds run at once: the broker's is mostly compiling, the others
# mostly downloading and unpacking packages.
build() { # TAG CONTEXT [podman build options]
  local tag=$1 ctx=$2
  shift 2
  podman build --network=host --layers=false -t "$tag" "$@" "$ctx" >"$work/build-${tag%%:*}.log" 2>&1
}
step "building queen-broker:dev, queen-ci-postgres:15, queen-examples:dev"
build queen-broker:dev . &
b1=$!
build queen-ci-postgres:15 deploy/postgres-ci &
b2=$!
build queen-examples:dev . -f deploy/examples.Dockerfile &
b3=$!
failed=0
for b in "$b1:queen-broker" "$b2:queen-ci-postgres" "$b3:queen-examples"; do
  if ! wait "${b%%:*}"; then
    echo "== stack: building ${b#*:} failed:"
    tail -40 "$work/build-${b#*:}.log"
    failed=1
  fi
done
[ $failed -eq 0 ] || exit 1
podman images --format '   {{.Repository}}:{{.Tag}} {{.Size}}' | grep -E 'queen-|debian' || true

# ---- up
step "up"
"${compose[@]}" up -d >"$work/up.log" 2>&1 || { cat "$work/up.log"; exit 1; }

ca=$QUEEN_CERTS_DIR/ca.pem
addr=localhost:6643
step "waiting for SERVING on $addr (TLS, verified against the generated CA)"
# The certs one-shot writes ca.pem; the broker may restart until its database is up.
for _ in $(seq 1 120); do
  [ -s "$ca" ] && break
  sleep 0.5
done
[ -s "$ca" ] || { echo "no $ca after 60 s" >&2; exit 1; }
examples/python/producer.py --addr "$addr" --ca "$ca" --count 0 --wait-ready 180

step "the one-shot producer container"
rc=$(timeout 180 podman wait "${project}_producer_1") || { echo "the producer container did not finish" >&2; exit 1; }
podman logs "${project}_producer_1" 2>&1 | tail -3
[ "$rc" = 0 ] || { echo "the producer container exited with $rc" >&2; exit 1; }

queen=${project}_queen_1
restarts=$(podman inspect -f '{{.RestartCount}}' "$queen")
echo "   the broker restarted $restarts time(s) before it served (start ordering)"

step "push and pop through the published port; the HTTP side port"
scripts/stack-verify.py --addr "$addr" --ca "$ca" --demo-count 100 --http localhost:6680

state=$(podman inspect -f '{{.State.Status}} {{.RestartCount}}' "$queen")
if [ "$state" != "running $restarts" ]; then
  echo "the broker did not stay up while serving: state/restarts '$state', was 'running $restarts'" >&2
  exit 1
fi
step "down"
