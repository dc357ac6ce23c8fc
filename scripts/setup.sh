#!/usr/bin/env bash
# Installs the orchestrator venv (.venv, Python 3.12) with the project and its dev tools.
# The MaxText rehearsal environment is not installed here: the pipeline's image stage builds
# it (images/rehearsal/requirements.lock), exactly as it would build the image on GKE.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYENV_VERSION="${PYENV_VERSION:-3.12}"
PY="$(command -v python3.12 || true)"
if [ -z "$PY" ]; then
  echo "error: Python 3.12 not found. Install it (pyenv install 3.12, or your package manager)" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev]" 2>&1 \
  | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import flows, prefect; print('orchestrator ready: prefect', prefect.__version__)"
