#!/bin/sh
# make image: build the OCI image sbemu:<version> (container/Containerfile) with podman.
#   container/build.sh            build (the layers cached by podman make a rebuild quick)
#   SBEMU_BASE_IMAGE=IMAGE ...    build FROM that Debian bookworm image instead of the local
#                                 debootstrap one (e.g. docker.io/library/debian:bookworm-slim)
#   SBEMU_IMAGE=NAME ...          the tag (default sbemu:<version from pyproject.toml>); the
#                                 image is tagged sbemu:latest too
# Prints the image name on stdout, the build's own output goes to stderr. Concurrent callers
# (pytest workers, make) wait for one another on a lock, then share the build.
set -eu
SBEMU_ROOT=$(cd "$(dirname "$0")/.." && pwd)
export SBEMU_ROOT
. "$SBEMU_ROOT/container/podman-env.sh"
command -v podman >/dev/null || { echo "build.sh: podman is missing (apt-get install podman runc uidmap slirp4netns fuse-overlayfs)" >&2; exit 1; }
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$SBEMU_ROOT/pyproject.toml" | head -1)
IMAGE=${SBEMU_IMAGE:-sbemu:$version}
exec 9>"$SBEMU_CONTAINER_DIR/build.lock"
flock 9
if [ -n "${SBEMU_BASE_IMAGE:-}" ]; then base=$SBEMU_BASE_IMAGE
else base=$("$SBEMU_ROOT/container/base-image.sh"); fi
secret=
ca=${SBEMU_BUILD_CA:-/etc/ssl/certs/ca-certificates.crt}
[ -s "$ca" ] && secret="--secret id=ca,src=$ca"
# the context is the checkout: container/containerignore keeps all but the sources out
start=$(date +%s)
# shellcheck disable=SC2086
podman build --layers --pull=missing $secret \
  --build-arg BASE="$base" \
  --ignorefile "$SBEMU_ROOT/container/containerignore" \
  -f "$SBEMU_ROOT/container/Containerfile" -t "$IMAGE" -t sbemu:latest "$SBEMU_ROOT" >&2
echo "build.sh: $IMAGE built in $(( $(date +%s) - start )) s, $(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}')" >&2
echo "$IMAGE"
