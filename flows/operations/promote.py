"""`tpurl promote PROFILE --clear RUN --reason TEXT`: promote a run the training sentinel held.

A held run passed its promotion rule but a detector with policy ``hold`` (or ``stop``, seen
after the training) fired; its model waits in ``tpurl-results/<profile>/held/``
(flows/health/holds.py). A person who has read the findings (the run page, the
``tpurl.train.suspect`` events, `tpurl status`) clears it here: every check first
(flows/health/holds.py plan_clear), then the history and the pointer, then the event
``tpurl.model.promoted`` with the ``clearance`` (who, when, why, which detectors), which the
profile's notify automation sends on. A model registry's champion alias is not moved here:
a held run was registered as a version without it (docs/how-to/held-run.md says how to move
it by hand).
"""

from __future__ import annotations

import sys
from typing import Any

from flows.backends import storage_for
from flows.common.event_catalogue import MODEL_PROMOTED
from flows.config import ProfileError, load_profile
from flows.health.holds import HeldPromotion, HoldRefused, apply_clear, plan_clear
from flows.operations.rollback import command_creator, model_event, os_account, post_event


def cleared_event(profile: str, held: HeldPromotion) -> dict[str, Any]:
    """The event's body (POST /api/events), its payload checked against the catalogue."""
    assert held.cleared is not None
    model = held.candidate
    decision = {**held.decision, "promoted": True, "held": False}
    payload = {"decision": decision,
               "scores": {"trained": model.scores.model_dump(mode="json"),
                          "base": model.base_scores.model_dump(mode="json")},
               "model_uri": model.model_uri, "run": model.run, "dataset": model.dataset,
               "revision": model.revision,
               "clearance": held.cleared.model_dump(mode="json")}
    return model_event(profile, MODEL_PROMOTED, held.cleared.at, payload)


def clear_command(target: str, overrides: dict[str, str], run: str, reason: str,
                  by: str | None, dry_run: bool) -> int:
    """Exit 0 done (or the dry run printed), 2 refused before any change."""
    creator = command_creator(by, os_account(), "tpurl promote --clear")
    name, verified = creator.by, creator.verified
    try:
        profile = load_profile(target, overrides)
        storage = storage_for(profile.section.output_root())
        planned = plan_clear(storage, profile, run, reason, name, verified)
    except (ProfileError, HoldRefused) as exc:
        print(f"error: {exc}; nothing was changed", file=sys.stderr)
        return 2
    model = planned.candidate
    lines = [f"run {run}: {model.model_uri}",
             f"  held {planned.held_at} by " + ", ".join(planned.detectors),
             *[f"  step {f.get('step')}: {f.get('summary')}" for f in planned.findings],
             f"  passed its rule: {planned.reason}",
             f"cleared by {name} ({verified}): {reason}",
             "pointer and promoted-history.json: the run's entry appended with its clearance, "
             "the pointer names it",
             f"event {MODEL_PROMOTED.name} on the Prefect API"]
    if dry_run:
        print("\n".join(["dry run, nothing changed; clearing would promote:", *lines]))
        return 0
    try:
        apply_clear(storage, profile, planned)
    except HoldRefused as exc:
        print(f"error: {exc}; nothing was changed", file=sys.stderr)
        return 2
    print("\n".join(["promoted:", *lines]))
    if not post_event(cleared_event(profile.name, planned)):
        print(f"note: PREFECT_API_URL is not set, so no {MODEL_PROMOTED.name} event was sent "
              "(no notification either)", file=sys.stderr)
    return 0
