#!/bin/sh
# The local base image for hosts that reach no container registry: Debian bookworm made with
# debootstrap (minbase) and imported into podman as local/debian:bookworm, once (about 80 s;
# podman keeps it). Needs root and debootstrap. Prints the image name.
set -eu
. "$(dirname "$0")/podman-env.sh"
BASE=${SBEMU_BASE_IMAGE:-local/debian:bookworm}
if podman image exists "$BASE"; then echo "$BASE"; exit 0; fi
command -v debootstrap >/dev/null || { echo "base-image.sh: debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
dir=$(mktemp -d /var/tmp/sbemu-base.XXXXXX)
trap 'rm -rf "$dir"' EXIT
echo "base-image.sh: debootstrap bookworm into $dir (once)" >&2
debootstrap --variant=minbase bookworm "$dir" "$MIRROR" >"$dir.log" 2>&1 || { tail -20 "$dir.log" >&2; rm -f "$dir.log"; exit 1; }
rm -f "$dir.log"
# slim, as Debian's own bookworm-slim image: no manuals, docs or translations, now or from the
# packages the stages install later (dpkg path-exclude); no apt lists or caches (stages update)
cat >"$dir/etc/dpkg/dpkg.cfg.d/01-sbemu-slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
CFG
find "$dir/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
rm -rf "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/usr/share/locale/* \
  "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/var/cache/apt/archives/*.deb
tar -C "$dir" -c . | podman import -q - "$BASE" >/dev/null
echo "$BASE"
