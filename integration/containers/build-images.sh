#!/usr/bin/env bash
# Build the container suites' images locally, with no registry (none is reachable here):
#
#   croupier-zookeeper:local   Debian bookworm (debootstrap) + openjdk-17 + Debian's zookeeper
#   croupier:local             the same base + python3 + this working tree installed in /opt/croupier
#
# Each image is skipped when the engine already has it (FORCE=1 rebuilds); the Croupier
# image is also rebuilt when the working tree changed since it was built (its label
# croupier.source holds a digest of the tree). Users with a registry can use their own
# images instead: CROUPIER_ZK_IMAGE and CROUPIER_IMAGE.
# Needs root, debootstrap and a running engine (DOCKER_HOST, see docker-engine.sh).
#
#   build-images.sh --base-only   only the debootstrap root both images start from (no engine
#                                 needed): ./test runs it in the background beside the venv
set -euo pipefail
BASE_ONLY=0
[ "${1:-}" = "--base-only" ] && BASE_ONLY=1
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
WORK=${CROUPIER_IMAGE_WORK:-/var/tmp/croupier-images}
ZK_IMAGE=${CROUPIER_ZK_IMAGE:-croupier-zookeeper:local}
APP_IMAGE=${CROUPIER_IMAGE:-croupier:local}

[ "$BASE_ONLY" = 1 ] || docker info >/dev/null 2>&1 || {
  echo "no Docker engine at ${DOCKER_HOST:-the default socket}: start one with" \
    "eval \"\$($HERE/docker-engine.sh start)\"" >&2
  exit 1
}
have() { docker image inspect "$1" >/dev/null 2>&1; }
PYTHON=${PYTHON:-python3}

# a digest of what the image installs (the package folders and pyproject.toml; tracked and
# untracked files, not ignored ones), so that an image of older sources is never reused
source_digest() {
  (cd "$ROOT" && git ls-files -co --exclude-standard -z -- pyproject.toml README.md \
    core actors ha transports storage services sdk tools dataplane ops | LC_ALL=C sort -z \
    | xargs -0 sha256sum 2>/dev/null | sha256sum | cut -c1-16)
}
SOURCE=$(source_digest)
built_from() { docker image inspect -f '{{ index .Config.Labels "croupier.source" }}' "$1" 2>/dev/null || true; }

if ! command -v debootstrap >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq debootstrap >&2
fi
mkdir -p "$WORK"
BASE="$WORK/base"

build_base() {
  if [ ! -f "$BASE/.complete" ]; then
    rm -rf "$BASE"
    debootstrap --variant=minbase \
      --include=openjdk-17-jre-headless,zookeeper,python3,python3-venv,ca-certificates \
      bookworm "$BASE" >"$WORK/debootstrap.log" 2>&1 || { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
    touch "$BASE/.complete"
  fi
}

if [ "$BASE_ONLY" = 1 ]; then
  build_base
  exit 0
fi

if [ "${FORCE:-0}" = 1 ] || ! have "$ZK_IMAGE"; then
  build_base
  tar -C "$BASE" --exclude=./.complete -c . | docker import - "$ZK_IMAGE" >/dev/null
  echo "built $ZK_IMAGE" >&2
fi

if [ "${FORCE:-0}" = 1 ] || ! have "$APP_IMAGE" \
  || { [ -z "${CROUPIER_IMAGE:-}" ] && [ "$(built_from "$APP_IMAGE")" != "$SOURCE" ]; }; then
  build_base
  OLD=$(docker image inspect -f '{{ .Id }}' "$APP_IMAGE" 2>/dev/null || true)
  APP="$WORK/app"
  rm -rf "$APP"
  cp -a "$BASE" "$APP"
  # the project from the working tree (not its venv or build products)
  mkdir -p "$APP/src/croupier"
  (cd "$ROOT" && git ls-files -co --exclude-standard -z | tar --null -T - -c) \
    | tar -C "$APP/src/croupier" -x
  # wheels are built on the host (its pip reaches the package index); the chroot installs offline
  rm -rf "$WORK/wheels"
  "$PYTHON" -m pip wheel -q -w "$WORK/wheels" "$APP/src/croupier" >"$WORK/pip-wheel.log" 2>&1 \
    || { tail -20 "$WORK/pip-wheel.log" >&2; exit 1; }
  cp -a "$WORK/wheels" "$APP/wheels"
  chroot "$APP" /usr/bin/python3 -m venv /opt/croupier
  chroot "$APP" /opt/croupier/bin/pip install -q --no-index --find-links /wheels croupier \
    >"$WORK/pip.log" 2>&1 || { tail -20 "$WORK/pip.log" >&2; exit 1; }
  rm -rf "$APP/wheels"
  ln -sf /opt/croupier/bin/croupier "$APP/usr/local/bin/croupier"
  tar -C "$APP" --exclude=./.complete -c . \
    | docker import --change "LABEL croupier.source=$SOURCE" - "$APP_IMAGE" >/dev/null
  rm -rf "$APP"
  # the image it replaces, now untagged
  if [ -n "$OLD" ]; then docker rmi "$OLD" >/dev/null 2>&1 || true; fi
  echo "built $APP_IMAGE" >&2
fi
