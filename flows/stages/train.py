"""Stage 4, train: GRPO with MaxText's train_rl; actor checkpoints every checkpoint_period.

The run name is derived from the run's key, so a rerun of the same configuration (after a
crash or a preemption) resumes from the newest actor checkpoint, while a changed
configuration starts a run of its own instead of resuming a foreign one. The run's key leaves
out how long it trains (flows/core/continuation.py): a run of another ``num_batches`` is
the same run continued from its newest checkpoint at or below the new length, or refused
with the fix when it cannot be (checkpoints only beyond that length, or a learning-rate
schedule that follows the length).
"""

from __future__ import annotations

import json
import re
from typing import Any

from flows.common.failure_codes import Failure
from flows.config.profile import Profile
from flows.core.backend import Backend, StageWork, WorkloadRun
from flows.core.continuation import (
    LENGTH_ARG,
    SCHEDULE_ARG,
    batches_follow_length,
    schedule_follows_length,
    schedule_steps,
)
from flows.core.failures import StageFailed, user_error
from flows.core.layout import RUN_CARD_NAME, Layout, family_key, train_key
from flows.core.programs import train_workload
from flows.core.recipe_files import recipe_summary
from flows.core.reward_failures import explain_reward_failure
from flows.core.stage import ProgramStage, StageContext, StageOutput, built_image
from flows.core.storage import Storage, join
from flows.core.verify import newest_actor_step, remove_orbax_temporaries, saved_actor_steps
from flows.runpage.metrics import summarize_run

SHORTER_THAN_SAVED = Failure.CONFIG_SHORTER_THAN_SAVED
RUN_NAME = re.compile(r"rl-[0-9a-f]{12}")  # Layout.run_name's form
SCHEDULE_FOLLOWS_LENGTH = Failure.CONFIG_SCHEDULE_FOLLOWS_LENGTH


class TrainStage(ProgramStage):
    name = "train"
    title = "GRPO training (train_rl)"
    key = staticmethod(train_key)

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
        saved = saved_actor_steps(ctx.storage, ctx.layout.actor_checkpoints)
        start = resume_step(self.name, ctx.profile, ctx.layout, saved)
        length = workload.total_steps
        if start is not None and start == length:
            ctx.logger.info("run %s already saved step %d: nothing to train",
                            ctx.layout.run_name, start)
            return []
        if start is None:
            refuse_schedule_change(self.name, ctx.profile, ctx.layout, ctx.storage)
        else:
            ctx.logger.info("continuing run %s from actor checkpoint %d to step %s",
                            ctx.layout.run_name, start, length)
        ctx.storage.write_text(ctx.layout.run_card, run_card(ctx.profile, start))
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
        expected = ctx.profile.train.args.get(LENGTH_ARG)
        if expected is not None and step < int(expected):
            raise user_error(self.name, f"the newest actor checkpoint is step {step}, expected "
                             f"{expected}", layout.actor_checkpoints,
                             "training stopped early; read the train log")
        if expected is not None and step > int(expected):  # the run trained further before
            step = int(expected)
            if not ctx.storage.exists(layout.actor_params(step)):
                raise user_error(self.name, f"step {step} of run {layout.run_name} is not "
                                 "saved", layout.actor_checkpoints,
                                 "read the train log; the run's saved steps are its "
                                 "checkpoints/actor folders", code=SHORTER_THAN_SAVED)
        summary = summarize_run(ctx.storage, layout.train_run_dir,  # metrics never fail it
                                warn=lambda text: ctx.logger.warning("%s", text))
        # the recipe it trained with, by content: the run page, the result and the trackers
        # show which reward functions made these metrics
        return ({"run_dir": layout.train_run_dir, "actor_checkpoint": layout.actor_params(step)},
                {"newest_step": step, "metrics": summary,
                 "recipe": recipe_summary(ctx.profile),
                 "continued": continued_from(ctx.storage, layout, step)})


