#!/usr/bin/env bash
# A Python base image made from Debian packages alone, for machines that reach Debian's
# archive but no image registry (this one, CI): debootstrap a minimal Debian trixie
# (python3.13 + python3-venv + ca-certificates) into a directory, then `docker import` it.
# The flow image builds FROM it in the tests (images/flow/Dockerfile, PYTHON_IMAGE build
# arg); production builds FROM the official python:3.12-slim-bookworm.
#
#   bash scripts/debian-base-image.sh [REPOSITORY]   # prints the image reference
#
# REPOSITORY defaults to tpurl-debian-base. When it names a registry (HOST:PORT/...), the
# image is pushed there too, so `docker build --pull` (prefect-docker's default) finds it.
# The tag is a hash of this recipe (this script's text and the extra CAs): a repeat run with the image present
# returns at once. The packages' versions are whatever the archive serves on the first run;
# `TPURL_BASE_REBUILD=1` builds again. Needs DOCKER_HOST (scripts/docker-services.sh env)
# and root (debootstrap; apt-get installs it when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

REPOSITORY="${1:-tpurl-debian-base}"
SUITE=trixie
MIRROR="${TPURL_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES=python3,python3-venv,ca-certificates
# The machine's own extra CAs (Debian's place for a local admin's): a TLS-inspecting proxy
# between this machine and PyPI is trusted inside the image as outside it.
EXTRA_CAS=(/usr/local/share/ca-certificates/*.crt)
[ -e "${EXTRA_CAS[0]}" ] || EXTRA_CAS=()
RECIPE_HASH="$(cat "$0" "${EXTRA_CAS[@]}" | sha256sum | cut -c1-12)"
REF="$REPOSITORY:$SUITE-$RECIPE_HASH"

log() { echo "debian-base-image: $*" >&2; }

if [ "${TPURL_BASE_REBUILD:-0}" != 1 ] && docker image inspect "$REF" >/dev/null 2>&1; then
  log "$REF is present"
else
  if ! command -v debootstrap >/dev/null; then
    log "installing debootstrap with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap >/dev/null 2>&1 \
      || { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive \
           apt-get install -y --no-install-recommends debootstrap >/dev/null; }
  fi
  ROOTFS="$(mktemp -d "${TMPDIR:-/tmp}/tpurl-debian-base.XXXXXX")"
  trap 'rm -rf "$ROOTFS"' EXIT
  log "debootstrap $SUITE ($PACKAGES) into $ROOTFS"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR" \
    >"$ROOTFS.log" 2>&1 || { tail -n 20 "$ROOTFS.log" >&2; exit 1; }
  rm -f "$ROOTFS.log"
  if [ ${#EXTRA_CAS[@]} -gt 0 ]; then
    cp "${EXTRA_CAS[@]}" "$ROOTFS/usr/local/share/ca-certificates/"
    chroot "$ROOTFS" update-ca-certificates >/dev/null
  fi
  # What an image needs no copy of: apt's lists and caches, docs, the debootstrap log.
  rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/* "$ROOTFS"/usr/share/doc/* \
    "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/locale/* "$ROOTFS"/debootstrap
  chmod 755 "$ROOTFS"  # mktemp made it 0700: the image's / would shut out the non-root user
  log "docker import as $REF"
  tar -C "$ROOTFS" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["python3"]' \
    --message "debootstrap --variant=minbase $SUITE $PACKAGES" - "$REF" >/dev/null
fi

case "$REPOSITORY" in
  */*) [[ "${REPOSITORY%%/*}" == *[.:]* ]] && docker push -q "$REF" >/dev/null ;;
esac
echo "$REF"
