"""Stage 4, train: GRPO with MaxText's train_rl; actor checkpoints every checkpoint_period.

The run name is derived from the training key, so a rerun of the same configuration (after a
crash or a preemption) resumes from the newest actor checkpoint, while a changed
configuration starts a run of its own instead of resuming a foreign one.
"""

from __future__ import annotations

from typing import Any

from flows.config.profile import Profile
from flows.core.backend import Backend, StageWork, WorkloadRun
from flows.core.failures import StageFailed, user_error
from flows.core.layout import Layout, train_key
from flows.core.programs import train_workload
from flows.core.recipe_files import recipe_summary
from flows.core.reward_failures import explain_reward_failure
from flows.core.stage import (
    ProgramStage,
    StageContext,
    StageOutput,
    built_image,
)
from flows.core.verify import newest_actor_step, remove_orbax_temporaries
from flows.runpage.metrics import summarize_run


class TrainStage(ProgramStage):
    name = "train"
    title = "GRPO training (train_rl)"

    def key(self, profile: Profile) -> str:
        return train_key(profile)

    def record_uri(self, ctx: StageContext) -> str:
        return ctx.layout.record(ctx.layout.train_run_dir)

    def content_outputs(self, ctx: StageContext) -> tuple[str, ...]:
        return ("actor_checkpoint",)  # earlier checkpoints are resume points, not leftovers

    def plan_work(self, profile: Profile, backend: Backend) -> StageWork:
        layout = Layout(profile)
        workload = train_workload(profile, layout, backend.runtime)
        steps = workload.total_steps or 0
        inputs = {"maxtext_checkpoint": layout.converted_checkpoint}
        if dataset := backend.runtime.dataset_uri():
            inputs["dataset"] = dataset
        return StageWork(inputs=inputs, outputs={"run_dir": layout.train_run_dir,
                                                "actor_checkpoint": layout.actor_params(steps)},
                        workloads=[workload], notes=list(backend.runtime.setup(self.name).notes))

    def run(self, ctx: StageContext, upstream: dict[str, StageOutput]) -> list[WorkloadRun]:
        workload = train_workload(ctx.profile, ctx.layout, ctx.backend.runtime,
                                  built_image(upstream))
        for note in ctx.backend.runtime.setup(self.name).notes:
            ctx.logger.warning("%s", note)
        existing = newest_actor_step(ctx.storage, ctx.layout.actor_checkpoints)
        if existing is not None:
            ctx.logger.info("resuming run %s from actor checkpoint %d", ctx.layout.run_name,
                            existing)
        try:
            run = ctx.backend.run_workload(workload, ctx.layout.log(ctx.layout.train_run_dir,
                                                                    workload.name))
        except StageFailed as exc:  # a broken reward function is the team's, never retried
            explained = explain_reward_failure(self.name, exc, ctx.storage.read_text)
            if explained is exc:
                raise
            raise explained from exc
        return [run]

    def _prune_after_failure(self, ctx: StageContext) -> None:
        """A failed attempt's half-written checkpoints (orbax temporaries) go, whatever the
        failure: they are never resume points and they hold the disk a rerun needs.
        Completed checkpoints stay."""
        try:
            if removed := remove_orbax_temporaries(ctx.storage, ctx.layout.train_run_dir):
                ctx.logger.warning("train: removed %d file(s) of half-written checkpoints of "
                                   "this attempt; completed checkpoints are kept to resume "
                                   "from", removed)
        except Exception as exc:  # never mask the failure itself
            ctx.logger.warning("train: could not remove half-written checkpoints (%s)", exc)
        super()._prune_after_failure(ctx)

    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]:
        layout = ctx.layout
        step = newest_actor_step(ctx.storage, layout.actor_checkpoints)
        if step is None:
            raise user_error(self.name, "training finished without an actor checkpoint",
                             layout.actor_checkpoints, "set checkpoint_period so that at least the "
                             "last step is saved, and read the train log")
        expected = ctx.profile.train.args.get("num_batches")
        if expected is not None and step < int(expected):
            raise user_error(self.name, f"the newest actor checkpoint is step {step}, expected "
                             f"{expected}", layout.actor_checkpoints,
                             "training stopped early; read the train log")
        summary = summarize_run(ctx.storage, layout.train_run_dir,  # metrics never fail it
                                warn=lambda text: ctx.logger.warning("%s", text))
        # the recipe it trained with, by content: the run page, the result and the trackers
        # show which reward functions made these metrics
        return ({"run_dir": layout.train_run_dir, "actor_checkpoint": layout.actor_params(step)},
                {"newest_step": step, "metrics": summary,
                 "recipe": recipe_summary(ctx.profile)})
