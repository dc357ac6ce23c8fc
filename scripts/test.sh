#!/usr/bin/env bash
# One command from a fresh clone: install, then run every test (the rehearsal end to end
# included; the first run builds the MaxText venv, a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Headless Chromium for the run-page screenshots of the deployment test (Debian's package).
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null; then
  apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
fi
export PREFECT_SERVER_ANALYTICS_ENABLED=false
.venv/bin/ruff check flows tests benchmarks images
exec .venv/bin/python -m pytest "$@"