def resume_step(stage: str, profile: Profile, layout: Layout, saved: list[int]) -> int | None:
    """The saved step this run starts from: the newest at or below the run's length (None:
    from step 0). train_rl restores the newest checkpoint of its run directory, so a run
    shorter than one already saved is refused unless that length itself was saved."""
    raw = profile.train.args.get(LENGTH_ARG)
    if not saved:
        return None
    if raw is None:
        return saved[-1]
    length = int(raw)
    if length in saved:
        return length
    if saved[-1] < length:
        return saved[-1]
    below = [step for step in saved if step < length]
    choices = ", ".join(str(step) for step in saved)
    raise user_error(
        stage, f"run {layout.run_name} has saved steps {choices}: train_rl would continue "
        f"from step {saved[-1]}, beyond {LENGTH_ARG} {length}",
        f"{layout.actor_checkpoints}; " + (f"the newest step at or below {length} is "
                                           f"{below[-1]}" if below else
                                           f"no step at or below {length} was saved"),
        f"set train.args.{LENGTH_ARG} to a saved step ({choices}) to use it as it is, or "
        f"to {saved[-1]} or more to continue training", code=SHORTER_THAN_SAVED)


def refuse_schedule_change(stage: str, profile: Profile, layout: Layout,
                           storage: Storage) -> None:
    """A new run whose learning-rate schedule follows its own length, while a run of the
    same training with another length (and so another schedule) has checkpoints: training
    from step 0 pays again for what that run trained, and continuing it would change the
    learning rate of the steps it took. Say which; the profile chooses."""
    args = profile.train.args
    try:
        if not schedule_follows_length(args) or batches_follow_length(args):
            return
        own = schedule_steps(args)
    except ValueError:  # a value that is no number: MaxText refuses it when it starts
        return
    family = family_key(profile)
    for name in sorted(storage.children(layout.train_base)):
        if name == layout.run_name or not RUN_NAME.fullmatch(name):
            continue
        card = _read_card(storage, join(layout.train_base, name, RUN_CARD_NAME))
        earlier = card.get("schedule_steps") if card else None
        # what the bucket holds is untrusted: only a whole number reaches the fix text
        if card is None or card.get("family") != family or type(earlier) is not int \
                or earlier <= 0:
            continue
        step = newest_actor_step(storage, join(layout.train_base, name, "checkpoints", "actor"))
        if step is None:
            continue
        raise user_error(
            stage, f"run {name} of this training saved step {step} with a learning-rate "
            f"schedule of {earlier} steps; this run's schedule follows its own length "
            f"({own} steps), so it would train from step 0",
            f"MaxText's utils_rl.get_optimizer spans its warmup-cosine schedule over "
            f"{SCHEDULE_ARG} when set, else over the run's train_steps ({LENGTH_ARG} x "
            "rl.num_iterations x train_fraction x num_epoch)",
            f"set train.args.{SCHEDULE_ARG}: {earlier} to continue run {name} from step "
            f"{step} with its schedule, or train.args.{SCHEDULE_ARG}: {own} to train a new "
            "run from step 0", code=SCHEDULE_FOLLOWS_LENGTH)


def run_card(profile: Profile, start: int | None) -> str:
    """What this run directory trains: how a run with another schedule finds it, and from
    which step this attempt continued (the lineage record's ``continued``)."""
    args = profile.train.args
    try:
        schedule: int | None = schedule_steps(args)
    except ValueError:
        schedule = None
    return json.dumps({"family": family_key(profile), "train_key": train_key(profile),
                       LENGTH_ARG: args.get(LENGTH_ARG), "schedule_steps": schedule,
                       "from_step": start or 0}, sort_keys=True)


def _read_card(storage: Storage, uri: str) -> dict[str, Any] | None:
    """A run card as written by run_card, or None when absent or not one (the bucket is
    untrusted: a card only ever names a run to suggest, nothing is read from its path)."""
    try:
        text = storage.read_text(uri)
        card = json.loads(text) if text else None
    except (OSError, ValueError):
        return None
    return card if isinstance(card, dict) else None


def continued_from(storage: Storage, layout: Layout, step: int) -> dict[str, Any] | None:
    """Which run and step this training continued, from the run card its attempt wrote;
    None when it trained from step 0."""
    card = _read_card(storage, layout.run_card)
    if card is None or str(card.get(LENGTH_ARG)) != str(step):  # another length's attempt
        return None
    start = card.get("from_step")
    if not isinstance(start, int) or start <= 0:
        return None
    return {"run": layout.run_name, "from_step": start, "steps_trained": step - start}
