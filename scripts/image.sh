#!/usr/bin/env bash
# Build the CPU image (deploy/Dockerfile.cpu) and smoke-test it: the container serves the demo and answers a
# completion. Needs a running Docker daemon; `just image` runs it.
#
# Usage: bash scripts/image.sh [TAG]          (default tag: turnout:cpu)
# Environment:
#   TURNOUT_BASE_IMAGE    the Debian bookworm base; default debian:bookworm-slim when the daemon has it or can pull
#                         it, else one made here with debootstrap and `docker import` (no registry needed)
#   TURNOUT_TORCH_INDEX   PyTorch's CPU wheel index (default https://download.pytorch.org/whl/cpu; set it empty
#                         when TURNOUT_IMAGE_WHEELS holds a CPU torch and the index is out of reach)
#   TURNOUT_IMAGE_CA_DIR  extra CA certificates for the build (default /usr/local/share/ca-certificates)
#   TURNOUT_IMAGE_WHEELS  a local wheel folder pip searches first (for example a CPU torch)
#   TURNOUT_IMAGE_PORT    the smoke test's port on the host (default 18000)
# Builds and the smoke test use host networking: no bridge, no iptables change.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG="${1:-turnout:cpu}"
PORT="${TURNOUT_IMAGE_PORT:-18000}"
CA_DIR="${TURNOUT_IMAGE_CA_DIR:-/usr/local/share/ca-certificates}"
WORK="$(mktemp -d)"
CONTAINER=""
cleanup() {
    [ -z "$CONTAINER" ] || docker rm -f "$CONTAINER" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

base_image() {
    if [ -n "${TURNOUT_BASE_IMAGE:-}" ]; then
        echo "$TURNOUT_BASE_IMAGE"
    elif docker image inspect debian:bookworm-slim >/dev/null 2>&1 || docker pull -q debian:bookworm-slim >/dev/null 2>&1; then
        echo debian:bookworm-slim
    elif docker image inspect turnout-base:bookworm >/dev/null 2>&1; then
        echo turnout-base:bookworm
    else
        command -v debootstrap >/dev/null || { echo "image.sh: no base image and no debootstrap" >&2; exit 1; }
        echo "image.sh: making a bookworm base with debootstrap (a few minutes)" >&2
        debootstrap --variant=minbase bookworm "$WORK/rootfs" http://deb.debian.org/debian >&2
        tar -C "$WORK/rootfs" -c . | docker import - turnout-base:bookworm >&2
        rm -rf "$WORK/rootfs"
        echo turnout-base:bookworm
    fi
}

# The build context: the checkout's tracked files, plus the build extras (deploy/build-extras/README.md).
git ls-files -z | tar --null -T - -c | tar -C "$WORK" -x --one-top-level=context
mkdir -p "$WORK/context/deploy/build-extras/ca" "$WORK/context/deploy/build-extras/wheels"
[ ! -d "$CA_DIR" ] || find "$CA_DIR" -name '*.crt' -exec cp {} "$WORK/context/deploy/build-extras/ca/" \;
[ -z "${TURNOUT_IMAGE_WHEELS:-}" ] || cp -r "$TURNOUT_IMAGE_WHEELS"/. "$WORK/context/deploy/build-extras/wheels/"

BASE="$(base_image)"
echo "image.sh: building $TAG on $BASE"
docker build --network host -f "$WORK/context/deploy/Dockerfile.cpu" -t "$TAG" \
    --build-arg "BASE_IMAGE=$BASE" \
    --build-arg "TORCH_INDEX=${TURNOUT_TORCH_INDEX-https://download.pytorch.org/whl/cpu}" \
    "$WORK/context"

echo "image.sh: smoke test on 127.0.0.1:$PORT"
CONTAINER="$(docker run -d --network host --shm-size 2g "$TAG" demo --host 127.0.0.1 --port "$PORT")"
for _ in $(seq 1 120); do
    curl -fsS "http://127.0.0.1:$PORT/ready" >/dev/null 2>&1 && break
    docker inspect -f '{{.State.Running}}' "$CONTAINER" | grep -q true || { docker logs "$CONTAINER"; exit 1; }
    sleep 5
done
answer="$(curl -fsS "http://127.0.0.1:$PORT/v1/chat/completions" -H 'content-type: application/json' \
    -d '{"model": "tools", "temperature": 0, "messages": [{"role": "user", "content": "Hi"}]}')" \
    || { docker logs "$CONTAINER"; exit 1; }
echo "$answer"
grep -q "Hello from tiny-tools" <<<"$answer" || { echo "image.sh: unexpected answer" >&2; exit 1; }
echo "image.sh: $TAG serves the demo"
