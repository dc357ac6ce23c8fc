"""Every ``tpurl.*`` event, named once: its resource, its payload keys and when it fires.

Automations, other deployments and people match on these names and keys, so they are stable
API (never renamed). The modules that emit an event take its name from here and pass its
payload through :meth:`EventKind.checked`, so a payload that gains or loses a key without
this catalogue saying so fails in the tests instead of surprising an automation; the events
reference page (docs/reference/events.md) is rendered from this module.
Prefect adds the flow run (and task run) that emitted an event as related resources.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class EventPayloadError(ValueError):
    """A payload whose keys differ from its event's catalogue entry: a bug of ours."""


@dataclass(frozen=True)
class EventKind:
    name: str
    resource: str
    """The ``prefect.resource.id``, with ``<placeholders>`` for its parts."""
    labels: tuple[str, ...]
    """The resource's labels beside its id and name (what a trigger's ``match`` can select)."""
    required: tuple[str, ...]
    """Payload keys every such event carries."""
    optional: tuple[str, ...]
    """Payload keys present only in some cases (the ``when`` text says which)."""
    emitter: str
    """The module that emits it (or, for an announcement, the CLI that posts it)."""
    when: str

    def checked(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """``payload`` as a dict, after checking its keys against this entry."""
        keys = set(payload)
        missing = [key for key in self.required if key not in keys]
        unknown = sorted(keys - set(self.required) - set(self.optional))
        if missing or unknown:
            raise EventPayloadError(
                f"{self.name}: payload keys differ from flows/common/event_catalogue.py "
                f"(missing {missing}, not catalogued {unknown}); fix: change the emitter or "
                "the catalogue entry, then `python -m reference`")
        return dict(payload)


_STAGE = "tpurl.stage.<profile>.<stage>"
_STAGE_LABELS = ("tpurl.profile", "tpurl.stage")
_STAGE_EMITTER = "flows/pipeline.py"
_ANNOUNCEMENT = "tpurl.announcement.<announced event id>"
_ANNOUNCEMENT_LABELS = ("tpurl.kind", "tpurl.value", "tpurl.profile")
_ANNOUNCED = ("kind", "value", "event_id", "occurred")
_DISPATCHER = "flows/announcements/dispatch.py"

STAGE_STARTED = EventKind(
    "tpurl.stage.started", _STAGE, _STAGE_LABELS, (), (), _STAGE_EMITTER,
    "A stage's task starts, before it decides whether to skip.")
STAGE_COMPLETED = EventKind(
    "tpurl.stage.completed", _STAGE, _STAGE_LABELS, ("uris", "duration_s"), (), _STAGE_EMITTER,
    "A stage ran and its output was verified; `uris` names its outputs.")
STAGE_SKIPPED = EventKind(
    "tpurl.stage.skipped", _STAGE, _STAGE_LABELS, ("uris", "duration_s"), (), _STAGE_EMITTER,
    "A stage's verified output with matching lineage was already there; nothing ran.")
STAGE_FAILED = EventKind(
    "tpurl.stage.failed", _STAGE, _STAGE_LABELS, ("category", "code", "summary", "fix", "log"),
    (), _STAGE_EMITTER,
    "A stage failed, once per attempt: match a cause on `code` (docs/reference/failures.md), "
    "never on the words of `summary`; `log` is the kept log's URI, or empty.")
STAGE_CANCELLED = EventKind(
    "tpurl.stage.cancelled", _STAGE, _STAGE_LABELS, ("reason", "duration_s"), (), _STAGE_EMITTER,
    "A user cancelled the run while this stage ran; its program was stopped.")
RUN_STARTED = EventKind(
    "tpurl.run.started", "tpurl.run.<profile>", ("tpurl.profile",), ("announcement",), (),
    "flows/pipeline.py",
    "The profile was validated and the run begins; `announcement` is what the run serves and "
    "what was coalesced into it, null when nobody announced it.")
RUN_FAILED = EventKind(
    "tpurl.run.failed", "tpurl.run.<profile>", ("tpurl.profile",),
    ("stage", "category", "code", "summary", "fix", "log", "run", "url", "support_bundle"), (),
    "flows/flow_runs/failure_event.py",
    "A run ended Failed (the flow's on_failure hook), once per run: the diagnosis of the "
    "stage that failed (`stage` empty when it failed before any stage), the run's name and "
    "page, and the support-bundle command. A spend cap is category `budget`. Crashed and "
    "cancelled runs run no hook.")
CAPACITY_FALLBACK = EventKind(
    "tpurl.capacity.fallback", _STAGE, _STAGE_LABELS,
    ("from_mode", "to_mode", "reason", "code", "attempts"), (),
    "flows/backends/gke/capacity_run.py",
    "A GKE stage spent a capacity mode's wait (a stockout in every zone, or the queue "
    "budget) and resubmits the same training in the next mode of `gke.capacity`; "
    "`attempts` lists each mode's mode, zone, waited_s, held_s, chip_hours, usd and outcome.")
TRAIN_SUSPECT = EventKind(
    "tpurl.train.suspect", "tpurl.train.<profile>", ("tpurl.profile", "tpurl.detector"),
    ("detector", "step", "summary", "figures", "excerpt", "policy", "run"), ("spend_saved",),
    "flows/health/sentinel.py",
    "A training-health detector fired (docs/reference/detectors.md): `detector` at TensorBoard "
    "step `step`, `summary` in one sentence, `figures` the numbers it judged, `excerpt` the "
    "curve up to the step (its tags per step), `policy` what the profile's `health:` section "
    "makes of it (warn, hold: the promotion waits for `tpurl promote --clear`, stop: the GKE "
    "training's JobSet is deleted, checkpoints kept) and `run` the flow run. Once per "
    "detector and run; `spend_saved` (USD, the training's estimate not spent) when it "
    "stopped one.")
MODEL_EXPORTED = EventKind(
    "tpurl.model.exported", "tpurl.model.<profile>", ("tpurl.profile",),
    ("hf_export", "trained_checkpoint"), ("announcement",), "flows/pipeline.py",
    "The export stage ended (ran or skipped), before evaluation: chain a copy or a serving "
    "step on it. `announcement` when the run serves one.")
MODEL_PROMOTED = EventKind(
    "tpurl.model.promoted", "tpurl.model.<profile>", ("tpurl.profile",),
    ("decision", "scores", "model_uri", "run", "dataset", "revision"),
    ("announcement", "clearance"), "flows/runpage/promotion.py",
    "Evaluation passed the promotion rule and the promoted pointer now names this run's "
    "export. An unchanged rerun of the promoted model emits nothing. A held run cleared by "
    "`tpurl promote --clear` emits it then, with `clearance` (who, when, why, which "
    "detectors held it).")
MODEL_REJECTED = EventKind(
    "tpurl.model.rejected", "tpurl.model.<profile>", ("tpurl.profile",), ("decision", "scores"),
    ("announcement",), "flows/runpage/promotion.py",
    "Evaluation did not pass the promotion rule, or passed while the training sentinel held "
    "it (`decision.held` true: `tpurl promote --clear` promotes it later); the export is "
    "kept, the pointer left alone.")
MODEL_ROLLED_BACK = EventKind(
    "tpurl.model.rolled-back", "tpurl.model.<profile>", ("tpurl.profile",),
    ("from_run", "to_run", "model_uri", "by", "verified", "reason", "at"), ("mlflow_version",),
    "flows/operations/rollback.py",
    "`tpurl rollback` or the rollback flow made an earlier promoted model the champion again: "
    "the pointer names run `to_run`'s export `model_uri` (before: run `from_run`), a rollback "
    "entry was appended to promoted-history.json with who (`by`), how that is known "
    "(`verified`: the OS account that ran the command, a name given with --by and not "
    "checked, or the flow run's creator as Prefect recorded it, `unknown` when it recorded "
    "none), when (`at`, ISO 8601 UTC) and why (`reason`); `mlflow_version` is the version the "
    "MLflow alias champion now names, when the profile registers in MLflow.")
MODEL_REGRESSED = EventKind(
    "tpurl.model.regressed", "tpurl.model.<profile>", ("tpurl.profile",), ("run", "reason"),
    ("source", "metric", "value", "evidence"), "flows/operations/watch.py",
    "Posted by a watch (`tpurl watch` or a watch deployment) only when the champion's new "
    "score dropped significantly, or announced by any other emitter (a failed serving "
    "canary): the champion of run `run` regressed, `reason` saying how; "
    "`source` names the emitter, `metric` and `value` the measurement when there is one; a "
    "watch adds `evidence`: the watched set, the scores with their intervals, the reference "
    "and where it came from, the watch's number, z and threshold, the share of alpha it "
    "spent, sample outputs (up to three of the champion's responses, each with its prompt "
    "and summed reward, shortened and redacted), the watch's flow run and when. "
    "The resource is the profile's model, id `tpurl.model.<profile>` with the label "
    "`tpurl.profile`, both naming the profile whose champion regressed. The shipped rollback "
    "automation (disabled) runs that profile's rollback deployment on it, and the rollback "
    "flow rolls back only when the resource is its deployment's own profile's and `run` is "
    "that profile's champion now: an empty or missing `run`, another run, or another "
    "profile's model changes nothing (the flow run fails naming `regressed_run` or "
    "`event_resource`). Post one event per regression: each rolls back one promotion.")
SERVING_REGRESSED = EventKind(
    "tpurl.serving.regressed", "tpurl.serving.<profile>", ("tpurl.profile",),
    ("run", "reason", "served"), ("source", "metric", "value", "evidence"),
    "flows/operations/watch.py",
    "Posted by a watch whose profile names a serving canary (`watch.canary`) only when the "
    "served model's score on the watched set's first prompts dropped significantly below "
    "the champion's recorded score: the endpoint serves something worse than the champion "
    "of run `run` (`served`: the model and endpoint), `reason` saying how, `evidence` as "
    "`tpurl.model.regressed`'s with `source` canary and up to three of the served model's "
    "responses. Its resource is `tpurl.serving.<profile>`, not the model: no shipped "
    "automation rolls back on it (the registry's champion may be sound; the serving is "
    "what to fix), and the `serving-regressed` message announces it.")
DATASET_UPDATED = EventKind(
    "tpurl.dataset.updated", "tpurl.dataset.<name>", ("tpurl.profile",), ("uri",), (),
    "flows/announcements/announce.py",
    "Announced (by `tpurl announce --dataset`, a webhook or any emitter): a new dataset "
    "version for the target labelled `tpurl.profile`. Its dispatcher's trigger fires on it.")
BASE_MODEL_UPDATED = EventKind(
    "tpurl.base-model.updated", "tpurl.base-model.<name>", ("tpurl.profile",), ("revision",),
    (), "flows/announcements/announce.py",
    "Announced (by `tpurl announce --revision` or any emitter): a new base-model revision, a "
    "full 40-hex commit, for the target labelled `tpurl.profile`.")
ANNOUNCEMENT_QUEUED = EventKind(
    "tpurl.announcement.queued", _ANNOUNCEMENT, _ANNOUNCEMENT_LABELS,
    (*_ANNOUNCED, "rule", "run", "run_name", "serves", "coalesced", "replaced_runs",
     "carried_from", "retried"), (), _DISPATCHER,
    "The dispatcher created a retrain run for it; `retried` lists the due announcements that "
    "run takes up, with the run that ended without training each.")
ANNOUNCEMENT_COALESCED = EventKind(
    "tpurl.announcement.coalesced", _ANNOUNCEMENT, _ANNOUNCEMENT_LABELS,
    (*_ANNOUNCED, "rule", "into_run", "into", "replaced_runs"), (), _DISPATCHER,
    "A waiting announcement was folded into a newer run (one event per folded announcement).")
ANNOUNCEMENT_SUPERSEDED = EventKind(
    "tpurl.announcement.superseded", _ANNOUNCEMENT, _ANNOUNCEMENT_LABELS,
    (*_ANNOUNCED, "rule", "by", "run", "trained"), (), _DISPATCHER,
    "A newer announcement of its kind was trained, or is held by a waiting or running run; "
    "no run.")
ANNOUNCEMENT_DUPLICATE = EventKind(
    "tpurl.announcement.duplicate", _ANNOUNCEMENT, _ANNOUNCEMENT_LABELS,
    (*_ANNOUNCED, "rule", "run"), (), _DISPATCHER,
    "The same announcement (its id, or its kind, value and occurred) is held or was trained; "
    "no run.")
ANNOUNCEMENT_DROPPED = EventKind(
    "tpurl.announcement.dropped", _ANNOUNCEMENT, _ANNOUNCEMENT_LABELS,
    (*_ANNOUNCED, "rule", "run"), (), _DISPATCHER,
    "The same announcement was given up by a user (`tpurl announcements drop`); no run.")

CATALOGUE: tuple[EventKind, ...] = (
    STAGE_STARTED, STAGE_COMPLETED, STAGE_SKIPPED, STAGE_FAILED, STAGE_CANCELLED, RUN_STARTED,
    RUN_FAILED, CAPACITY_FALLBACK, TRAIN_SUSPECT, MODEL_EXPORTED, MODEL_PROMOTED, MODEL_REJECTED,
    MODEL_ROLLED_BACK, MODEL_REGRESSED, SERVING_REGRESSED,
    DATASET_UPDATED, BASE_MODEL_UPDATED,
    ANNOUNCEMENT_QUEUED, ANNOUNCEMENT_COALESCED, ANNOUNCEMENT_SUPERSEDED,
    ANNOUNCEMENT_DUPLICATE, ANNOUNCEMENT_DROPPED)
BY_NAME: dict[str, EventKind] = {kind.name: kind for kind in CATALOGUE}


def stage_kind(status: str) -> EventKind:
    """``tpurl.stage.<status>``'s entry (started|completed|skipped|failed|cancelled)."""
    return BY_NAME[f"tpurl.stage.{status}"]


def announcement_kind(decision: str) -> EventKind:
    """``tpurl.announcement.<decision>``'s entry (queued|coalesced|superseded|duplicate|
    dropped)."""
    return BY_NAME[f"tpurl.announcement.{decision}"]
