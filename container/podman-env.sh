#!/bin/sh
# Sourced by the container scripts: a containers.conf of the project's, used through
# CONTAINERS_CONF, so podman runs in sandboxes like the CI's (see docs/containers.md):
#  - runtime runc: crun fails where cgroups are in hybrid mode;
#  - default_ulimits at the machine's own hard limits: podman's defaults raise nofile past the
#    hard limit, which fails without CAP_SYS_RESOURCE ("setrlimit ... Operation not permitted").
# The file is written under build/container/ (git-ignored) because the limit is the machine's.
# callers set SBEMU_ROOT (the checkout) or run from container/
_sbemu_root=${SBEMU_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
SBEMU_CONTAINER_DIR=${SBEMU_CONTAINER_DIR:-$_sbemu_root/build/container}
mkdir -p "$SBEMU_CONTAINER_DIR"
_nofile=$(ulimit -Hn)
[ "$_nofile" = unlimited ] && _nofile=1048576
_conf="$SBEMU_CONTAINER_DIR/containers.conf"
_new="$_conf.$$"
cat >"$_new" <<CONF
# written by container/podman-env.sh; do not edit
[containers]
default_ulimits = ["nofile=$_nofile:$_nofile", "nproc=32768:32768"]

[engine]
runtime = "runc"
CONF
mv -f "$_new" "$_conf"
export CONTAINERS_CONF="$_conf"
