"""Events of the dispatcher: one per decision, so an automation or a person can see what
became of every announcement (stable names, never renamed):

- ``tpurl.announcement.queued``: a retrain run was created for it (payload: the run, what it
  serves, what was coalesced into it, the waiting runs it replaces, and ``retried``: the due
  announcements it takes up, with the run that ended without training each);
- ``tpurl.announcement.coalesced``: an announcement that was waiting was folded into a newer
  run (one event per folded announcement);
- ``tpurl.announcement.superseded``: a newer one of its kind was trained or is held by a
  waiting or running run (payload ``trained``); no run;
- ``tpurl.announcement.duplicate``: the same announcement (id, or kind, value and occurred)
  is held or was trained; no run;
- ``tpurl.announcement.dropped``: the same announcement was dropped by a user; no run.

Every payload names the ``rule`` that applied (flows/announcements/decide.py).

The resource is the announcement (``tpurl.announcement.<event id>``, labelled with the
target's ``tpurl.profile``); related resources are
the target deployment and the runs concerned (roles ``queued-run``, ``coalesced-run``,
``serving-run``). Prefect adds the dispatcher's own flow run.
"""

from __future__ import annotations

from typing import Any

from prefect.events import emit_event

from flows.announcements.model import Announcement

PREFIX = "tpurl.announcement."


def _resource(item: Announcement, profile: str) -> dict[str, str]:
    return {"prefect.resource.id": f"tpurl.announcement.{item.event_id}",
            "prefect.resource.name": f"{item.kind} {item.value}",
            "tpurl.kind": item.kind, "tpurl.value": item.value, "tpurl.profile": profile}


def _related(deployment_id: str, deployment_name: str,
             runs: list[tuple[str, str, str]]) -> list[dict[str, str]]:
    related = [{"prefect.resource.id": f"prefect.deployment.{deployment_id}",
                "prefect.resource.role": "deployment",
                "prefect.resource.name": deployment_name}]
    for run_id, run_name, role in runs:
        related.append({"prefect.resource.id": f"prefect.flow-run.{run_id}",
                        "prefect.resource.role": role, "prefect.resource.name": run_name})
    return related


def announcement_event(decision: str, item: Announcement, deployment: tuple[str, str],
                       payload: dict[str, Any],
                       runs: list[tuple[str, str, str]] | None = None, *,
                       profile: str) -> None:
    """``decision`` is queued|coalesced|superseded|duplicate|dropped; ``runs`` are
    (id, name, role); ``profile`` is the target's (the label notifications match on)."""
    emit_event(event=PREFIX + decision, resource=_resource(item, profile),
               related=_related(deployment[0], deployment[1], runs or []),
               payload={**item.to_dict(), **payload})
