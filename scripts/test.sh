#!/usr/bin/env bash
# One command from a fresh clone: install, then run every test (the rehearsal end to end
# included; the first run builds the MaxText venv, a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PREFECT_SERVER_ANALYTICS_ENABLED=false
.venv/bin/ruff check flows tests benchmarks images
exec .venv/bin/python -m pytest "$@"
