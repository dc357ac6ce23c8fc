#!/usr/bin/env bash
# Installs the orchestrator venv (.venv, Python 3.12) with the project and its dev tools
# (`bash scripts/setup.sh`), or with what running the pipeline needs and nothing more
# (`bash scripts/setup.sh --run`, what scripts/rehearse.sh calls: a fresh clone's first
# rehearsal does not wait for the test, cloud and docs tools, 110 packages instead of 228,
# about 10 s less with uv's cache empty), or with that and the cloud libraries a GKE profile
# needs to be validated, planned and run (`bash scripts/setup.sh --gke`: the `gcp` extra, the
# Kubernetes and Google Cloud clients). A venv set up with the dev tools serves all three; one
# set up for GKE also serves a rehearsal.
# The MaxText rehearsal environment is not installed here: the pipeline's image stage builds
# it (images/rehearsal/requirements.lock), exactly as it would build the image on GKE.
#
# Installer: uv (from PyPI, into .venv) when it can be had, several times faster than pip;
# pip otherwise, or with TPURL_INSTALLER=pip. uv is given pip's configured package sources
# (scripts/uv_env.py); the same variables are printed to .venv/uv.env for later installs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYENV_VERSION="${PYENV_VERSION:-3.12}"
case "${1:-}" in
  "") WANT=dev ;;
  --run) WANT=run ;;
  --gke) WANT=gke ;;
  *) echo "usage: bash scripts/setup.sh [--run | --gke]  (--run: without the dev tools;" \
       "--gke: with the cloud libraries, without the dev tools)" >&2; exit 2 ;;
esac

# Nothing to do when nothing that decides the venv changed since the last complete setup:
# the project's metadata, this script and its helper, the interpreter the venv runs on, the
# installer choice and pip's configured sources. Read from files only (no installer, no
# Python started), so an unchanged rerun answers in milliseconds.
setup_inputs() {
  cat pyproject.toml scripts/setup.sh scripts/uv_env.py
  readlink -f .venv/bin/python 2>/dev/null || true
  echo "installer=${TPURL_INSTALLER:-uv}"
  cat /etc/pip.conf /etc/xdg/pip/pip.conf "$HOME/.config/pip/pip.conf" "$HOME/.pip/pip.conf" \
    2>/dev/null || true
}
inputs_hash() { setup_inputs | sha256sum | cut -d' ' -f1; }
STAMP=.venv/.tpurl-setup-stamp
stamp="$(inputs_hash)"
if [ -x "$(readlink -f .venv/bin/python 2>/dev/null || echo /nonexistent)" ] && [ -f "$STAMP" ]; then
  read -r had_hash had_set < "$STAMP" || true
  if [ "$had_hash" = "$stamp" ] && { [ "${had_set:-dev}" = dev ] || [ "$had_set" = "$WANT" ] \
       || { [ "$had_set" = gke ] && [ "$WANT" = run ]; }; }; then
    echo "orchestrator ready (nothing changed since the last setup)"
    exit 0
  fi
fi
rm -f "$STAMP"
UV_VERSION="0.13.9"
PY="$(command -v python3.12 || true)"
if [ -z "$PY" ]; then
  echo "error: Python 3.12 not found. Install it (pyenv install 3.12, or your package manager)" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi

pip_install() {  # pip's "Location … is ignored" warnings for this machine's file:// indexes are noise
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
    | { grep -v "^WARNING: Location" || true; }
}

case "$WANT" in dev) PROJECT=".[dev]" ;; gke) PROJECT=".[gcp]" ;; *) PROJECT="." ;; esac
uv_install() {
  [ "${TPURL_INSTALLER:-uv}" = uv ] || return 1
  [ -x .venv/bin/uv ] && .venv/bin/uv --version 2>/dev/null | grep -q "^uv $UV_VERSION" \
    || pip_install "uv==$UV_VERSION" >/dev/null 2>&1 || return 1
  .venv/bin/python scripts/uv_env.py > .venv/uv.env || return 1
  # shellcheck disable=SC1091
  (. .venv/uv.env && .venv/bin/uv pip install --quiet --python .venv/bin/python -e "$PROJECT")
}

if ! uv_install; then
  [ "${TPURL_INSTALLER:-uv}" = pip ] || echo "uv unavailable: installing with pip" >&2
  pip_install -e "$PROJECT"
fi
# Bytecode for what every `tpurl` and its Prefect API server import: uv installs no .pyc, and
# with PYTHONDONTWRITEBYTECODE set (as on the machines this was measured on) each process
# compiled Prefect and the flow from source again (import 6.4 s instead of 3.9 s). Importing
# them once with writing allowed leaves __pycache__ in the venv, which later processes read
# whatever that variable says; seconds, instead of compiling the whole venv.
env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -c \
  "import flows.cli, flows.pipeline, flows.console.api_server, prefect.server.api.server" >/dev/null 2>&1 || true
.venv/bin/python -c "import flows, prefect; print('orchestrator ready: prefect', prefect.__version__)"
# the next unchanged run skips all of this: the inputs read again now that the venv exists
# (read before it, its interpreter was missing, and the first rerun reinstalled: 6 s)
echo "$(inputs_hash) $WANT" > "$STAMP"
