"""The flow: the tutorial's table of contents as five Prefect tasks.

image → infra → convert → train → export. Each task asks its stage whether a verified output
is already there (skip), otherwise runs it and verifies it. Tasks retry only failures that
are diagnosed as retryable (infrastructure, preemption); a user error fails at once with its
cause. The flow is three steps: ``prepare`` (every check before any side effect, so a bad
profile touches nothing; the run's backend built once), ``run_stages`` (the tasks in order
under the profile's lock and the run's bound, each under its timeout, the run page told how
each ends) and ``finish`` (the result kept, reported and shown).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from prefect import Task, flow, get_run_logger, task
from prefect.cache_policies import NONE
from prefect.exceptions import TerminationSignal
from prefect.runtime import deployment, flow_run
from prefect.states import Cancelled, State

from flows.announcements.guard import was_coalesced
from flows.announcements.model import AnnouncementError, RunAnnouncement, retrain_run_name
from flows.announcements.record import announcement_refusal
from flows.backends import backend_for, end_background_watches, storage_for
from flows.common.paths import default_cache_dir, path_part
from flows.config import Profile, ProfileError, load_profile
from flows.config.choices import ProfileName
from flows.config.errors import EnvironmentNotReady
from flows.config.teams import load_teams
from flows.core.backend import Backend
from flows.core.budgets import run_bound_s, timed_out_message
from flows.core.deadline import Deadline, DeadlinePassed
from flows.core.error_redaction import redacting_errors
from flows.core.eval_programs import score_key
from flows.core.failures import StageFailed, internal_error
from flows.core.layout import Layout
from flows.core.promotion_store import read_history, read_promoted
from flows.core.recipe_check import check_recipe
from flows.core.recipe_files import recipe_summary
from flows.core.retry import RETRY_DELAYS_S
from flows.core.root_space import storage_failure
from flows.core.secrets import Redactor, require_secrets
from flows.core.stage import StageContext, StageOutput
from flows.core.team_origin import TeamAndOrigin
from flows.core.throughput import line_of
from flows.deployed.declared import deployment_declared
from flows.deployed.run_choices import refuse_run_choices
from flows.flow_runs.failure_event import on_run_failed
from flows.flow_runs.run_log import readable_failures
from flows.flow_runs.run_origin import deployed_fields, run_origin
from flows.health import sentinel
from flows.integrations.judged_model import judged_model
from flows.integrations.mlflow_run import RunFacts
from flows.integrations.preflight import integration_issues
from flows.integrations.register import register_judged
from flows.integrations.tracking import report_run
from flows.locking.profile_lock import profile_lock
from flows.operations.team_view import publish_team_view
from flows.run.cancel import cancelled_by_user, cancelled_state, resume_cancel
from flows.run.result import PipelineResult, StageReport, persist_result, run_throughput
from flows.runpage import events
from flows.runpage.artifacts import TrainingProgress, publish_announcement, publish_recipe, publish_result
from flows.runpage.live import StagePage, skipped_state
from flows.runpage.promotion import (
    comparison_rows,
    dataset_of,
    emit_decision,
    history_rows,
    promote_or_reject,
    publish_promotion,
    scored_recipe,
)
from flows.spending.team_spend import (
    RunSpend,
    record_failed,
    record_metered,
    settle,
    stage_check,
    start_check,
)
from flows.stages import STAGE_BY_NAME, stages_for


def retry_if_retryable(task: Any, task_run: Any, state: State) -> bool:
    """Prefect retry condition: only diagnosed infrastructure faults and preemptions.
    ``_execute`` turns every failure into a StageFailed (undiagnosed ones into internal
    errors, never retried), so the diagnosis alone decides."""
    try:
        state.result()
    except StageFailed as exc:
        return exc.diagnosis.retryable
    except Exception:
        return False
    return False


CURRENT_STAGE: list[str] = []  # the stage in progress in this process, for `tpurl run`'s messages


def _execute(stage_name: str, profile: Profile, upstream: Mapping[str, StageOutput],
             run_backend: Backend | None = None) -> StageOutput:
    """One stage, on the run's backend (None: a stage called outside a flow's ``prepare``,
    as a test does) bound to the stage and the task's logger."""
    CURRENT_STAGE[:] = [stage_name]
    logger = get_run_logger()
    redactor = Redactor()
    stage = STAGE_BY_NAME[stage_name]
    backend = (run_backend or backend_for(profile)).for_stage(
        stage_name, logger=logger, redactor=redactor, on_progress=TrainingProgress(logger))
    ctx = StageContext(profile=profile, layout=Layout(profile), backend=backend,
                       storage=backend.storage, logger=logger, redactor=redactor)
    events.stage_event("started", profile.name, stage_name, redactor)
    try:
        stage_check(str(flow_run.id or ""), stage_name)  # the team's month, read again
        output = stage.execute(ctx, dict(upstream))
    except StageFailed as exc:
        events.stage_event("failed", profile.name, stage_name, redactor, _failed(exc))
        raise
    except OSError as exc:  # the file system refused (read-only, full): the user's to fix
        kept = _keep_traceback(stage_name, exc, redactor)
        failure = storage_failure(stage_name, exc, kept, profile) or internal_error(
            stage_name, exc, redactor)
        logger.error("%s: %s (%s)", stage_name, failure.diagnosis.summary,
                     failure.diagnosis.fix)
        events.stage_event("failed", profile.name, stage_name, redactor, _failed(failure))
        raise failure from exc
    except Exception as exc:  # undiagnosed: our bug until shown otherwise, traceback kept
        failure = internal_error(stage_name, exc, redactor)
        logger.error("%s failed on an internal error:\n%s", stage_name, failure.diagnosis.detail)
        events.stage_event("failed", profile.name, stage_name, redactor, _failed(failure))
        raise failure from exc
    events.stage_event("skipped" if output.status == "skipped" else "completed", profile.name,
                       stage_name, redactor, {"uris": output.uris,
                                              "duration_s": round(output.duration_s, 3)})
    logger.info("%s %s in %.1f s → %s", stage_name, output.status, output.duration_s,
                ", ".join(f"{k}={v}" for k, v in output.uris.items()))
    return output


