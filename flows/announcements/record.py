"""The dispatcher's record of the retrain runs it created, and the check against it.

A retrain run's ``announcement`` parameter says which announcements the run serves, and the
target's runs are the ledger (flows/announcements/decide.py): a Completed run marks what it
holds served, an ended run's ``tpurl-dropped:`` tags drop it. Whoever can create a run of
the retrain deployment can set that parameter and those tags, so the parameter alone would
let them mark real announcements served (a run that trains something else) or dropped.

So the dispatcher records each run it creates: right after creating it, an artifact on the
dispatcher's own flow run, keyed ``tpurl-queued-<retrain run id>``, holding the run's id,
the target deployment's id, the SHA-256 of the ``announcement`` parameter it handed the run
and the seal of those three: an HMAC under the key only the workers hold
(flows/announcements/seal.py, docs/decisions/0025). An artifact belongs to no one: any client
that may write artifacts can write one with this key, this data and any flow run, so the
artifact's place vouches for nothing, and only the seal does. The retrain flow checks its
own flow-run id against the record before any side effect (``refusal``), and the dispatcher
and `tpurl announcements` read a run's announcement (and its drop tags) only from a run
sealed so (``vouched_runs``). A client that may set flow-run states through the API is
beyond this check: it could complete or cancel any run itself.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any
from uuid import UUID

from prefect.client.orchestration import SyncPrefectClient
from prefect.client.schemas.actions import ArtifactCreate
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

from flows.announcements.seal import KEY_ENV, dispatch_key, seal, sealed

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


def record_rows(key: bytes, run_id: str, deployment_id: str,
                announcement: Any) -> list[dict[str, str]]:
    """The record's table: one row, ids, a digest and its seal only (no announced value,
    which an event poster chose, is shown in it)."""
    sha = digest(announcement)
    return [{"run": run_id, "deployment": deployment_id, "announcement_sha256": sha,
             "seal": seal(key, run_id, deployment_id, sha)}]


def write_record(client: SyncPrefectClient, dispatcher_run: str, run_id: str,
                 deployment_id: str, announcement: Any, key: bytes | None = None) -> None:
    client.create_artifact(ArtifactCreate(
        key=record_key(run_id), type="table", flow_run_id=UUID(dispatcher_run),
        data=record_rows(key or dispatch_key(), run_id, deployment_id, announcement),
        description="The retrain run this dispatcher queued, its deployment, the SHA-256 "
                    "of the announcement it handed it and their seal under the workers' "
                    "key: the run and the ledger accept the announcement only from a run "
                    "sealed here."))


def matches(rows: Any, key: bytes, run_id: str, deployment_id: str, announcement: Any) -> bool:
    """Whether a record's table vouches for this run, deployment and parameter: a row
    naming them, sealed under ``key`` (pure)."""
    if not isinstance(rows, list):
        return False
    sha = digest(announcement)
    return any(isinstance(row, dict) and row.get("run") == run_id
               and row.get("deployment") == deployment_id
               and row.get("announcement_sha256") == sha
               and sealed(key, run_id, deployment_id, sha, row.get("seal")) for row in rows)


def vouched_runs(client: SyncPrefectClient, deployment_id: str,
                 runs: Iterable[tuple[str, Any]], key: bytes | None = None) -> set[str]:
    """The ids among ``runs`` ((run id, announcement parameter)) whose record, sealed under
    the workers' key, names exactly that parameter for this deployment."""
    wanted = dict(runs)
    if not wanted:
        return set()
    key = key or dispatch_key()
    ids = sorted(wanted)
    artifacts: list[Any] = []
    for start in range(0, len(ids), PAGE):  # a bounded filter per read, every page of it
        keys = ArtifactFilter(key=ArtifactFilterKey(
            any_=[record_key(r) for r in ids[start:start + PAGE]]))
        read = 0
        while True:
            page = client.read_artifacts(artifact_filter=keys, limit=PAGE, offset=read)
            artifacts += page
            read += len(page)
            if len(page) < PAGE:
                break
    vouched = {run_id for run_id, announcement in wanted.items() for a in artifacts
               if a.key == record_key(run_id)
               and matches(a.data, key, run_id, deployment_id, announcement)}
    if unsealed := len({a.key for a in artifacts} - {record_key(r) for r in vouched}):
        logging.getLogger(__name__).warning(
            "%d record(s) of deployment %s carry no seal under this process's key: forged, "
            "or sealed by a worker with another %s; fix: give this process the workers' %s",
            unsealed, deployment_id, KEY_ENV, KEY_ENV)
    return vouched


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
                    "created the run, not by the dispatcher, or the dispatcher's worker "
                    f"sealed its record under another {KEY_ENV} than this worker's); {fix}")
        sleep(1.0)
    return None


def announcement_refusal(run_id: str | None, deployment_id: str | None,
                         announcement: Any) -> str | None:
    """``refusal`` on the API this process talks to (the retrain flow's check)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return refusal(client, run_id, deployment_id, announcement)
