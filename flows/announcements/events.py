"""Events of the dispatcher: one per decision, ``tpurl.announcement.queued|coalesced|
superseded|duplicate|dropped``, so an automation or a person can see what became of every
announcement. Names and payload keys are in flows/common/event_catalogue.py (stable API);
every payload names the ``rule`` that applied (flows/announcements/decide.py).

The resource is the announcement (``tpurl.announcement.<event id>``, labelled with the
target's ``tpurl.profile``); related resources are
the target deployment and the runs concerned (roles ``queued-run``, ``coalesced-run``,
``serving-run``). Prefect adds the dispatcher's own flow run.
"""

from __future__ import annotations

from typing import Any

from prefect.events import emit_event

from flows.announcements.model import Announcement
from flows.common.event_catalogue import announcement_kind


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
    kind = announcement_kind(decision)
    emit_event(event=kind.name, resource=_resource(item, profile),
               related=_related(deployment[0], deployment[1], runs or []),
               payload=kind.checked({**item.to_dict(), **payload}))
