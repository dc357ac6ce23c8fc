"""Stage 4, train: GRPO with MaxText's train_rl; actor checkpoints every checkpoint_period.

The run name is derived from the training key, so a rerun of the same configuration (after a
crash or a preemption) resumes from the newest actor checkpoint, while a changed
configuration starts a run of its own instead of resuming a foreign one.
"""

from __future__ import annotations

from typing import Any

from flows.backends.gke.infra.cost import stage_estimated_chip_hours
from flows.config.profile import Profile
from flows.core.layout import Layout, train_key
from flows.core.stage import (
    Stage,
    StageContext,
    StageOutput,
    StagePlan,
    WorkloadRun,
    built_image,
    fail,
    plan_workload,
)
from flows.core.storage import Storage, join
from flows.runpage.metrics import summarize_run
from flows.stages.programs import train_workload


def newest_step(storage: Storage, actor_dir: str) -> int | None:
    """The highest numbered actor checkpoint that has model_params (not a hard-coded 50)."""
    steps = [int(name) for name in storage.children(actor_dir) if name.isdigit()]
    for step in sorted(steps, reverse=True):
        if storage.exists(join(actor_dir, str(step), "model_params")):
            return step
    return None


class TrainStage(Stage):
    name = "train"
    title = "GRPO training (train_rl)"

    def key(self, profile: Profile) -> str:
        return train_key(profile)

    def record_uri(self, layout: Layout) -> str:
        return layout.record(layout.train_run_dir)

    def plan(self, profile: Profile) -> StagePlan:
        layout = Layout(profile)
        workload = train_workload(profile, layout)
        steps = workload.total_steps or 0
        notes = []
        chip_hours = stage_estimated_chip_hours(profile, self.name)
        if profile.backend == "local":
            notes.append("rehearsal: the vLLM rollout is replaced by a CPU stand-in that samples "
                         "from the actor itself (images/rehearsal/train_rl_cpu.py); everything "
                         "else is MaxText's and Tunix's real code")
        inputs = {"maxtext_checkpoint": layout.converted_checkpoint}
        if profile.data.train_files or profile.backend == "local":
            inputs["dataset"] = profile.data.train_files or layout.dataset_file
        return StagePlan(stage=self.name, title=self.title, key=self.key(profile), inputs=inputs,
                         outputs={"run_dir": layout.train_run_dir,
                                  "actor_checkpoint": layout.actor_params(steps)},
                         workloads=[plan_workload(workload)], estimated_chip_hours=chip_hours,
                         notes=notes)

    def run(self, ctx: StageContext, upstream: dict[str, StageOutput]) -> list[WorkloadRun]:
        workload = train_workload(ctx.profile, ctx.layout, built_image(upstream))
        if ctx.profile.backend == "local":
            ctx.logger.warning("REHEARSAL: the vLLM rollout is replaced by a CPU stand-in "
                               "sampling from the actor model; the rest is the real train_rl")
        existing = newest_step(ctx.storage, ctx.layout.actor_checkpoints)
        if existing is not None:
            ctx.logger.info("resuming run %s from actor checkpoint %d", ctx.layout.run_name,
                            existing)
        return [ctx.backend.run_workload(workload, ctx.layout.log(ctx.layout.train_run_dir,
                                                                  workload.name))]

    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]:
        layout = ctx.layout
        step = newest_step(ctx.storage, layout.actor_checkpoints)
        if step is None:
            raise fail(self.name, "training finished without an actor checkpoint",
                       layout.actor_checkpoints, "set checkpoint_period so that at least the "
                       "last step is saved, and read the train log")
        expected = ctx.profile.train.args.get("num_batches")
        if expected is not None and step < int(expected):
            raise fail(self.name, f"the newest actor checkpoint is step {step}, expected "
                       f"{expected}", layout.actor_checkpoints,
                       "training stopped early; read the train log")
        summary = summarize_run(ctx.storage, layout.train_run_dir)
        return ({"run_dir": layout.train_run_dir, "actor_checkpoint": layout.actor_params(step)},
                {"newest_step": step, "metrics": summary})