def _stage_task(stage_name: str, profile: Profile, upstream: Mapping[str, StageOutput],
                backend: Backend | None) -> StageOutput | State:
    """A stage task's body: the output (a skip as its named state), or Cancelled when the
    user cancelled the run while the stage ran (flows/run/cancel.py says why the task
    must catch that itself), with its ``tpurl.stage.cancelled`` event."""
    started = time.monotonic()
    try:
        return skipped_state(_execute(stage_name, profile, upstream, backend))
    except TerminationSignal as exc:
        if not cancelled_by_user(exc):
            raise
        state = cancelled_state(stage_name)
        get_run_logger().warning("%s", state.message)
        events.stage_event("cancelled", profile.name, stage_name, Redactor(),
                           {"reason": "cancelled by the user",
                            "duration_s": round(time.monotonic() - started, 3)})
        return state


def _failed(failure: StageFailed) -> dict[str, str]:
    """The payload of every ``tpurl.stage.failed`` event: the diagnosis's fields, the code
    among them (automations match a cause on it, never on words of the summary)."""
    d = failure.diagnosis
    return {"category": str(d.category), "code": d.code, "summary": d.summary, "fix": d.fix,
            "log": failure.log_uri or ""}


def _keep_traceback(stage_name: str, exc: BaseException, redactor: Redactor) -> str | None:
    """The whole traceback in a file under the cache directory (the output root may be the
    very place that cannot be written); its path goes into the diagnosis."""
    name = path_part(f"{flow_run.name or 'run'}-{stage_name}")  # a run name may hold "../"
    path = default_cache_dir() / "errors" / f"{name}.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(redactor("".join(traceback.format_exception(exc))))
    except OSError:
        return None
    return str(path)


_TASK_OPTIONS: dict[str, Any] = dict(retries=len(RETRY_DELAYS_S), retry_delay_seconds=RETRY_DELAYS_S,
                                     retry_condition_fn=retry_if_retryable, cache_policy=NONE)
