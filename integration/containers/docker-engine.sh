#!/usr/bin/env bash
# A private Docker engine for the container suites (no registry, host networking only).
#
#   eval "$(integration/containers/docker-engine.sh start)"   # prints: export DOCKER_HOST=...
#   integration/containers/docker-engine.sh stop
#
# dockerd runs as root with its own data/exec roots and socket, --bridge=none and
# --iptables=false: every container uses host networking, so all traffic stays on
# 127.0.0.1. The data root persists (CROUPIER_DOCKER_DIR, default /var/tmp/croupier-docker)
# so that locally built images are reused by later runs on the same machine.
set -euo pipefail
DIR=${CROUPIER_DOCKER_DIR:-/var/tmp/croupier-docker}
SOCK="$DIR/docker.sock"
PIDFILE="$DIR/dockerd.pid"

install_engine() {
  if ! command -v dockerd >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq docker.io >&2
  fi
}

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

case "${1:-}" in
  start)
    install_engine
    mkdir -p "$DIR/data" "$DIR/exec"
    if ! running; then
      dockerd --bridge=none --iptables=false --ip6tables=false \
        --data-root "$DIR/data" --exec-root "$DIR/exec" \
        -H "unix://$SOCK" --pidfile "$PIDFILE" >"$DIR/dockerd.log" 2>&1 &
      for _ in $(seq 1 120); do
        docker -H "unix://$SOCK" info >/dev/null 2>&1 && break
        sleep 0.5
      done
      docker -H "unix://$SOCK" info >/dev/null 2>&1 || { echo "dockerd did not start; see $DIR/dockerd.log" >&2; exit 1; }
      # whoever started the engine stops it (an engine that was already running is left alone)
      echo "export CROUPIER_DOCKER_STARTED=1"
    fi
    echo "export DOCKER_HOST=unix://$SOCK"
    echo "export TESTCONTAINERS_RYUK_DISABLED=true"
    echo "export TESTCONTAINERS_CONNECTION_MODE=docker_host"
    ;;
  stop)
    if running; then
      pid=$(cat "$PIDFILE")
      kill "$pid"
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    fi
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
