"""One real flow run of the rehearsal profile whose stages are instant stand-ins, except train,
which lasts TRAIN_S: ``python -m tests.support.standin_run ROOT TRAIN_S``.

For the run-event benchmark (benchmarks/run_events.py): the real flow, lock, stage table,
events and Prefect settings of this process (its heartbeats), against whatever API
PREFECT_API_URL names, with stage programs that cost nothing but the time they are told to
take (the rehearsal's MaxText venv is not needed). The stand-ins are those of
tests/runpage/test_live_page.py. Prints the flow run id on its last line.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from flows import pipeline
from flows.core.stage import StageOutput

CHECKPOINT = "gs://tpurl-bucket/rehearsal/maxtext/ckpt-0"


class TimedStage:
    """Stands in for a Stage: returns its output after ``seconds``."""

    def __init__(self, name: str, status: str, uris: dict[str, str], seconds: float = 0.0,
                 details: dict[str, Any] | None = None) -> None:
        self.name, self.status, self.uris, self.seconds = name, status, uris, seconds
        self.details = details or {}

    def execute(self, ctx: Any, upstream: Any) -> StageOutput:
        time.sleep(self.seconds)
        return StageOutput(stage=self.name, status=self.status, key=f"k-{self.name}",
                           fingerprint=f"f-{self.name}", uris=self.uris,
                           details=self.details, duration_s=self.seconds)


def main() -> None:
    root, train_s = sys.argv[1], float(sys.argv[2])
    pipeline.STAGE_BY_NAME = {  # type: ignore[misc]
        "image": TimedStage("image", "skipped", {"image": "rehearsal-venv:x"}),
        "infra": TimedStage("infra", "skipped", {"dataset": f"{root}/d.parquet"}),
        "convert": TimedStage("convert", "ran", {"maxtext_checkpoint": CHECKPOINT}, 1.0),
        "train": TimedStage("train", "ran", {"actor_checkpoint": CHECKPOINT + "-actor"},
                            train_s, {"metrics": {"steps": []}}),
        "export": TimedStage("export", "ran", {"hf_export": f"{root}/hf-export"}, 1.0)}
    state = pipeline.rl_post_training(profile="rehearsal", overrides={
        "local.root": root, "eval": "", "promotion": "", "watch": ""}, return_state=True)
    print(state.state_details.flow_run_id)


if __name__ == "__main__":
    main()
