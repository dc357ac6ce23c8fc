"""A served deployment of the real flow with instant stand-in stages, train blocking, so a
test can cancel it as a user does in the UI: through Prefect's own runner, which sends the
flow's process a cancel intent and then SIGTERM (prefect 3.9.1
prefect/runner/_cancellation_manager.py ``cancel``).

    python -m tests.support.cancel_probe ROOT DATASET   # prints `SERVING <deployment id>`

DATASET is the run's ``dataset_uri`` parameter, as a dataset announcement sets it.

The runner starts each flow run in a process of its own from this file's entrypoint, so the
stand-ins are put in place when the file is imported (there too).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from flows import pipeline
from tests.support.stop_probe import CHECKPOINT, Instant

pipeline.STAGE_BY_NAME = {  # type: ignore[assignment]
    "image": Instant("image", "skipped", {}), "infra": Instant("infra", "skipped", {}),
    "convert": Instant("convert", "ran", {"maxtext_checkpoint": CHECKPOINT}),
    "train": Instant("train", "ran", {}), "export": Instant("export", "ran", {})}
rl_post_training = pipeline.rl_post_training
DEPLOYMENT = "cancel-probe"


async def serve(root: str, dataset: str) -> None:
    from prefect.deployments.runner import RunnerDeployment
    from prefect.runner import Runner

    deployment = RunnerDeployment.from_entrypoint(
        f"{Path(__file__).relative_to(Path.cwd())}:rl_post_training", name=DEPLOYMENT,
        parameters={"profile": "rehearsal", "dataset_uri": dataset,
                    "overrides": {"local.root": root, "eval": "", "promotion": "", "watch": ""}})
    runner = Runner(name="cancel-probe", query_seconds=1)
    deployment_id = await runner.aadd_deployment(deployment)
    print("SERVING", deployment_id, flush=True)
    await runner.start()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2]))
