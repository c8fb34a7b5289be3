#!/bin/sh
# make podman-check: podman and what it needs here (Debian's podman 4.3 with runc, rootless
# helpers, and debootstrap for the local base image), installed with apt when missing and we are
# root; else a warning, and the container tests skip saying why.
need=
for tool in podman runc debootstrap newuidmap slirp4netns fuse-overlayfs; do
  command -v "$tool" >/dev/null 2>&1 || need=1
done
[ -z "$need" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "podman or its helpers not found: installing podman runc uidmap slirp4netns fuse-overlayfs debootstrap for the container image and its tests"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      podman runc uidmap slirp4netns fuse-overlayfs debootstrap >/dev/null) \
    || echo "WARNING: could not install podman; make image fails and tests/container skips"
else
  echo "WARNING: podman, runc or debootstrap not found; make image fails and tests/container skips"
fi
