#!/usr/bin/env bash
# A real Docker engine and registry on one machine without Docker Desktop or Docker Hub:
# Debian's dockerd (no bridge, no iptables: works inside an unprivileged-ish CI container)
# and Debian's docker-registry on 127.0.0.1. The image tests and CI use it.
# Storage: overlay2 where the kernel lets this process mount an overlay in the data root
# (one probe mount), else vfs. vfs copies every layer in full: one CI run's images took
# 9.3 GB with it, and a CI machine with less free disk failed its builds and its Prefect
# database writes at once.
#
#   bash scripts/docker-services.sh start   # install if missing, start both (idempotent)
#   bash scripts/docker-services.sh stop    # stop both (only the processes it started)
#   bash scripts/docker-services.sh status  # exit 0 when both answer
#   bash scripts/docker-services.sh env     # print `export DOCKER_HOST=...`
#
# Settings (environment): TPURL_DOCKER_DIR (default .tpurl/docker in the repository),
# TPURL_REGISTRY_ADDR (default 127.0.0.1:5000), TPURL_DOCKER_STORAGE_DRIVER (overlay2 or
# vfs; default: the probe's choice).
# busybox-static is installed too: local stand-in base images use it for a shell (no base
# image can be pulled here).
set -euo pipefail
cd "$(dirname "$0")/.."

DIR="${TPURL_DOCKER_DIR:-$PWD/.tpurl/docker}"
REGISTRY_ADDR="${TPURL_REGISTRY_ADDR:-127.0.0.1:5000}"
SOCK="$DIR/docker.sock"
DOCKERD_PID="$DIR/dockerd.pid"
REGISTRY_PID="$DIR/registry.pid"
PACKAGES=(docker.io docker-registry busybox-static)

log() { echo "docker-services: $*" >&2; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_missing() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v docker-registry >/dev/null || missing+=(docker-registry)
  [ -x /bin/busybox ] && /bin/busybox --list 2>/dev/null | grep -qx sh || missing+=(busybox-static)
  [ ${#missing[@]} -eq 0 ] && return 0
  if ! command -v apt-get >/dev/null; then
    log "error: ${missing[*]} missing and apt-get is not available; install ${PACKAGES[*]}"
    exit 3
  fi
  log "installing ${missing[*]} with apt-get"
  # No init system is expected: keep the packages' service scripts from starting anything.
  # A policy-rc.d the machine already has is left alone: removing it after would delete a
  # file this script did not create.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' RETURN
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
}

docker_ready() { [ -S "$SOCK" ] && curl -sf --unix-socket "$SOCK" http://localhost/_ping >/dev/null; }
registry_ready() { curl -sf "http://$REGISTRY_ADDR/v2/" >/dev/null; }

wait_for() {  # wait_for WHAT CHECK LOGFILE
  for _ in $(seq 1 100); do "$2" && return 0; sleep 0.2; done
  log "error: $1 did not come up in 20 s; last log lines:"; tail -n 20 "$3" >&2 || true
  exit 4
}

storage_driver() {  # overlay2 when an overlay mounts in the data root, else vfs
  if [ -n "${TPURL_DOCKER_STORAGE_DRIVER:-}" ]; then
    echo "$TPURL_DOCKER_STORAGE_DRIVER"
    return
  fi
  local probe="$DIR/overlay-probe"
  mkdir -p "$probe/lower" "$probe/upper" "$probe/work" "$probe/merged"
  if mount -t overlay overlay \
      -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" "$probe/merged" \
      2>/dev/null; then
    umount "$probe/merged"
    rm -rf "$probe"
    echo overlay2
  else
    rm -rf "$probe"
    echo vfs
  fi
}

start_dockerd() {
  if alive "$DOCKERD_PID" && docker_ready; then return 0; fi
  mkdir -p "$DIR/data" "$DIR/exec"
  rm -f "$SOCK" "$DOCKERD_PID"
  local driver; driver="$(storage_driver)"
  log "starting dockerd ($SOCK, storage driver $driver)"
  setsid dockerd --iptables=false --ip6tables=false --bridge=none --storage-driver="$driver" \
    --data-root="$DIR/data" --exec-root="$DIR/exec" --host="unix://$SOCK" \
    --pidfile="$DOCKERD_PID" >"$DIR/dockerd.log" 2>&1 </dev/null &
  wait_for dockerd docker_ready "$DIR/dockerd.log"
}

start_registry() {
  if alive "$REGISTRY_PID" && registry_ready; then return 0; fi
  if registry_ready; then
    log "error: something else already answers on $REGISTRY_ADDR; set TPURL_REGISTRY_ADDR"
    exit 5
  fi
  mkdir -p "$DIR/registry"
  cat >"$DIR/registry.yml" <<EOF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $DIR/registry}
  delete: {enabled: true}
http:
  addr: $REGISTRY_ADDR
EOF
  log "starting docker-registry on $REGISTRY_ADDR"
  setsid docker-registry serve "$DIR/registry.yml" >"$DIR/registry.log" 2>&1 </dev/null &
  echo $! >"$REGISTRY_PID"
  wait_for registry registry_ready "$DIR/registry.log"
}

stop_pid() {  # stop_pid NAME PIDFILE
  if alive "$2"; then
    local pid; pid="$(cat "$2")"
    log "stopping $1 (pid $pid)"
    kill -TERM "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  rm -f "$2"
}

unmount_leftovers() {  # what dockerd mounted under DIR and left (its exec root's netns, overlays)
  # A dockerd that is killed, or even one stopped cleanly, can leave exec/netns/default and
  # overlay mounts behind; a mount point cannot be removed, so the clone could not be
  # deleted after a run. Only mount points under DIR (ours) are touched, deepest first.
  local mounts
  mounts="$(awk -v dir="$DIR/" 'index($2, dir) == 1 {print $2}' /proc/self/mounts | sort -r)"
  [ -n "$mounts" ] || return 0
  while read -r point; do
    umount "$point" 2>/dev/null || umount -l "$point" 2>/dev/null \
      || log "warning: could not unmount $point"
  done <<<"$mounts"
}

case "${1:-start}" in
  start)
    install_missing
    start_dockerd
    start_registry
    echo "export DOCKER_HOST=unix://$SOCK"
    ;;
  stop)
    stop_pid registry "$REGISTRY_PID"
    stop_pid dockerd "$DOCKERD_PID"
    unmount_leftovers
    ;;
  status)
    docker_ready && registry_ready && echo "dockerd: unix://$SOCK; registry: $REGISTRY_ADDR"
    ;;
  env)
    echo "export DOCKER_HOST=unix://$SOCK"
    ;;
  *)
    echo "usage: $0 start|stop|status|env" >&2
    exit 2
    ;;
esac
