"""Who created this flow run, as Prefect recorded it, and how far that record can be believed.

A decision a flow makes for someone (a rollback of the champion) is recorded and announced
under that someone's name. A parameter such as ``by`` is whatever the run's creator typed,
so it names nobody for sure. Prefect records the creator of each flow run in its
``created_by`` field when it creates the run: on Prefect Cloud the signed-in user or
service account, or the automation that ran the deployment; on an open-source server only
an automation (prefect 3.9.1 prefect/server/api/dependencies.py ``get_created_by``: from the
``Prefect-Automation-Id`` and ``Prefect-Automation-Name`` headers its automations send, which
any client of an unauthenticated server could send too), and nothing for a run created
through the API or the UI. So the name comes with how it was learnt (``verified``), and a
run with no recorded creator says so instead of naming anyone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

UNRECORDED = "unknown"


@dataclass(frozen=True)
class Creator:
    """Who created the run (``by``) and how the tool knows it (``verified``)."""

    by: str
    verified: str


def creator_from(created_by: Mapping[str, Any] | None) -> Creator:
    """The creator a flow run's ``created_by`` (id, type, display_value) names. Pure."""
    if not created_by or not (created_by.get("display_value") or created_by.get("id")):
        return Creator(UNRECORDED, "no creator recorded: Prefect recorded none for this flow "
                       "run (created through the API or the UI of a server that knows no "
                       "users), so nobody is named")
    kind = str(created_by.get("type") or "creator").lower()
    name = str(created_by.get("display_value") or created_by.get("id"))
    by = f"automation {name!r}" if kind == "automation" else name
    return Creator(by, f"the flow run's created_by as the Prefect API recorded it ({kind} "
                       f"{created_by.get('id') or name})")


def run_creator(run_id: str | None) -> Creator:
    """The creator of flow run ``run_id`` on the API this process talks to (no run: none
    recorded)."""
    if not run_id:
        return creator_from(None)
    from uuid import UUID

    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        found = client.read_flow_run(UUID(run_id)).created_by
    return creator_from(found.model_dump(mode="json") if found is not None else None)