# What each stage does, per backend where it differs: the rehearsal provisions no cluster.
TASK_TITLES = {"image": "image: build patched post-training image",
               "infra": "infra: provision cluster, bucket and inputs",
               "convert": "convert: HF to MaxText checkpoint",
               "train": "train: GRPO with train_rl",
               "export": "export: MaxText to HF model",
               "evaluate": "evaluate: trained vs base on the held-out set"}
LOCAL_TITLES = {"infra": "infra: output root, tiny model and dataset"}


def task_title(stage: str, backend: str) -> str:
    return (LOCAL_TITLES if backend == "local" else {}).get(stage, TASK_TITLES[stage])


def _titled(stage: str) -> dict[str, Any]:
    """The task's name and its run's name. The run's name is set (Prefect otherwise appends
    three characters of the task key, prefect/task_engine.py, which a skipped task run's
    rename would drop) and names what this backend does."""
    def run_name(parameters: dict[str, Any]) -> str:
        return task_title(stage, getattr(parameters.get("profile"), "backend", ""))
    return dict(name=TASK_TITLES[stage], task_run_name=run_name, **_TASK_OPTIONS)


@task(**_titled("image"))
def build_image(profile: Profile, *, backend: Backend | None = None) -> StageOutput | State:
    return _stage_task("image", profile, {}, backend)


@task(**_titled("infra"))
def provision_infrastructure(profile: Profile, image: StageOutput, *,
                             backend: Backend | None = None) -> StageOutput | State:
    return _stage_task("infra", profile, {"image": image}, backend)


@task(**_titled("convert"))
def convert_checkpoint(profile: Profile, image: StageOutput,
                       infra: StageOutput, *,
                       backend: Backend | None = None) -> StageOutput | State:
    return _stage_task("convert", profile, {"image": image, "infra": infra}, backend)


@task(**_titled("train"))
def train_grpo(profile: Profile, image: StageOutput, infra: StageOutput,
               converted: StageOutput, *, backend: Backend | None = None) -> StageOutput | State:
    return _stage_task("train", profile, {"image": image, "infra": infra, "convert": converted}, backend)


@task(**_titled("export"))
def export_hf(profile: Profile, image: StageOutput, infra: StageOutput,
              trained: StageOutput, *, backend: Backend | None = None) -> StageOutput | State:
    return _stage_task("export", profile, {"image": image, "infra": infra, "train": trained}, backend)


@task(**_titled("evaluate"))
def evaluate_models(profile: Profile, image: StageOutput, infra: StageOutput,
                    converted: StageOutput, trained: StageOutput,
                    exported: StageOutput, *,
                    backend: Backend | None = None) -> StageOutput | State:
    return _stage_task("evaluate", profile, {
        "image": image, "infra": infra, "convert": converted, "train": trained,
        "export": exported}, backend)


def _run_name() -> str:
    """``<profile>[-<announced dataset file>][+rev-<revision>]-<time>``, so the UI's run list
    says what each retrain run trains."""
    params = flow_run.parameters or {}
    try:
        record = served_announcement(params.get("announcement"))
    except AnnouncementError:
        record = None  # the flow refuses it with the field named; the name need not
    return retrain_run_name(str(params.get("profile", "run")), record,
                            f"{datetime.now(UTC):%Y%m%d-%H%M%S}")


# The profile a deployment that declares none runs (and a bare `rl_post_training()` call)
DEFAULT_PROFILE = "rehearsal"


def served_announcement(value: Any) -> RunAnnouncement | None:
    return RunAnnouncement.from_dict(value) if value else None


@flow(name="rl-post-training", flow_run_name=_run_name, persist_result=True,
      result_serializer="json", validate_parameters=True, on_failure=[on_run_failed])
