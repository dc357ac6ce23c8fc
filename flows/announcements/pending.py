"""The announcements that arrived but are not decided yet: the other unfinished runs of the
dispatcher's own deployment for the same target, read while holding the target's lock.

A burst of announcements gives a burst of dispatcher runs (one per event, made by the
trigger). Deciding them one at a time made one retrain run per announcement, each replacing
the last, and started one Python process per announcement. The dispatcher that holds the
lock first waits until the burst has settled (no new dispatcher run for the target for
``settle_s``, at most ``SETTLE_MAX_S``), then decides every pending announcement at once
(flows/announcements/batch.py) and cancels the dispatcher runs it decided for that have not
started, so they never start a process. One that started anyway finds its announcement held
(a duplicate) or superseded and makes no run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

from prefect.client.orchestration import SyncPrefectClient
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterId,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import FlowRun, StateType

from flows.announcements.decide import WAITING_STATE_NAMES
from flows.announcements.model import Announcement, AnnouncementError

# Below LOCK_WAIT_S (the dispatcher's lock wait): the others waiting for the lock meanwhile
# must not time out.
SETTLE_MAX_S = 300.0
PAGE = 200
UNFINISHED = [StateType.SCHEDULED, StateType.PENDING, StateType.RUNNING]


@dataclass(frozen=True)
class PendingRun:
    """Another dispatcher run for the same target, not finished."""

    id: str
    announcement: Announcement
    waiting: bool  # not started: cancelling it means no process is ever started for it
    created: datetime


def pending_runs(client: SyncPrefectClient, dispatcher_deployment: UUID, own_run: UUID,
                 target: str) -> list[PendingRun]:
    """The dispatcher deployment's unfinished runs (but this one) that announce to
    ``target``. A run whose parameters are not a valid announcement is left out: its own
    dispatcher refuses it, naming the field."""
    found: list[FlowRun] = []
    while True:
        page = client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[dispatcher_deployment])),
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(
                type=FlowRunFilterStateType(any_=UNFINISHED))),
            limit=PAGE, offset=len(found))
        found += page
        if len(page) < PAGE:
            break
    out = []
    for run in found:
        params = run.parameters or {}
        if run.id == own_run or params.get("deployment") != target:
            continue
        try:
            item = Announcement.of(params.get("kind", ""), params.get("value"),
                                   params.get("event_id"), params.get("occurred"))
        except AnnouncementError:
            continue
        state = run.state
        waiting = state is not None and state.type == StateType.SCHEDULED and \
            state.name in WAITING_STATE_NAMES
        out.append(PendingRun(str(run.id), item, waiting, run.created or datetime.now(UTC)))
    return out


def settle_wait(newest_created: datetime | None, now: datetime, settle_s: float) -> float:
    """Seconds still to wait for the burst to settle (0: settled), pure."""
    if newest_created is None:
        return 0.0
    return max(0.0, settle_s - (now - newest_created).total_seconds())


def settled_pending(read: Callable[[], list[PendingRun]], own_created: datetime | None,
                    settle_s: float, log: Callable[[str], None],
                    sleep: Callable[[float], None] = time.sleep) -> list[PendingRun]:
    """Read the pending runs until none was created in the last ``settle_s`` (or for at most
    SETTLE_MAX_S): a burst is decided once, after its last announcement."""
    started = time.monotonic()
    while True:
        pending = read()
        newest = max([p.created for p in pending] + ([own_created] if own_created else []),
                     default=None)
        wait = settle_wait(newest, datetime.now(UTC), settle_s)
        if wait <= 0:
            return pending
        if time.monotonic() - started + wait > SETTLE_MAX_S:
            log(f"announcements still arriving after {SETTLE_MAX_S:.0f} s: deciding the "
                f"{len(pending) + 1} there are")
            return pending
        log(f"{len(pending)} other announcement(s) pending, the newest "
            f"{settle_s - wait:.0f} s ago: deciding once none came for {settle_s:g} s")
        sleep(min(wait, 5.0) + 0.1)
