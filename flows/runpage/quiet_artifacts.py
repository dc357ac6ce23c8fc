"""The run page's artifacts, written through Prefect's artifact API without a client event
per write.

Why: Prefect's client sends an event after every artifact write, ``prefect.artifact.created``
and ``prefect.artifact.updated``, the latter with the artifact's whole new data as payload
(prefect 3.9.1 client/orchestration/_artifacts/client.py ``create_artifact``,
``update_artifact``; the ``create_*_artifact`` and ``update_progress_artifact`` helpers of
prefect/artifacts.py go through them). The API itself emits nothing for an update and one
``prefect.artifact-collection.created|updated`` per keyed artifact created
(server/models/artifacts.py ``update_artifact``, ``_insert_into_artifact_collection``). A
rehearsal run's stage table, outputs list, progress card and result tables made 37 of its
82 events, burying the pipeline's own ``tpurl.*`` events. Here the same artifacts (type,
key, data as Prefect formats it, linked to the flow and task run) are written with the same
API calls, minus the client's events; the collection events still mark each keyed one.

They are written inside a flow or task run only. A stage executed on its own (a test, a
library caller) has no run page, and no API either unless one is configured: Prefect's client
would then start a temporary server of its own for the write (prefect 3.9.1
client/orchestration/__init__.py ``get_client``, ephemeral mode), seconds of CPU and a
process left until the interpreter exits, to store a page nobody can open.
"""

from __future__ import annotations

import json
import math
from typing import Any
from uuid import UUID


def table_data(rows: list[dict[str, Any]]) -> str:
    """A table as Prefect stores it: JSON, NaN as null (prefect/artifacts.py TableArtifact)."""
    def clean(value: Any) -> Any:
        if isinstance(value, float) and math.isnan(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value
    return json.dumps(clean(rows))


def link_data(link: str, text: str) -> str:
    """A link as Prefect stores it: markdown (prefect/artifacts.py LinkArtifact)."""
    return f"[{text}]({link})"


def create(kind: str, data: Any, key: str | None = None,
           description: str | None = None) -> UUID | None:
    """POST /artifacts/ with the run ids of the current context (as Prefect's helpers do,
    prefect/utilities/context.py ``get_task_and_flow_run_ids``); the new artifact's id, or
    None outside a run (nothing written: see the module's docstring)."""
    from prefect.client.orchestration import get_client
    from prefect.utilities.context import get_task_and_flow_run_ids

    task_run_id, flow_run_id = get_task_and_flow_run_ids()
    if task_run_id is None and flow_run_id is None:
        return None
    body = {"type": kind, "data": data, "key": key, "description": description,
            "task_run_id": str(task_run_id) if task_run_id else None,
            "flow_run_id": str(flow_run_id) if flow_run_id else None}
    with get_client(sync_client=True) as client:
        response = client.request("POST", "/artifacts/",
                                  json={k: v for k, v in body.items() if v is not None})
        response.raise_for_status()
    return UUID(response.json()["id"])


def update(artifact_id: UUID, data: Any, description: str | None = None) -> None:
    """PATCH /artifacts/{id}: the data in place (the key's latest version moves with it)."""
    from prefect.client.orchestration import get_client

    body: dict[str, Any] = {"data": data}
    if description is not None:
        body["description"] = description
    with get_client(sync_client=True) as client:
        response = client.request("PATCH", "/artifacts/{id}", json=body,
                                  path_params={"id": artifact_id})
        response.raise_for_status()