@redacting_errors
def rl_post_training(profile: ProfileName = DEFAULT_PROFILE, overrides: dict[str, str] | None = None,
                     dataset_uri: str | None = None,
                     model_revision: str | None = None,
                     announcement: dict[str, Any] | None = None) -> PipelineResult | State:
    """Run a profile's stages: image, infra, convert, train, export, then evaluate and the
    promotion decision when the profile has an eval section.

    Prefect shows each argument's text below on the run form (it reads this Args section).

    Args:
        profile: The profile to run: one shipped under deployments/profiles (from the CLI,
            also a path to a YAML file). It names the model, the cluster and the budgets.
        overrides: Profile fields to change for this run, as "section.field": "value"
            (e.g. "train.args.learning_rate": "1e-5"); checked like the profile itself. A
            deployment's run may change only the run-tunable fields (`tpurl profiles
            --tunable`); images, secrets, backend, cluster, bucket and paths are fixed.
        dataset_uri: Train on this dataset instead of the profile's data.train_files (a
            gs:// or local Parquet file; what a dataset announcement carries). A
            deployment's run is refused one outside the profile's
            announcements.allowed_uri_prefixes.
        model_revision: Start from this base-model revision instead of the profile's
            model.hf_revision (what a base-model announcement carries). A deployment's run
            is refused anything but a full 40-hex commit.
        announcement: Leave empty. Set by the dispatcher (flows/announcements/) on retrain
            runs: the announcements this run serves and those coalesced into it. A run the
            dispatcher did not record as its own is refused it.
    """
    run = prepare(profile, overrides, dataset_uri, model_revision, announcement)
    if isinstance(run, State):  # replaced by a newer run before it started
        return run
    try:
        ran = run_stages(run)
    except Exception:  # a failed stage: the team's view still shows the run and its spend
        if run.spend is not None:
            _ledger_failed(run, None)  # the stages it never started: $0
            publish_team_view(run.spend.team, run.spend.month, run.cfg, run.spend.run, None,
                              "Failed")
        raise
    return finish(run, ran)


@dataclass(frozen=True)
class PreparedRun:
    """A run whose every check passed before any side effect: its profile, its one backend
    (built for the run's team and origin; each stage's task binds it to its stage and
    logger, ``Backend.for_stage``) and the announcements it serves."""

    cfg: Profile
    backend: Backend
    record: RunAnnouncement | None
    started: float  # time.monotonic() at the flow's start
    started_at: str
    spend: RunSpend | None = None  # the team whose month the run spends (None: no team)


@dataclass(frozen=True)
class RanStages:
    """What the stages left: each stage's output in order, the evaluation and promotion
    decision (with an eval section) and the time spent waiting for the profile's lock."""

    outputs: dict[str, StageOutput]
    evaluation: dict[str, Any] | None
    lock_wait_s: float
    # the training sentinel's findings, each with its policy (flows/health/sentinel.py)
    health: list[dict[str, Any]] = field(default_factory=list)


def prepare(profile: str, overrides: dict[str, str] | None, dataset_uri: str | None,
            model_revision: str | None, announcement: dict[str, Any] | None) -> PreparedRun | State:
    """Every check before any side effect: the deployment's own choices, the announcement's
    origin, the profile with the run's parameters, secrets, trackers and what this
    environment lacks. Cancelled (returned, not raised) when a newer run replaced this one."""
    started, started_at = time.monotonic(), datetime.now(UTC).isoformat()
    readable_failures()  # the run page's log: a diagnosed failure once, without traceback
    # a deployment's run: its job variables and profile only repeat the deployment's
    origin = run_origin()
    declared = deployment_declared()
    refuse_run_choices(declared, {"profile": profile}, default_profile=DEFAULT_PROFILE)
    record = served_announcement(announcement)  # a malformed one is refused, field named
    # only the dispatcher hands a run announcements (flows/announcements/record.py)
    if record is not None and (forged := announcement_refusal(flow_run.id, deployment.id,
                                                              announcement)):
        raise AnnouncementError(forged)
    if record is not None and (other := record.parameters_problem(
            {"dataset_uri": dataset_uri, "model_revision": model_revision,
             "overrides": overrides}, declared.parameters)):
        raise AnnouncementError(other)
    if record is not None and (message := was_coalesced(flow_run.id)):
        get_run_logger().warning("this run was replaced before it started: %s", message)
        return Cancelled(message=f"Not run: {message}")
    merged = dict(overrides or {})
    given: dict[str, str] = {}  # the fields set by a parameter other than overrides
    if dataset_uri:
        merged["data.train_files"], given["data.train_files"] = dataset_uri, "dataset_uri"
    if model_revision:
        merged["model.hf_revision"], given["model.hf_revision"] = model_revision, "model_revision"
    # every check before any side effect; a deployment's run may change run-tunable fields only
    cfg = load_profile(profile, merged, origin=origin, parameters=given,
                       deployed=deployed_fields(declared), deployed_env=declared.env,
                       deployed_profile=declared.profile)
    require_secrets(cfg)  # a token missing where the flow runs fails here, not in a pod
    if problems := integration_issues(cfg):  # a tracker or registry that cannot be reached
        raise ProfileError(cfg.name, problems)
    recipe = check_recipe(cfg)  # the team's files imported as MaxText will, in a child
    for warning in recipe.warnings:
        get_run_logger().warning("%s", warning)
    if recipe.issues:
        raise ProfileError(cfg.name, list(recipe.issues))
    teams = load_teams()  # read once: the budget checked and the queues rendered agree
    backend = backend_for(cfg, team_origin=TeamAndOrigin(teams.team_of(cfg.name), origin))
    if missing := backend.start_issues():  # gcloud, a daemon, credentials
        raise EnvironmentNotReady(cfg.name, missing)
    # the team's month: refused when the estimate exceeds what is left, else the estimate
    # is written to the team's ledger first of all the run's side effects
    spend = start_check(cfg, str(flow_run.id or ""), flow_run.name or "run", teams)
    logger = get_run_logger()
    logger.info("profile %s (backend %s) validated", cfg.name, cfg.backend)
    if spend is not None:
        logger.info("team %s: spends its budget for %s", spend.team.name, spend.month)
    if record is not None:
        logger.info("serves %s%s", "; ".join(a.describe() for a in record.serves.values()),
                    f"; coalesced: {', '.join(a.describe() for a in record.coalesced)}"
                    if record.coalesced else "")
        publish_announcement(cfg.name, record)
    publish_recipe(cfg)
    return PreparedRun(cfg, backend, record, started, started_at, spend)


