"""`tpurl run` of a profile whose every stage is already done: the answer, without a Prefect
API server.

Why: without a server kept between commands (one only when the user asks:
flows/console/kept_api.py) each `tpurl run` would start one (about 10 s of CPU) just to
learn that nothing runs. Every stage answers ``done`` from files (its lineage record, its
outputs' manifest, flows/core/stage.py), and the profile's last result
(``tpurl-results/<profile>/latest.json``) names the outputs it reported. When each stage's
verified output is there and unchanged, and the last result is of exactly those outputs, the
flow would skip every stage and report that result again: the CLI reports it and starts
nothing.

Kept narrow on purpose, so the answer is the flow's:
- read-only: a stage whose record is damaged or lacks a manifest is not done here (the flow
  rewrites those, under the profile's lock), nor is one whose inputs fail their check;
- the local backend only: a GKE stage's ``done`` asks the cluster, under the flow's retries
  and deadlines;
- no tracker and no notification configured: the flow reports every run to those, a
  rerun too, and only the flow does;
- the image stage is asked under its install lock, as the flow asks it (another run may be
  installing into the venv);
- any error is "not known to be done": the flow then runs and says what it finds.
"""

from __future__ import annotations

import contextlib
import time

from flows.backends import backend_for
from flows.config import Profile
from flows.core.backend import ExclusiveProvider
from flows.core.layout import Layout
from flows.core.stage import ProvidedStage, Stage, StageContext, StageOutput
from flows.run.result import PipelineResult, StageReport, result_uris
from flows.stages import stages_for

# each stage's upstream, as flows/pipeline.py's stage tasks pass it (a test holds them equal)
UPSTREAM: dict[str, tuple[str, ...]] = {
    "image": (), "infra": ("image",), "convert": ("image", "infra"),
    "train": ("image", "infra", "convert"), "export": ("image", "infra", "train"),
    "evaluate": ("image", "infra", "convert", "train", "export")}


class _Silent:
    """A stage logger that keeps the reasons (the flow logs them if it runs)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, msg: str, *args: object) -> None:
        self.lines.append(msg % args if args else msg)

    warning = info


def _done(stage: Stage, ctx: StageContext, upstream: dict[str, StageOutput]) -> StageOutput | None:
    provider = stage.provider(ctx.backend) if isinstance(stage, ProvidedStage) else None
    guard = (provider.exclusive(ctx) if isinstance(provider, ExclusiveProvider)
             else contextlib.nullcontext())
    with guard:
        stage.check_inputs(ctx)
        return stage.done(ctx, upstream, readonly=True)


def finished_result(profile: Profile) -> PipelineResult | None:
    """The last result, its stages marked skipped, when nothing would run; else None."""
    tracking = profile.tracking
    if profile.backend != "local" or profile.notify is not None or any(
            (tracking.mlflow, tracking.wandb, tracking.tensorboard)):
        return None
    started = time.monotonic()
    logger = _Silent()
    try:
        backend = backend_for(profile, logger=logger)
        outputs: dict[str, StageOutput] = {}
        for stage in stages_for(profile):
            ctx = StageContext(profile=profile, layout=Layout(profile), backend=backend,
                               storage=backend.storage, logger=logger)
            found = _done(stage, ctx, {name: outputs[name] for name in UPSTREAM[stage.name]})
            if found is None:
                return None
            outputs[stage.name] = found
        latest_text = backend.storage.read_text(result_uris(profile, "latest")[1])
        if latest_text is None:
            return None
        latest = PipelineResult.model_validate_json(latest_text)
    except Exception:  # not known to be done: the flow runs and reports what it finds
        return None
    if [(s.stage, s.uris) for s in latest.stages] != [(o.stage, o.uris)
                                                      for o in outputs.values()]:
        return None  # the last result reported other outputs
    evaluated = outputs.get("evaluate")
    if evaluated is not None and (latest.evaluation or {}).get("trained") != \
            evaluated.details.get("trained"):
        return None
    price = backend.usd_per_chip_hour
    return latest.model_copy(update={
        "stages": [StageReport.of(o, price) for o in outputs.values()],
        "chip_hours": 0.0, "usd": 0.0, "lock_wait_s": 0.0,
        "wall_s": time.monotonic() - started})
