#!/usr/bin/env bash
# One command from a fresh clone: install, then run the CPU rehearsal through the Prefect flow
# (tiny Qwen3-MoE: HF → MaxText → 2 GRPO steps → HF export that transformers loads).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --run  # what a run needs; scripts/test.sh adds the dev tools
export PREFECT_SERVER_ANALYTICS_ENABLED=false
if [ -f .venv/uv.env ]; then set -a; . .venv/uv.env; set +a; fi  # uv's sources, for the image stage
exec .venv/bin/tpurl run "${1:-rehearsal}" "${@:2}"