def run_stages(run: PreparedRun) -> RanStages:
    """The stages in order under the profile's lock and the run's bound, each through its
    task (``_run_stage``), then the evaluation's promotion decision under the same lock."""
    cfg, record = run.cfg, run.record
    events.run_started(cfg.name, record.summary() if record else None)
    names = [stage.name for stage in stages_for(cfg)]
    page = StagePage(cfg.name, names, deployment.name or "local runs",
                     run.backend.runtime.dataset_uri())
    evaluation: dict[str, Any] | None = None
    # from the lock on: waiting for it is not stuck
    bound = run_bound_s(cfg, [run.backend.stage_timeout_s(name) for name in names])
    with profile_lock(cfg.name, get_run_logger()) as hold, Deadline(
            bound, lambda: timed_out_message(cfg, bound, page.current)):
        image = _run_stage(page, run, "image", build_image, cfg)
        infra = _run_stage(page, run, "infra", provision_infrastructure, cfg, image)
        converted = _run_stage(page, run, "convert", convert_checkpoint, cfg, image,
                               infra)
        trained = _run_stage(page, run, "train", train_grpo, cfg, image, infra,
                             converted)
        health = _training_health(cfg, trained)
        exported = _run_stage(page, run, "export", export_hf, cfg, image, infra,
                              trained)
        # when the export is there, not after evaluation and promotion: a chain on it (a
        # serving deployment, a copy) starts without waiting for them
        events.model_exported(cfg.name, {
            "hf_export": exported.uris["hf_export"],
            "trained_checkpoint": trained.uris["actor_checkpoint"],
            **({"announcement": record.summary()} if record else {})})
        outputs = {"image": image, "infra": infra, "convert": converted, "train": trained,
                   "export": exported}
        if cfg.eval is not None:  # judged under the lock: the pointer is the profile's
            evaluated = _run_stage(page, run, "evaluate", evaluate_models, cfg, image,
                                   infra, converted, trained, exported)
            outputs["evaluate"] = evaluated
            evaluation = _judge(cfg, run.backend, evaluated, _artifacts(outputs), record,
                                trained, health)
    return RanStages(outputs, evaluation, round(hold.waited_s, 3), health)


