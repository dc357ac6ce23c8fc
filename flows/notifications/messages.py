"""What each notification says and which events send it: the automations' specs, pure.

One automation per event kind and profile, named ``tpurl-notify <profile>: <kind>``: the
name is how a redeploy finds it again to update it in place (flows/notifications/apply.py).
Each trigger matches the profile's own resource and label, so a profile's messages never fire
on another profile's runs, whichever deployment of it ran. The subject and body are Jinja
templates the server renders when the event arrives (Prefect 3.9.1's ``send-notification``
action, prefect/server/events/actions.py ``SendNotification``: ``event`` is the triggering
event; undefined names render empty, prefect/server/utilities/user_templates.py uses
``ChainableUndefined``). They read only the event's payload, which the flow has already
redacted; the block's secret never enters a template.

Events (names are the flows' stable API):
- run-failed: ``tpurl.run.failed`` (flows/flow_runs/failure_event.py), one per failed run; a spend cap
  reached is this event with category ``budget`` and says so in its subject;
- model-decided: ``tpurl.model.promoted`` / ``tpurl.model.rejected``
  (flows/runpage/promotion.py), the scores of the trained model, its base and the champion;
- capacity-fallback: ``tpurl.capacity.fallback`` (emitted by the train stage's capacity
  chain), its payload's fields as they come;
- model-rolled-back: ``tpurl.model.rolled-back`` (flows/operations/rollback.py), who rolled
  back and how that is known, from which run to which, and why;
- train-suspect: ``tpurl.train.suspect`` (flows/health/sentinel.py), a training-health
  detector's finding, its policy and figures;
- retrain-coalesced: ``tpurl.announcement.coalesced`` (flows/announcements/events.py), one
  per announcement folded into a newer waiting run;
- model-regressed: ``tpurl.model.regressed`` (a watch, flows/operations/watch.py, or any
  emitter), the champion's run, the reason and, from a watch, its evidence;
- retrain-queued: ``tpurl.announcement.queued`` (flows/announcements/events.py), the retrain
  run the dispatcher created and what it serves;
- serving-regressed: ``tpurl.serving.regressed`` (a watch's serving canary,
  flows/operations/watch.py), the served model and endpoint, the reason and the evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flows.common.event_catalogue import (
    ANNOUNCEMENT_COALESCED,
    ANNOUNCEMENT_QUEUED,
    CAPACITY_FALLBACK,
    MODEL_PROMOTED,
    MODEL_REGRESSED,
    MODEL_REJECTED,
    MODEL_ROLLED_BACK,
    RUN_FAILED,
    SERVING_REGRESSED,
    TRAIN_SUSPECT,
)
from flows.config.notify import NotifyEvent

NAME_PREFIX = "tpurl-notify"
TAG = "tpurl-notify"

_PROFILE = "{{ event.resource['tpurl.profile'] }}"

RUN_FAILED_SUBJECT = (
    "tpurl " + _PROFILE + ": {% if event.payload.category == 'budget' %}spend cap reached"
    "{% else %}run failed{% endif %} [{{ event.payload.category }}"
    "{% if event.payload.code %} {{ event.payload.code }}{% endif %}]")
RUN_FAILED_BODY = """\
Run {{ event.payload.run }} of profile """ + _PROFILE + """ failed\
{% if event.payload.stage %} in stage {{ event.payload.stage }}{% endif %}.
[{{ event.payload.category }}{% if event.payload.code %} {{ event.payload.code }}{% endif %}] \
{{ event.payload.summary }}
Fix: {{ event.payload.fix }}
Support bundle: {{ event.payload.support_bundle }}
{% if event.payload.log %}Stage log: {{ event.payload.log }}
{% endif %}Run: {{ event.payload.url }}"""

def _score(expr: str) -> str:
    """A score to four places (Jinja's ``format`` filter is Python's ``%``)."""
    return "{{ '%.4f' | format(" + expr + ") }}"


MODEL_SUBJECT = ("tpurl " + _PROFILE + ": model {% if event.event == '" +
                 MODEL_PROMOTED.name + "' %}"
                 "promoted{% elif event.payload.decision.held %}held for review"
                 "{% else %}rejected{% endif %}")
MODEL_BODY = ("{% set d = event.payload.decision %}{% set s = event.payload.scores %}"
              "{% set run = event.payload.run or flow_run.name %}"
              "Model {% if run %}of run {{ run }} {% endif %}"
              "{% if event.event == '" + MODEL_PROMOTED.name + "' %}promoted"
              "{% elif d.held %}held for review (it passed){% else %}rejected"
              "{% endif %}: {{ d.reason }}\n"
              "{{ d.metric }}: trained " + _score("s.trained[d.metric].value") +
              ", base " + _score("s.base[d.metric].value") +
              ", champion {% if d.reference_kind == 'promoted' %}" + _score("d.reference") +
              "{% if d.reference_run %} (run {{ d.reference_run }}){% endif %}"
              "{% else %}none yet (judged against the base){% endif %}\n"
              "delta " + _score("d.delta") + " (needed " + _score("d.min_delta") +
              ", basis {{ d.basis }})\n"
              "{% if event.payload.model_uri %}Model: {{ event.payload.model_uri }}\n{% endif %}"
              "{% for note in d.notes %}Note: {{ note }}\n{% endfor %}")

FALLBACK_SUBJECT = "tpurl " + _PROFILE + ": capacity fallback"
FALLBACK_BODY = ("The run's capacity chain fell back" + " for profile " + _PROFILE + ".\n"
                 "{% for key, value in event.payload.items() %}{{ key }}: {{ value }}\n"
                 "{% endfor %}")

COALESCED_SUBJECT = "tpurl " + _PROFILE + ": retrain coalesced"
COALESCED_BODY = ("Announcement {{ event.payload.kind }} {{ event.payload.value }} (occurred "
                  "{{ event.payload.occurred }}) was coalesced into the waiting retrain run "
                  "{{ event.payload.into_run }}, which serves {{ event.payload.into.kind }} "
                  "{{ event.payload.into.value }}: it will be trained by that run, not by a "
                  "run of its own.\n"
                  "{% if event.payload.replaced_runs %}Cancelled waiting runs: "
                  "{{ event.payload.replaced_runs | join(', ') }}\n{% endif %}")

ROLLED_BACK_SUBJECT = "tpurl " + _PROFILE + ": model rolled back to run {{ event.payload.to_run }}"
ROLLED_BACK_BODY = ("{{ event.payload.by }} rolled the champion of " + _PROFILE + " back from "
                    "run {{ event.payload.from_run }} to run {{ event.payload.to_run }} at "
                    "{{ event.payload.at }}.\nWho: {{ event.payload.by }}, known from "
                    "{{ event.payload.verified or 'nothing recorded' }}\n"
                    "Reason: {{ event.payload.reason }}\n"
                    "Model: {{ event.payload.model_uri }}\n"
                    "{% if event.payload.mlflow_version %}MLflow champion: version "
                    "{{ event.payload.mlflow_version }}\n{% endif %}")

REGRESSED_SUBJECT = ("tpurl " + _PROFILE + ": champion run {{ event.payload.run }} regressed")
REGRESSED_BODY = ("{% set e = event.payload.evidence %}"
                  "The champion of " + _PROFILE + " (run {{ event.payload.run }}) regressed: "
                  "{{ event.payload.reason }}\n"
                  "{% if e %}Set: {{ e.set }}\nReference: {{ e.reference_source }}\n"
                  "Watch {{ e.watch_number }}: z {{ '%.2f' | format(e.z) }} > threshold "
                  "{{ '%.2f' | format(e.threshold) }}\n"
                  "{% for q in e.samples %}{% if q is mapping %}Sample: {{ q.prompt }}\n"
                  "{% if q.response %}  Response: {{ q.response }}\n{% endif %}"
                  "{% if q.reward is not none %}  Reward: {{ q.reward }}\n{% endif %}"
                  "{% else %}Sample: {{ q }}\n{% endif %}{% endfor %}"
                  "{% if e.watch_run %}Watch run: {{ e.watch_run }}\n{% endif %}{% endif %}"
                  "Where the rollback trigger is enabled, the model promoted before it is "
                  "restored next.\n")
SERVING_SUBJECT = ("tpurl " + _PROFILE + ": the served model scores below champion run "
                   "{{ event.payload.run }}")
SERVING_BODY = ("{% set e = event.payload.evidence %}"
                "The serving canary of " + _PROFILE + " ({{ event.payload.served }}) scored "
                "below the champion (run {{ event.payload.run }}): {{ event.payload.reason }}\n"
                "{% if e %}Set: {{ e.set }}\nReference: {{ e.reference_source }}\n"
                "Canary {{ e.watch_number }}: z {{ '%.2f' | format(e.z) }} > threshold "
                "{{ '%.2f' | format(e.threshold) }}\n"
                "{% for q in e.samples %}Sample: {{ q.prompt }}\n"
                "{% if q.response %}  Response: {{ q.response }}\n{% endif %}"
                "{% if q.reward is not none %}  Reward: {{ q.reward }}\n{% endif %}"
                "{% endfor %}"
                "{% if e.watch_run %}Watch run: {{ e.watch_run }}\n{% endif %}{% endif %}"
                "Nothing is rolled back: check what the endpoint serves against the "
                "champion's export.\n")

QUEUED_SUBJECT = "tpurl " + _PROFILE + ": retrain queued ({{ event.payload.run_name }})"
QUEUED_BODY = ("The dispatcher queued retrain run {{ event.payload.run_name }} for "
               "{{ event.payload.kind }} {{ event.payload.value }} (occurred "
               "{{ event.payload.occurred }}).\n"
               "{% set s = event.payload.serves %}"
               "{% if s.dataset %}Dataset: {{ s.dataset }}\n{% endif %}"
               "{% if s['base-model'] %}Base-model revision: {{ s['base-model'] }}\n{% endif %}")


SUSPECT_SUBJECT = ("tpurl " + _PROFILE + ": training suspect ({{ event.payload.detector }}, "
                   "{{ event.payload.policy }})")
SUSPECT_BODY = ("Run {{ event.payload.run }} of profile " + _PROFILE + ": detector "
                "{{ event.payload.detector }} fired at step {{ event.payload.step }}.\n"
                "{{ event.payload.summary }}\n"
                "Policy: {{ event.payload.policy }}"
                "{% if event.payload.policy == 'hold' %} (the promotion waits for "
                "`tpurl promote " + _PROFILE + " --clear {{ event.payload.run }} --reason ...`)"
                "{% elif event.payload.policy == 'stop' %} (the training was stopped, its "
                "checkpoints kept){% endif %}\n"
                "{% for key, value in event.payload.figures.items() %}{{ key }}: {{ value }}\n"
                "{% endfor %}"
                "{% if event.payload.spend_saved %}Spend saved: ${{ event.payload.spend_saved }}"
                "\n{% endif %}What to do: docs/how-to/held-run.md")


@dataclass(frozen=True)
class Kind:
    title: str
    resource: str  # the prefect.resource.id pattern; {profile} filled in
    events: tuple[str, ...]
    subject: str
    body: str


KINDS: dict[NotifyEvent, Kind] = {
    "run-failed": Kind("run failed", "tpurl.run.{profile}", (RUN_FAILED.name,),
                       RUN_FAILED_SUBJECT, RUN_FAILED_BODY),
    "model-decided": Kind("model promoted or rejected", "tpurl.model.{profile}",
                          (MODEL_PROMOTED.name, MODEL_REJECTED.name),
                          MODEL_SUBJECT, MODEL_BODY),
    "capacity-fallback": Kind("capacity fallback", "tpurl.*", (CAPACITY_FALLBACK.name,),
                              FALLBACK_SUBJECT, FALLBACK_BODY),
    "retrain-coalesced": Kind("retrain coalesced", "tpurl.announcement.*",
                              (ANNOUNCEMENT_COALESCED.name,),
                              COALESCED_SUBJECT, COALESCED_BODY),
    "model-rolled-back": Kind("rollback of the champion", "tpurl.model.{profile}",
                              (MODEL_ROLLED_BACK.name,), ROLLED_BACK_SUBJECT,
                              ROLLED_BACK_BODY),
    "train-suspect": Kind("training-health finding", "tpurl.train.{profile}",
                          (TRAIN_SUSPECT.name,), SUSPECT_SUBJECT, SUSPECT_BODY),
    "model-regressed": Kind("regression of the champion", "tpurl.model.{profile}",
                            (MODEL_REGRESSED.name,), REGRESSED_SUBJECT, REGRESSED_BODY),
    "retrain-queued": Kind("retrain queued", "tpurl.announcement.*",
                           (ANNOUNCEMENT_QUEUED.name,), QUEUED_SUBJECT, QUEUED_BODY),
    "serving-regressed": Kind("regression of the served model", "tpurl.serving.{profile}",
                              (SERVING_REGRESSED.name,), SERVING_SUBJECT, SERVING_BODY),
}


def automation_name(profile: str, kind: NotifyEvent) -> str:
    return f"{NAME_PREFIX} {profile}: {kind}"


def automation_spec(profile: str, kind: NotifyEvent, block_id: str, block: str) -> dict[str, Any]:
    """The body of POST /automations (and of PUT /automations/{id}) for one kind."""
    k = KINDS[kind]
    return {
        "name": automation_name(profile, kind),
        "description": (f"Created by `prefect deploy` from profile {profile}'s notify: section "
                        f"(block {block}): one message per {k.title}. Redeploying updates it "
                        "in place; edits made here are overwritten then."),
        "enabled": True,
        "tags": [TAG, f"tpurl-profile:{profile}"],
        "trigger": {"type": "event", "posture": "Reactive",
                    "match": {"prefect.resource.id": k.resource.format(profile=profile),
                              "tpurl.profile": profile},
                    "expect": list(k.events), "threshold": 1, "within": 0},
        "actions": [{"type": "send-notification", "block_document_id": block_id,
                     "subject": k.subject, "body": k.body}],
    }
