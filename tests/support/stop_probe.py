"""A program the cancellation test runs: the real flow with instant stand-in stages, the
train one blocking (prints `TRAINING <flow run id>` first), so the test can stop it as a worker's cancel
does, with SIGTERM, and read what the run left in its log.

    python -m tests.support.stop_probe ROOT
"""

from __future__ import annotations

import sys
import time

from flows.core.stage import StageOutput


class Instant:
    def __init__(self, name: str, status: str, uris: dict[str, str]) -> None:
        self.name, self.status, self.uris = name, status, uris

    def execute(self, ctx, upstream) -> StageOutput:
        if self.name == "train":
            from prefect.runtime import flow_run

            print("TRAINING", flow_run.id, flush=True)
            time.sleep(600)
        return StageOutput(stage=self.name, status=self.status, key=f"k-{self.name}",  # type: ignore[arg-type]
                           fingerprint=f"f-{self.name}", uris=self.uris)


CHECKPOINT = "gs://tpurl-bucket/rehearsal/maxtext/ckpt-0"


def main() -> None:
    from flows import pipeline

    pipeline.STAGE_BY_NAME = {  # type: ignore[assignment]
        "image": Instant("image", "skipped", {}), "infra": Instant("infra", "skipped", {}),
        "convert": Instant("convert", "ran", {"maxtext_checkpoint": CHECKPOINT}),
        "train": Instant("train", "ran", {}), "export": Instant("export", "ran", {})}
    pipeline.rl_post_training(profile="rehearsal", overrides={"local.root": sys.argv[1],
                                                           # the five stubbed stages only
                                                           "eval": "", "promotion": "", "watch": ""})


if __name__ == "__main__":
    main()