def _training_health(cfg: Profile, trained: StageOutput) -> list[dict[str, Any]]:
    """The training sentinel over the finished training's metrics: each finding logged and
    announced (tpurl.train.suspect), with its policy; the evaluation may add one."""
    steps = trained.details.get("metrics", {}).get("steps", [])
    judged = sentinel.after_training(steps, cfg.health)
    sentinel.announce(cfg.name, flow_run.name or "run", judged, get_run_logger().warning)
    return judged


def _run_stage(page: StagePage, run: PreparedRun, stage: str,
               task: Task[..., StageOutput | State], *args: Any) -> StageOutput:
    """One stage's task under its timeout (the run's backend answers it), the page told how it
    starts and ends; its failure is re-raised after the page shows it. A user's cancel,
    which the task caught and ended Cancelled (flows/run/cancel.py), is raised again here
    as the signal, so the flow engine ends the run Cancelled."""
    backend = run.backend
    page.started(stage)
    timed = task.with_options(timeout_seconds=backend.stage_timeout_s(stage))
    try:
        # return_state=True: Prefect's typing of a task called so names its result's type too
        state = timed(*args, backend=run.backend, return_state=True)
        if not isinstance(state, State):
            raise TypeError(f"{stage}: the task returned {type(state).__name__}, not a state")
    except BaseException as exc:  # a signal without a cancel intent, Ctrl-C, the run's bound
        page.stopped(stage, "timedout" if isinstance(exc, DeadlinePassed) else "cancelled", exc)
        _ledger_failed(run, stage)
        raise
    if not state.is_completed():  # failed, cancelled, timed out: what its meters charged
        _ledger_failed(run, stage)
    if state.is_cancelled():  # the user's cancel, caught by the task
        stop = resume_cancel()
        page.stopped(stage, "cancelled", stop)
        raise stop
    if not state.is_completed():
        page.stopped(stage, (state.name or state.type.value).lower())
        state.result()  # raises the task's exception
        raise RuntimeError(f"{stage} ended {state.name}")  # pragma: no cover - result raised
    output: StageOutput = state.result()
    report = StageReport.of(output, backend.usd_per_chip_hour)
    page.ended(stage, output, report)
    if run.spend is not None and stage not in ("image", "infra"):  # the estimate's stages
        record_metered(run.spend, storage_for(run.spend.root), report)
    return output


def _ledger_failed(run: PreparedRun, stage: str | None) -> None:
    """A stage that ended without a result (None: the run failed outside any stage): its
    metered spend, and $0 for the stages the run now never starts, into the team's ledger.
    A ledger that cannot be written must not hide the run's own failure: a warning."""
    if run.spend is None:
        return
    try:
        if stage is None:
            settle(run.spend, storage_for(run.spend.root))
            return
        record_failed(run.spend, storage_for(run.spend.root), stage,
                      run.backend.usd_per_chip_hour)
    except Exception as exc:
        get_run_logger().warning("the spend of %s could not be written to team %s's "
                                 "ledger under %s (its estimates keep counting): %s",
                                 f"stage {stage}" if stage else "the stages not started",
                                 run.spend.team.name, run.spend.root, exc)


def _artifacts(outputs: Mapping[str, StageOutput]) -> dict[str, str]:
    """The run's three model artifacts, as the result and the promotion name them."""
    return {"maxtext_checkpoint": outputs["convert"].uris["maxtext_checkpoint"],
            "trained_checkpoint": outputs["train"].uris["actor_checkpoint"],
            "hf_export": outputs["export"].uris["hf_export"]}


