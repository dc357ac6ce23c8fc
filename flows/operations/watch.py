"""`tpurl watch PROFILE`: score the champion again and post ``tpurl.model.regressed`` only
when its score dropped significantly.

One watch: the champion (the promoted pointer) is scored by the evaluation program that
promoted it (flows/core/eval_programs.py ``evaluate_workload``: the training's arguments and
reward functions, the profile's ``eval`` settings), on the profile's ``watch.files`` when
set, else on the promotion's held-out set; its checkpoint is the one its promotion recorded.
The scores go under the model's output root in ``watch/<run>/<stamp>``, never into the
evaluate stage's keyed directories. The new score is judged against a recorded one
(flows/core/watch_record.py) by the sequential test of flows/core/watch_decision.py; the
record is appended to watch-history.json, then, only for a regression, the event is posted
with its evidence. What the event sets off is the profile's automations': the rollback
deployment's trigger (prefect.yaml) and the notify automation.

With ``watch.canary``, the same evaluation also scores a serving endpoint's answers to the
set's first prompts (flows/core/canary.py): a second record (``source`` canary) judged by
the same test against the champion's reference, and on a significant drop
``tpurl.serving.regressed``, which no shipped automation rolls back on (decision 0042). A
canary that could not be scored is ``unreachable``: never a regression.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

from flows.backends import storage_for
from flows.common.event_catalogue import MODEL_REGRESSED, SERVING_REGRESSED
from flows.common.failure_codes import Failure
from flows.common.paths import path_part
from flows.config import ProfileError, load_profile
from flows.config.profile import Profile
from flows.core.backend import Backend
from flows.core.canary import (
    CANARY_FILE,
    canary_args,
    canary_secret_env,
    client_program_file,
    read_canary,
    served_name,
)
from flows.core.eval_programs import score_key
from flows.core.failures import user_error
from flows.core.layout import Layout
from flows.core.promotion import PromotedModel
from flows.core.promotion_store import read_history, read_promoted
from flows.core.rollback import RollbackRefused, choose_target, current_champion, model_resource
from flows.core.scores import Interval, ScoresFile, ScoreSummary, summarize
from flows.core.storage import Storage, join
from flows.core.team_origin import TeamAndOrigin
from flows.core.watch_decision import judge_watch
from flows.core.watch_record import CANARY, WatchRecord, WatchSample, choose_reference, watch_number
from flows.core.watch_samples import sample_outputs
from flows.core.watch_set import TeamRoot, watch_set_problem
from flows.core.watch_store import append_watch, read_watches
from flows.operations.rollback import post_event

SOURCE = "tpurl watch"
WATCH_STAGE = "watch"  # the stage name of its failures, its backend and its JobSet

# scores the champion on the watched set: (the profile with the set as its eval, the
# champion, the directory the scores go to) -> the program's scores file
type Scorer = Callable[[Profile, PromotedModel, str], ScoresFile]


_NOT_POSTED = "not posted (PROFILE has no Prefect API: PREFECT_API_URL unset)"


@dataclass(frozen=True)
class WatchOutcome:
    record: WatchRecord
    posted: bool  # the regressed event reached a Prefect API
    canary: WatchRecord | None = None  # the serving canary's, when the profile names one
    canary_posted: bool = False

    @property
    def regressed(self) -> bool:
        """Either source regressed (the command's exit 3)."""
        return self.record.verdict == "regressed" or (
            self.canary is not None and self.canary.verdict == "regressed")

    def lines(self) -> list[str]:
        r = self.record
        out = [f"watch {r.watch_number} of run {r.champion_run} on {r.set_name}: {r.verdict}",
               f"  {r.reason}"]
        if r.reference_source:
            out.append(f"  reference: {r.reference_source}")
        if r.verdict == "regressed":
            out.append(f"  event {MODEL_REGRESSED.name} "
                       + ("posted: the profile's rollback trigger, where enabled, restores "
                          "the model before it" if self.posted else _NOT_POSTED))
            out += _sample_lines(r.samples)
        if self.canary is not None:
            out += _canary_lines(self.canary, self.canary_posted)
        return out


def _sample_lines(samples: list[WatchSample]) -> list[str]:
    return [f"  sample: {_line(x.prompt)} -> {_line(x.response) or '(not kept)'}"
            + ("" if x.reward is None else f" (reward {x.reward:g})") for x in samples]


def _canary_lines(c: WatchRecord, posted: bool) -> list[str]:
    number = "" if c.verdict == "unreachable" else f" {c.watch_number}"
    out = [f"canary{number} of served {c.served} on {c.set_name}: {c.verdict}", f"  {c.reason}"]
    if c.reference_source:
        out.append(f"  reference: {c.reference_source}")
    if c.verdict == "regressed":
        out.append(f"  event {SERVING_REGRESSED.name} "
                   + ("posted: the endpoint serves worse than the champion; nothing is "
                      "rolled back (redeploy the champion's export there)" if posted
                      else _NOT_POSTED))
        out += _sample_lines(c.samples)
    return out


def _line(text: str, limit: int = 80) -> str:
    """A sample on one terminal line (the record keeps it whole)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 2] + " …"


def watched_profile(profile: Profile) -> tuple[Profile, str]:
    """The profile as the watch scores with it (its eval reading ``watch.files`` when set),
    and the set's name for people."""
    assert profile.eval is not None and profile.watch is not None
    watch = profile.watch
    if not watch.files:
        return profile, "the promotion's held-out set"
    ev = profile.eval.model_copy(update={"files": watch.files,
                                         "dataset_name": watch.dataset_name,
                                         "split": watch.split})
    return profile.model_copy(update={"eval": ev}), f"watch.files {watch.files}"


def team_roots() -> list[TeamRoot]:
    """Every teams-file profile's output root with its team; a profile that does not load
    here (its project or bucket given elsewhere) cannot be told, so it is left out."""
    from flows.config.teams import load_teams

    teams = load_teams()
    out = []
    for team in teams.teams.values():
        for name in team.profiles:
            try:
                root = load_profile(name).section.output_root()
            except ProfileError:
                continue
            out.append(TeamRoot(name, team.name, root))
    return out


def check_watch_set(profile: Profile) -> None:
    """Refuse ``watch.files`` that is not the team's to read or not scoreable, before the
    watch scores or writes anything (flows/core/watch_set.py)."""
    from flows.config.teams import load_teams
    from flows.core.dataset import dataset_uri

    files = profile.watch.files if profile.watch else None
    if not files or urlparse(dataset_uri(files)).scheme == "hf":
        return  # a hub set is read by MaxText in the pod
    team = load_teams().team_of(profile.name)
    found = watch_set_problem(storage_for(dataset_uri(files).split("*", 1)[0]), files,
                              team.name if team else None, team_roots)
    if found is not None:
        raise user_error("watch", f"watch.files: {found.problem}", f"    watch.files={files}",
                         found.fix, code=found.code)


def _previous(history: list[PromotedModel], champion: PromotedModel) -> PromotedModel | None:
    """The model a rollback would restore now (None when there is none)."""
    try:
        return choose_target(history, champion, None)
    except RollbackRefused:
        return None


def run_watch(storage: Storage, profile: Profile, scorer: Scorer, *, at: str | None = None,
              flow_run: str = "") -> WatchOutcome:
    """One watch: score, judge, record, and post the event on a regression."""
    if profile.watch is None or profile.promotion_rule is None:
        raise user_error("watch", "the profile has no watch section", profile.name,
                         "add `watch: {}` (and eval:) to the profile (docs/how-to/watch.md)",
                         code=Failure.EVAL_NO_WATCH)
    history = read_history(storage, profile)
    try:
        champion = current_champion(history, read_promoted(storage, profile))
    except RollbackRefused:
        raise user_error("watch", "nothing is promoted, so there is no champion to watch",
                         profile.name, "promote a model first (a run with eval:, "
                         "docs/how-to/evaluation.md)", code=Failure.EVAL_NO_CHAMPION) from None
    check_watch_set(profile)
    stamp = at or datetime.now(UTC).isoformat()
    scoring, set_name = watched_profile(profile)
    set_key = score_key(scoring)
    metric = profile.promotion_rule.metric
    out = join(Layout(profile).model_root, "watch", path_part(champion.run),
               stamp.replace(":", "").replace("+", "Z"))
    scores = scorer(scoring, champion, out)
    if scores.total <= 0 or scores.overlap:
        raise user_error("watch", f"the watch scored {scores.total} held-out rows "
                         f"({scores.overlap} overlapping the training)", out,
                         "raise eval.batches, or set watch.files to rows the champion was "
                         "not trained on", code=Failure.EVAL_OVERLAP)
    summary = summarize(scores)
    records = read_watches(storage, profile)
    reference = choose_reference(champion, _previous(history, champion), records, set_key,
                                 metric)
    number = watch_number(records, champion.run, set_key)
    samples = sample_outputs(scores)
    common = WatchRecord(at=stamp, champion_run=champion.run, model_uri=champion.model_uri,
                         set_key=set_key, set_name=set_name, metric=metric, scores=summary,
                         samples=samples, flow_run=flow_run, watch_number=number,
                         verdict="baseline",
                         reason=f"{metric} {summary.metric(metric):.4f}: the first score of "
                                f"run {champion.run} on this set, kept as its reference")
    if reference is None:
        record = common
    else:
        decision = judge_watch(metric, reference.interval, getattr(summary, metric), number,
                               profile.watch.alpha, profile.watch.min_drop)
        record = common.model_copy(update={
            "verdict": decision.verdict, "reason": decision.reason,
            "reference": reference.interval, "reference_source": reference.source,
            "z": decision.z, "threshold": decision.threshold,
            "alpha_spent": decision.alpha_spent})
    append_watch(storage, profile, record)  # first: the event's evidence is on record
    posted = record.verdict == "regressed" and post_event(regressed_event(profile.name, record))
    canary = None
    canary_posted = False
    if profile.watch.canary is not None:
        canary = canary_record(storage, profile, champion, _previous(history, champion),
                               common, out)
        append_watch(storage, profile, canary)
        canary_posted = canary.verdict == "regressed" and post_event(
            serving_regressed_event(profile.name, canary))
    return WatchOutcome(record, posted, canary, canary_posted)


def canary_record(storage: Storage, profile: Profile, champion: PromotedModel,
                  previous: PromotedModel | None, checkpoint: WatchRecord,
                  out: str) -> WatchRecord:
    """The serving canary's record: its scores judged against the champion's reference on
    the set (with the checkpoint's record of this watch on file, so a first watch of a set
    of the team's own is the canary's reference), or ``unreachable``."""
    assert profile.watch is not None and profile.watch.canary is not None
    metric, set_key = checkpoint.metric, checkpoint.set_key
    uri = join(out, CANARY_FILE)
    result = read_canary(storage_for(uri).read_text(uri))
    base = checkpoint.model_copy(update={
        "source": CANARY, "served": served_name(profile.watch.canary), "samples": [],
        "reference": None, "reference_source": "", "z": 0.0, "threshold": 0.0,
        "alpha_spent": 0.0})
    if result.scores is None:  # nothing scored: no sample, and no number to read as one
        nothing = Interval(value=0.0, low=0.0, high=0.0)
        return base.model_copy(update={
            "verdict": "unreachable", "watch_number": 0,
            "scores": ScoreSummary(samples=0, accuracy=nothing, format_accuracy=nothing,
                                   mean_reward=nothing, reward_samples=0,
                                   checkpoint=base.served),
            "reason": f"canary unreachable, not judged: {result.unreachable}"})
    summary = summarize(result.scores)
    records = read_watches(storage, profile)  # the checkpoint's record of this watch in it
    reference = choose_reference(champion, previous, records, set_key, metric)
    assert reference is not None, "this watch's checkpoint record is a reference"
    number = watch_number(records, champion.run, set_key, CANARY)
    decision = judge_watch(metric, reference.interval, getattr(summary, metric), number,
                           profile.watch.alpha, profile.watch.min_drop)
    return base.model_copy(update={
        "scores": summary, "samples": sample_outputs(result.scores), "watch_number": number,
        "verdict": decision.verdict, "reason": decision.reason,
        "reference": reference.interval, "reference_source": reference.source,
        "z": decision.z, "threshold": decision.threshold, "alpha_spent": decision.alpha_spent})


def _evidence(record: WatchRecord) -> dict[str, Any]:
    """What a regressed event carries beside its reason: ``source`` says which was scored
    (checkpoint: the champion's; canary: the served model's, named by ``served``)."""
    return {"source": record.source, "served": record.served, "set": record.set_name,
            "set_key": record.set_key, "scores": record.scores.row(),
            "reference": record.reference.model_dump() if record.reference else None,
            "reference_source": record.reference_source,
            "watch_number": record.watch_number, "z": record.z,
            "threshold": record.threshold, "alpha_spent": record.alpha_spent,
            "samples": [s.model_dump() for s in record.samples],
            "watch_run": record.flow_run, "at": record.at}


def regressed_event(profile: str, record: WatchRecord) -> dict[str, Any]:
    """The event's body (POST /api/events): the rollback trigger reads ``run`` and ``reason``;
    the rest is the evidence, checked against the catalogue."""
    payload = {"run": record.champion_run, "reason": f"{SOURCE}: {record.reason}",
               "source": SOURCE, "metric": record.metric,
               "value": record.scores.metric(record.metric), "evidence": _evidence(record)}
    return {"id": str(uuid.uuid4()), "occurred": record.at, "event": MODEL_REGRESSED.name,
            "resource": {**model_resource(profile), "prefect.resource.name": f"{profile} model"},
            "payload": MODEL_REGRESSED.checked(payload)}


def serving_regressed_event(profile: str, record: WatchRecord) -> dict[str, Any]:
    """A regressed canary's event: on the profile's serving, not its model, so the rollback
    trigger (bound to ``tpurl.model.<profile>``) never fires on it."""
    payload = {"run": record.champion_run, "reason": f"{SOURCE} canary: {record.reason}",
               "served": record.served, "source": SOURCE, "metric": record.metric,
               "value": record.scores.metric(record.metric), "evidence": _evidence(record)}
    return {"id": str(uuid.uuid4()), "occurred": record.at, "event": SERVING_REGRESSED.name,
            "resource": {"prefect.resource.id": f"tpurl.serving.{profile}",
                         "prefect.resource.name": f"{profile} serving",
                         "tpurl.profile": profile},
            "payload": SERVING_REGRESSED.checked(payload)}


@dataclass(frozen=True)
class ProgramScorer:
    """The evaluation program on the champion's checkpoint, through the profile's backend
    (the rehearsal's processes, or a JobSet on the profile's cluster as the team's identity:
    the backend's options, decision 0027), as the evaluate stage runs it. ``backend``: how
    the backend is made (tests give one on a fake cluster)."""

    backend: Callable[[Profile], Backend] | None = None
    team_origin: TeamAndOrigin | None = None  # the watch run's (None: a command's)

    def __call__(self, scoring: Profile, champion: PromotedModel, out: str) -> ScoresFile:
        from flows.backends import backend_for
        from flows.core.eval_programs import SCORES_FILE, evaluate_workload
        from flows.core.scores import parse_scores

        backend = (self.backend or (lambda p: backend_for(
            p, stage=WATCH_STAGE, team_origin=self.team_origin)))(scoring)
        layout = Layout(scoring)
        workload = evaluate_workload(scoring, layout, backend.runtime, "trained",
                                     champion.trained_checkpoint, out=out,
                                     program_args=_canary_args(scoring, out))
        if scoring.watch is not None and scoring.watch.canary is not None:
            canary = scoring.watch.canary
            workload = replace(workload,
                               secret_env=(*workload.secret_env, *canary_secret_env(canary)),
                               files=(*workload.files, client_program_file()))
        backend.run_workload(workload, layout.log(out, workload.name))
        uri = join(out, SCORES_FILE)
        scores, problem = parse_scores(storage_for(uri).read_text(uri))
        if scores is None:
            raise user_error(WATCH_STAGE, "the watch's evaluation left no usable scores",
                             f"{uri}: {problem}", "read the log beside it and watch again")
        return scores


def _canary_args(profile: Profile, out: str) -> tuple[str, ...]:
    canary = profile.watch.canary if profile.watch else None
    return tuple(canary_args(canary, out)) if canary is not None else ()


program_scorer = ProgramScorer()


def watch_command(target: str, overrides: dict[str, str]) -> int:
    """Exit 0 the champion holds (or a baseline, or inconclusive, or the canary was
    unreachable), 3 regressed (the checkpoint or the canary), 2 refused."""
    from flows.core.failures import StageFailed

    try:
        profile = load_profile(target, overrides)
        storage = storage_for(profile.section.output_root())
        outcome = run_watch(storage, profile, program_scorer)
    except (ProfileError, StageFailed) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(outcome.lines()))
    return 3 if outcome.regressed else 0
