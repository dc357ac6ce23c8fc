"""The file formats a user or another tool reads: the flow's result, a lineage record, the
promotion pointer; each as the JSON schema of the pydantic model that writes it."""

from __future__ import annotations

import json

from pydantic import BaseModel

from flows.core.layout import RESULTS_DIR
from flows.core.lineage import LineageRecord
from flows.core.promotion import PromotedModel
from flows.core.promotion_store import HISTORY_FILE, POINTER_FILE
from flows.run.result import PipelineResult

_KEPT = (f"`{RESULTS_DIR}/<profile>/`, under the profile's output root (the bucket on GKE, "
         "`local.root` in a rehearsal)")
FORMATS: tuple[tuple[str, type[BaseModel], str], ...] = (
    ("The flow's result", PipelineResult,
     "What `rl_post_training` returns and persists: `tpurl run --json` prints it, and it is "
     f"kept as `<run>.json` and `latest.json` in {_KEPT}."),
    ("A lineage record", LineageRecord,
     "Written beside each stage's output; the next run skips the stage when it still matches "
     "(docs/decisions/0003-lineage-beside-outputs.md)."),
    ("The promoted model", PromotedModel,
     f"The promotion pointer's entry: `{POINTER_FILE}` in {_KEPT}, each earlier one in "
     f"`{HISTORY_FILE}` beside it; written under the profile's lock."),
)


def render() -> str:
    lines = ["# File formats", "", "Generated from the pydantic models by `python -m "
             "reference`; do not edit by hand.", ""]
    for title, model, what in FORMATS:
        schema = json.dumps(model.model_json_schema(), indent=2, sort_keys=True)
        lines += [f"## {title}: `{model.__module__}.{model.__name__}`", "", what, "",
                  "```json", schema, "```", ""]
    return "\n".join(lines)
