"""The retrain run's own check that it was not coalesced away while a worker was taking it.

The dispatcher cancels a waiting run it replaces (flows/announcements/dispatch.py). If a
worker proposed Pending a moment earlier, the cancel still lands, and Prefect 3.9's rules
let the run's engine go on from Cancelled to Running (HandleFlowTerminalStateTransitions only
refuses Cancelling, Paused and Crashed out of a terminal state). The run then finds the
dispatcher's Cancelled state in its own history and ends, so it never trains the older
announcement beside the run that replaced it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

COALESCED_PREFIX = "Coalesced into "


def coalesced_by(states: Iterable[Any]) -> str | None:
    """The dispatcher's message if one of these states (Prefect State objects) is its
    cancellation of the run (pure)."""
    for state in states:
        message = getattr(state, "message", None) or ""
        kind = getattr(getattr(state, "type", None), "value", "")
        if kind == "CANCELLED" and message.startswith(COALESCED_PREFIX):
            return message
    return None


def was_coalesced(flow_run_id: str | None) -> str | None:
    if not flow_run_id:
        return None
    from uuid import UUID

    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return coalesced_by(client.read_flow_run_states(UUID(flow_run_id)))