def finish(run: PreparedRun, ran: RanStages) -> PipelineResult:
    """The result: built from the stages' outputs, kept beside them, reported to the
    profile's trackers (never raising) and shown on the run page."""
    cfg, backend, outputs = run.cfg, run.backend, ran.outputs
    price = backend.usd_per_chip_hour
    trained, exported = outputs["train"], outputs["export"]
    chip_hours = sum(o.chip_hours for o in outputs.values())
    result = PipelineResult(
        profile=cfg.name, backend=cfg.backend, artifacts=_artifacts(outputs),
        evaluation=ran.evaluation, tensorboard_logdir=trained.uris.get("run_dir"),
        # what the training's record says it trained with (a skip's record from before
        # recipes were recorded: the profile's, which the train key matched)
        recipe=trained.details.get("recipe") or recipe_summary(cfg),
        stages=[StageReport.of(o, price) for o in outputs.values()],
        chip_hours=chip_hours, usd=round(chip_hours * price, 2),
        metrics=trained.details.get("metrics", {}), health=ran.health,
        throughput=run_throughput(cfg, trained.details.get("metrics", {}), price),
        wall_s=time.monotonic() - run.started, lock_wait_s=ran.lock_wait_s,
        started_at=run.started_at,
        finished_at=datetime.now(UTC).isoformat())
    logger = get_run_logger()
    if line := line_of(result.throughput):
        logger.info("throughput: %s", line)
    try:
        persist_result(backend.storage, cfg, flow_run.name or "run", result)
    except OSError as exc:  # a full or read-only root: the storage error, not a traceback
        if (failure := storage_failure("result", exc, None)) is None:
            raise
        logger.error("result: %s (%s)", failure.diagnosis.summary, failure.diagnosis.fix)
        raise failure from exc
    facts = RunFacts(flow_run.name or "run", str(flow_run.id or flow_run.name), {
        "tpurl.deployment": deployment.name or "local runs",
        "tpurl.dataset": dataset_of(cfg, backend.runtime.dataset_uri()),
        "tpurl.revision": cfg.model.hf_revision,
        "tpurl.image": outputs["image"].uris.get("image", ""),
        "tpurl.key": exported.key, "tpurl.train_key": trained.key})
    if where := report_run(cfg, result, facts, logger.warning):  # never raises: it reports
        result.tracking = where
        persist_result(backend.storage, cfg, flow_run.name or "run", result)
    publish_result(result)
    if run.spend is not None:  # the team's view and this run's line of its month
        publish_team_view(run.spend.team, run.spend.month, cfg, run.spend.run, result.usd)
    # a GKE run's TPU nodes are charged while they live, by watches kept after each stage;
    # the run ends them now, saying which nodes still exist (still billed until removed)
    end_background_watches()
    return result


def _judge(cfg: Profile, backend: Backend, evaluated: StageOutput, artifacts: dict[str, str],
           record: RunAnnouncement | None, trained: StageOutput,
           health: list[dict[str, Any]]) -> dict[str, Any]:
    """The promotion decision for this run's scores: pointer, events, run-page table. The
    held-out score joins the training sentinel's findings first (``health`` grows by the
    held-out detector's), and a pass with a holding finding is held."""
    details = evaluated.details
    run = flow_run.name or "run"
    rule = cfg.promotion_rule
    gain = sentinel.heldout_gain(details, rule.metric) if rule is not None else None
    steps = trained.details.get("metrics", {}).get("steps", [])
    late = [f for f in sentinel.after_training(steps, cfg.health, gain)
            if f["detector"] not in {h["detector"] for h in health}]
    sentinel.announce(cfg.name, run, late, get_run_logger().warning)
    health.extend(late)
    judged_against = read_promoted(backend.storage, cfg)  # before the pointer may move
    decision, promoted = promote_or_reject(backend.storage, cfg, run, details, artifacts,
                                           backend.runtime.dataset_uri(), evaluated.key,
                                           score_key(cfg), sentinel.holding(health))
    logger = get_run_logger()
    logger.info("%s: %s", "promoted" if decision.promoted else
                "held" if decision.held else "rejected", decision.reason)
    for note in decision.notes:
        logger.info("promotion: %s", note)
    emit_decision(cfg.name, decision, details, promoted, record.summary() if record else None)
    recipe = scored_recipe(details, cfg)
    publish_promotion(cfg.name, comparison_rows(details, judged_against, decision, recipe),
                      history_rows(read_history(backend.storage, cfg)))
    registered = None if decision.unchanged else register_judged(
        cfg, judged_model(cfg, run, str(flow_run.id or run), decision, details, artifacts,
                          promoted if decision.promoted else None,
                          backend.runtime.dataset_uri()), backend.storage, logger.warning)
    return {"trained": details["trained"], "base": details["base"], "recipe": recipe,
            "decision": decision.model_dump(),
            "promoted_model": promoted.model_uri if promoted else None,
            **({"registered": registered} if registered else {})}
