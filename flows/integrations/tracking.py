"""The run's report to the profile's trackers once its result is kept.

Called by the flow after the result is persisted, so a tracker that is down costs nothing
but its copy: each tracker is tried with retries (reporting.report) and a failure is a
warning. Returns where the run was reported, for the result and the run page.
"""

from __future__ import annotations

from collections.abc import Callable

from flows.config.profile import Profile
from flows.integrations.mlflow_run import RunFacts, log_pipeline_run
from flows.integrations.reporting import DELAYS_S, report
from flows.run.result import PipelineResult


def report_run(profile: Profile, result: PipelineResult, facts: RunFacts,
               warn: Callable[[str], None] | None = None,
               delays_s: tuple[float, ...] = DELAYS_S) -> dict[str, str]:
    """{tracker: where the run is} for each tracker that took the report."""
    where: dict[str, str] = {}
    config = profile.tracking.mlflow
    if config is not None:
        project = profile.gke.project if profile.gke else None
        ids = report("MLflow tracking", lambda: log_pipeline_run(config, result, facts,
                                                                    project),
                        config.attempts, delays_s, warn)
        if ids is not None:
            where["mlflow"] = f"{config.tracking_uri}/#/experiments/{ids[0]}/runs/{ids[1]}"
    board = profile.tracking.tensorboard
    if board is not None and board.vertex_tensorboard is not None:
        from flows.integrations.vertex_tensorboard import upload_run

        run = report("Vertex AI TensorBoard",
                     lambda: upload_run(board, profile.name, facts.run_name, result), 4,
                     delays_s, warn)
        if run is not None:
            location = board.vertex_tensorboard.split("/")[3]
            where["vertex-tensorboard"] = (
                f"https://{location}.tensorboard.googleusercontent.com/experiment/"
                + run.rsplit("/runs/", 1)[0].replace("/", "+"))
    return where
