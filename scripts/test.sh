#!/usr/bin/env bash
# One command from a fresh clone: install, then run every test (the rehearsal end to end
# included; the first run builds the MaxText venv, a few minutes).
#
# Without arguments the tests run in tiers, quickest first, each its own pytest run so a
# failure stops before the long ones (tests/support/tiers.py marks them): ruff, the fast
# tests (no services), the service-backed ones (fake-gcs-server, a Prefect API, dockerd),
# then the end-to-end modules of tests/e2e once each, the rehearsal last; then the coverage
# of all three.
# With arguments, they are passed to one pytest run as they are.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Headless Chromium for the run-page screenshots of the deployment test (Debian's package).
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null; then
  apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
fi
export PREFECT_SERVER_ANALYTICS_ENABLED=false
if [ -f .venv/uv.env ]; then set -a; . .venv/uv.env; set +a; fi  # uv's sources, for the image stage
.venv/bin/ruff check flows tests benchmarks images
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
# Each tier is measured (pyproject's [tool.coverage.run]: sys.monitoring, a few per cent
# slower); the tiers' data are combined, then the lines per package and the functions no
# test executed are printed (scripts/coverage_report.py).
cov=(.venv/bin/python -m coverage run --parallel-mode -m pytest)
.venv/bin/python -m coverage erase
"${cov[@]}" -m "not services and not e2e"
"${cov[@]}" -m "services and not e2e"
"${cov[@]}" tests/e2e
.venv/bin/python -m coverage combine -q
.venv/bin/python scripts/coverage_report.py
