"""Stage 6, evaluate: the trained model and its base model, scored on a held-out set.

Runs only for a profile with an ``eval`` section (flows/config/evaluation.py). The program is
MaxText 0.2.4's own RL evaluation run on one checkpoint (images/rehearsal/evaluate_rl.py):
answer and format accuracy, the mean of the training's own rewards, and the count.

The base model's score is an output of its own, keyed by what shapes it (base checkpoint,
image, held-out set, settings; flows/core/eval_programs.py) and kept with its own lineage
record and manifest in ``eval/base/<key>``, so it is computed once per base and every run
that trains from that base reuses it, while a damaged or foreign base score is computed
again. The stage's record (in ``eval/trained/<key>``) covers both score files, so a damaged
one of either makes the stage run again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flows.common.failure_codes import Failure
from flows.config.eval_hours import eval_rows
from flows.config.profile import Profile
from flows.core.backend import Backend, StageWork, WorkloadRun, run_independent
from flows.core.dataset import dataset_problem
from flows.core.eval_estimate import plan_notes
from flows.core.eval_programs import (
    EvalRuntime,
    Which,
    base_eval_key,
    eval_dir,
    evaluate_workload,
    planned_eval_workloads,
    scores_uri,
    trained_eval_key,
)
from flows.core.failures import StageFailed, user_error
from flows.core.layout import Layout
from flows.core.lineage import LineageRecord, UnreadableRecord, read_record, relative_outputs, write_record
from flows.core.manifest import LOGS_DIR, build_manifest, manifest_problems
from flows.core.recipe_files import recipe_summary
from flows.core.reward_failures import explain_reward_failure
from flows.core.scores import ScoreSummary, parse_scores, summarize
from flows.core.stage import ProgramStage, StageContext, StageOutput, built_image

BASE_STAGE = "evaluate-base"  # the stage name in the base score's own record


def held_out_description(profile: Profile) -> str:
    ev = profile.eval
    assert ev is not None
    if ev.files:
        return f"{ev.files} (declared eval.files, split {ev.split!r})"
    return "the dataset's test split (MaxText prepare_datasets: eval_split, or its held-out " \
           "5 % of the training files)"


class EvaluateStage(ProgramStage):
    name = "evaluate"
    title = "Evaluate trained vs base"
    key = staticmethod(trained_eval_key)

    def record_uri(self, ctx: StageContext) -> str:
        return ctx.layout.record(eval_dir(ctx.layout, "trained"))

    def content_outputs(self, ctx: StageContext) -> tuple[str, ...]:
        return ("scores", "base_scores")

    def leftover_dirs(self, ctx: StageContext) -> list[str]:
        return [eval_dir(ctx.layout, "trained")]

    def check_inputs(self, ctx: StageContext) -> None:
        if not isinstance(ctx.backend.runtime, EvalRuntime):
            raise user_error(self.name, f"the {ctx.backend.name} backend cannot run the "
                             "evaluation program", "eval is set in the profile",
                             "remove the eval section", code=Failure.EVAL_UNSUPPORTED)
        files = ctx.profile.eval.files if ctx.profile.eval else None
        if files and (found := dataset_problem(ctx.storage, files)):
            problem, fix = found
            raise user_error(self.name, f"eval.files: {problem}", f"    eval.files={files}", fix,
                             code=Failure.DATA_INVALID)

    def plan_work(self, profile: Profile, backend: Backend) -> StageWork:
        layout = Layout(profile)
        step = int(profile.train.args.get("num_batches", 0))
        runtime = backend.runtime
        rule = profile.promotion_rule
        notes = [f"held-out set: {held_out_description(profile)}; rows the run trained on are "
                 "refused", "the base score is computed once per base key "
                 f"({base_eval_key(profile)}) and reused by later runs"]
        if rule is not None:
            notes.append(f"promotion: {rule.metric} of the trained model - {rule.against} >= "
                         f"{rule.min_delta:g}")
        workloads = list(planned_eval_workloads(profile, layout, runtime, step).values())
        if isinstance(runtime, EvalRuntime):
            notes += runtime.setup(self.name).notes
        notes += plan_notes(profile, eval_rows(profile))
        return StageWork(inputs={"base_checkpoint": layout.converted_checkpoint,
                                "trained_checkpoint": layout.actor_params(step)},
                        outputs={"scores": scores_uri(layout, "trained"),
                                 "base_scores": scores_uri(layout, "base")},
                        workloads=workloads, notes=notes)

    # --- the base score, kept under its own key ---
    def _base_record_uri(self, ctx: StageContext) -> str:
        return ctx.layout.record(eval_dir(ctx.layout, "base"))

    def cached_base(self, ctx: StageContext) -> bool:
        """Is a verified base score for this base key there, intact?"""
        uri = self._base_record_uri(ctx)
        try:
            record = read_record(ctx.storage, uri)
        except UnreadableRecord as exc:
            ctx.logger.warning("%s: base score record: %s; scoring the base again", self.name, exc)
            return False
        if record is None or not record.matches(base_eval_key(ctx.profile), {}):
            return False
        directory = eval_dir(ctx.layout, "base")
        problems = manifest_problems(ctx.storage, directory, record.manifest.get("base_scores", {}))
        if problems:
            ctx.logger.warning("%s: the base score changed since it was verified (%s); scoring "
                               "the base again", self.name, "; ".join(problems[:5]))
            return False
        return True

    def _explained(self, failure: BaseException,
                   read_log: Callable[[str], str | None] | None = None) -> BaseException:
        """A held-out set that is not held out (or is empty), and a reward function of the
        recipe that broke its contract (the evaluation's mean reward calls the training's
        functions), are the user's to fix; the program says so on a marked line. ``read_log``
        (the stage's storage) finds a marked line the log tail no longer holds."""
        if not isinstance(failure, StageFailed):
            return failure
        reward = explain_reward_failure(self.name, failure, read_log or (lambda uri: None))
        if reward is not failure:
            return reward
        detail = failure.diagnosis.detail or ""
        if "EVAL-OVERLAP" not in detail and "EVAL-EMPTY" not in detail:
            return failure
        line = next(ln for ln in detail.splitlines() if "EVAL-" in ln)
        explained = user_error(self.name, "the held-out set is not held out" if "OVERLAP" in
                               line else "the held-out set is empty", line,
                               "declare eval.files with rows the run does not train on, or "
                               "remove eval.files to use the dataset's test split",
                               code=Failure.EVAL_OVERLAP)
        explained.__cause__ = failure
        return explained

    def run(self, ctx: StageContext, upstream: dict[str, StageOutput]) -> list[WorkloadRun]:
        """The base model is scored unless a verified score for its key is kept; the two
        programs run together where the backend has room (neither needs the other's output),
        and a base score that finished is kept with its record even if the trained one
        failed."""
        checkpoints: dict[Which, str] = {}
        ctx.scratch["base_cached"] = self.cached_base(ctx)
        if ctx.scratch["base_cached"]:
            ctx.logger.info("%s: base score for key %s already verified; reused", self.name,
                            base_eval_key(ctx.profile))
        else:
            base_dir = eval_dir(ctx.layout, "base")
            if cleared := ctx.backend.clear_leftovers(self.name, base_dir):
                ctx.logger.warning("%s: removed %d file(s) of an unverified base score in %s",
                                   self.name, cleared, base_dir)
            checkpoints["base"] = upstream["convert"].uris["maxtext_checkpoint"]
        checkpoints["trained"] = upstream["train"].uris["actor_checkpoint"]
        runs = []
        for which, checkpoint in checkpoints.items():
            workload = evaluate_workload(ctx.profile, ctx.layout, ctx.backend.runtime, which,
                                         checkpoint, built_image(upstream))
            runs.append((workload, ctx.layout.log(eval_dir(ctx.layout, which), workload.name)))
        outcomes = dict(zip(checkpoints, run_independent(ctx.backend, runs), strict=True))
        if isinstance(outcomes.get("base"), WorkloadRun):
            self._keep_base(ctx)
        for outcome in outcomes.values():
            if isinstance(outcome, BaseException):
                raise self._explained(outcome, ctx.storage.read_text)
        return [o for o in outcomes.values() if isinstance(o, WorkloadRun)]

    def _keep_base(self, ctx: StageContext) -> None:
        """The base score's own record, so later runs from this base reuse it."""
        base_dir = eval_dir(ctx.layout, "base")
        summary = self._summary(ctx, "base")
        record = LineageRecord(stage=BASE_STAGE, key=base_eval_key(ctx.profile), inputs={},
                               outputs=relative_outputs({"base_scores": base_dir},
                                                        ctx.layout.root),
                               details={"summary": summary.model_dump()},
                               manifest={"base_scores": build_manifest(ctx.storage, base_dir)})
        write_record(ctx.storage, self._base_record_uri(ctx), record)

    def _summary(self, ctx: StageContext, which: Which) -> ScoreSummary:
        uri = scores_uri(ctx.layout, which)
        scores, problem = parse_scores(ctx.storage.read_text(uri))
        if scores is None:
            raise user_error(self.name, f"the {which} model's evaluation left no usable scores",
                             f"{uri}: {problem}", "read the evaluate log beside it "
                             f"({LOGS_DIR}/evaluate-{which}.log) and run again")
        if scores.total <= 0 or scores.overlap:
            raise user_error(self.name, f"the {which} model's evaluation scored "
                             f"{scores.total} held-out rows ({scores.overlap} overlapping)", uri,
                             "raise eval.batches or declare eval.files", code=Failure.EVAL_OVERLAP)
        return summarize(scores)

    def verify(self, ctx: StageContext) -> tuple[dict[str, str], dict[str, Any]]:
        trained, base = self._summary(ctx, "trained"), self._summary(ctx, "base")
        details: dict[str, Any] = {"trained": trained.model_dump(), "base": base.model_dump(),
                                   "base_key": base_eval_key(ctx.profile),
                                   "held_out": held_out_description(ctx.profile),
                                   # the mean reward is the recipe's functions' sum: named
                                   "recipe": recipe_summary(ctx.profile)}
        if "base_cached" in ctx.scratch:
            details["base_cached"] = ctx.scratch["base_cached"]
        return ({"scores": eval_dir(ctx.layout, "trained"),
                 "base_scores": eval_dir(ctx.layout, "base")}, details)
