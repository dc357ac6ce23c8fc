"""The dispatcher's record of the retrain runs it created, and the check against it.

A retrain run's ``announcement`` parameter says which announcements the run serves, and the
target's runs are the ledger (flows/announcements/decide.py): a Completed run marks what it
holds served, an ended run's ``tpurl-dropped:`` tags drop it. Whoever can create a run of
the retrain deployment can set that parameter and those tags, so the parameter alone would
let them mark real announcements served (a run that trains something else) or dropped.

So the dispatcher records each run it creates: right after creating it, an artifact on the
dispatcher's own flow run, keyed ``tpurl-queued-<retrain run id>``, holding the run's id,
the target deployment's id and the SHA-256 of the ``announcement`` parameter it handed the
run. Creating a run of a deployment writes none of this (an artifact belongs to the flow
run that created it, and creating a run sets only the run's own fields), so a client that
may only create runs cannot forge it. The retrain flow checks its own flow-run id against
the record before any side effect (``refusal``), and the dispatcher and `tpurl
announcements` read a run's announcement (and its drop tags) only from a recorded run
(``vouched_runs``). A client that may write artifacts and states through the API is beyond
this check: it could set any run's state itself.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable
from typing import Any
from uuid import UUID

from prefect.client.orchestration import SyncPrefectClient
from prefect.client.schemas.actions import ArtifactCreate
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterKey,
    FlowRunFilter,
    FlowRunFilterId,
)
from prefect.exceptions import ObjectNotFound

DISPATCHER_FLOW = "tpurl-announcement"  # the dispatcher flow's name (flows/announcements/dispatch.py)
KEY_PREFIX = "tpurl-queued-"
# The dispatcher writes the record right after the run exists; a worker may start the run
# meanwhile, so the run waits this long for it before it refuses its parameter.
RECORD_WAIT_S = 30.0
PAGE = 200


def record_key(run_id: str) -> str:
    return f"{KEY_PREFIX}{run_id}"


def digest(announcement: Any) -> str:
    """The SHA-256 of an ``announcement`` parameter as JSON with sorted keys (pure)."""
    text = json.dumps(announcement, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def record_rows(run_id: str, deployment_id: str, announcement: Any) -> list[dict[str, str]]:
    """The record's table: one row, ids and a digest only (no announced value, which an
    event poster chose, is shown in it)."""
    return [{"run": run_id, "deployment": deployment_id,
             "announcement_sha256": digest(announcement)}]


def write_record(client: SyncPrefectClient, dispatcher_run: str, run_id: str,
                 deployment_id: str, announcement: Any) -> None:
    client.create_artifact(ArtifactCreate(
        key=record_key(run_id), type="table", flow_run_id=UUID(dispatcher_run),
        data=record_rows(run_id, deployment_id, announcement),
        description="The retrain run this dispatcher queued, its deployment and the "
                    "SHA-256 of the announcement it handed it: the run and the ledger "
                    "accept the announcement only from a run recorded here."))


def matches(rows: Any, run_id: str, deployment_id: str, announcement: Any) -> bool:
    """Whether a record's table vouches for this run, deployment and parameter (pure)."""
    return isinstance(rows, list) and record_rows(run_id, deployment_id, announcement)[0] in rows


def vouched_runs(client: SyncPrefectClient, deployment_id: str,
                 runs: Iterable[tuple[str, Any]]) -> set[str]:
    """The ids among ``runs`` ((run id, announcement parameter)) that a dispatcher flow run
    recorded with exactly that parameter for this deployment."""
    wanted = dict(runs)
    if not wanted:
        return set()
    keys = ArtifactFilter(key=ArtifactFilterKey(any_=[record_key(r) for r in wanted]))
    artifacts: list[Any] = []
    while True:  # the API answers at most a page (200) per read
        page = client.read_artifacts(artifact_filter=keys, limit=PAGE, offset=len(artifacts))
        artifacts += page
        if len(page) < PAGE:
            break
    makers = {a.flow_run_id for a in artifacts if a.flow_run_id is not None}
    dispatchers = _dispatcher_runs(client, makers)
    return {run_id for run_id, announcement in wanted.items() for a in artifacts
            if a.key == record_key(run_id) and a.flow_run_id in dispatchers
            and matches(a.data, run_id, deployment_id, announcement)}


def _dispatcher_runs(client: SyncPrefectClient, run_ids: set[UUID]) -> set[UUID]:
    """Those of ``run_ids`` that are runs of the dispatcher flow."""
    if not run_ids:
        return set()
    try:
        flow = client.read_flow_by_name(DISPATCHER_FLOW)
    except ObjectNotFound:
        return set()
    found = client.read_flow_runs(flow_run_filter=FlowRunFilter(
        id=FlowRunFilterId(any_=sorted(run_ids, key=str))), limit=len(run_ids))
    return {r.id for r in found if r.flow_id == flow.id}


def refusal(client: SyncPrefectClient, run_id: str | None, deployment_id: str | None,
            announcement: Any, wait_s: float = RECORD_WAIT_S,
            sleep: Callable[[float], None] = time.sleep) -> str | None:
    """Why this run may not take its ``announcement`` parameter, with the fix; None when a
    dispatcher recorded it. Waits up to ``wait_s`` for a record being written."""
    fix = ("fix: leave the announcement parameter empty (give dataset_uri or "
           "model_revision alone), or announce the dataset or revision (`tpurl announce`, "
           "or a tpurl.dataset.updated / tpurl.base-model.updated event) so the dispatcher "
           "queues the run")
    if not run_id or not deployment_id:
        return ("announcement: only a run the dispatcher creates of a retrain deployment "
                f"may carry it, and this run belongs to no deployment; {fix}")
    deadline = time.monotonic() + wait_s
    while not vouched_runs(client, deployment_id, [(run_id, announcement)]):
        if time.monotonic() >= deadline:
            return (f"announcement: no dispatcher recorded run {run_id} as the one it "
                    "queued with this announcement (the parameter was set by whoever "
                    f"created the run, not by the dispatcher); {fix}")
        sleep(1.0)
    return None


def announcement_refusal(run_id: str | None, deployment_id: str | None,
                         announcement: Any) -> str | None:
    """``refusal`` on the API this process talks to (the retrain flow's check)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return refusal(client, run_id, deployment_id, announcement)
