"""The dispatcher flow: turns one announcement into at most one waiting retrain run.

Event triggers run this flow (never the retrain flow itself): a retrain deployment with
``CANCEL_NEW`` dropped an announcement that arrived during a run, and one with plain
``ENQUEUE`` would train every intermediate version in turn. Here each announcement is
decided against the target deployment's runs (flows/announcements/decide.py) while holding a
Prefect global concurrency slot named after that deployment, so two dispatchers never read
the same waiting run and both replace it.

Race with the worker. A waiting run is replaced by *creating the new run first* and then
cancelling the old one (a crash in between leaves two waiting runs, which the next dispatcher
merges; never zero). The old run is re-read right before its cancel and left alone if it
has left the waiting states. A worker can still take it between that read and the cancel;
then the run starts from a Cancelled state, and the retrain flow's first act
(``was_coalesced``) sees the coalescing in its own state history and ends at once. Updating
the waiting run's parameters in place (FlowRunUpdate) was rejected: a worker that picked the
run up meanwhile would train the old parameters and the newer announcement would be lost.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, LogCreate
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterId,
    FlowRunFilter,
    FlowRunFilterTags,
)
from prefect.client.schemas.objects import FlowRun
from prefect.client.schemas.responses import OrchestrationResult
from prefect.client.schemas.sorting import FlowRunSort
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
from prefect.runtime import flow_run as current_run
from prefect.states import Cancelled

from flows.announcements.admission import admission_problem
from flows.announcements.batch import PLANNED, decide_batch
from flows.announcements.decide import (
    Decision,
    Dropped,
    Duplicate,
    Queue,
    RunView,
    Superseded,
    coalesced_message,
    dropped_ids,
    explain,
    phase_of,
)
from flows.announcements.events import announcement_event
from flows.announcements.model import (
    Announcement,
    AnnouncementError,
    Kind,
    RunAnnouncement,
    dispatcher_run_name,
    retrain_run_name,
)
from flows.announcements.pending import PendingRun, pending_runs, settled_pending
from flows.announcements.record import vouched_runs, write_record
from flows.config.loading import load_profile
from flows.config.profile import Profile
from flows.core.error_redaction import redacting_errors
from flows.deployed.declared import deployment_declared
from flows.deployed.run_choices import MUST_DECLARE, refuse_run_choices

RUN_TAG = "tpurl-announcement"  # on every retrain run the dispatcher creates
PAGE = 200  # the most flow runs Prefect's API answers per read
READ_TRIES = 5
LOCK_WAIT_S = 600.0


def dispatch_lock_name(deployment_id: str) -> str:
    return f"tpurl-announce-{deployment_id}"


def run_view(run: FlowRun, vouched: bool) -> RunView:
    """What ``run`` holds; only a run a dispatcher recorded (``vouched``,
    flows/announcements/record.py) holds announcements or drops them: another run's
    ``announcement`` parameter and tags were set by whoever created it."""
    raw = (run.parameters or {}).get("announcement")
    try:
        announcement = RunAnnouncement.from_dict(raw) if raw and vouched else None
    except AnnouncementError:
        announcement = None  # a run we cannot read is not ours to merge or cancel
    state = run.state
    return RunView(id=str(run.id), name=run.name,
                   phase=phase_of(state.type.value if state else None,
                                  state.name if state else None),
                   announcement=announcement, state_name=(state.name or "") if state else "",
                   dropped=dropped_ids(run.tags or []) if vouched else frozenset())


def read_ledger(client: SyncPrefectClient, deployment_id: UUID) -> list[RunView]:
    """Every run of the target the dispatcher marks (its tag, filtered by the server): what
    they hold, trained or left due. Every page is read, not the newest runs by start time:
    runs anyone may create (scheduled for 2099, say) push no announcement run out of it,
    and only a sealed one holds announcements (flows/announcements/record.py)."""
    runs = read_all_runs(client, deployment_id)
    vouched = vouched_runs(client, str(deployment_id), [
        (str(r.id), (r.parameters or {}).get("announcement")) for r in runs
        if (r.parameters or {}).get("announcement")])
    return [run_view(r, str(r.id) in vouched) for r in runs]


def read_all_runs(client: SyncPrefectClient, deployment_id: UUID) -> list[FlowRun]:
    """All the target's runs with the dispatcher's tag. The API pages by offset, so a run
    created meanwhile may shift a page: the read is repeated until it holds as many runs as
    the server counts (a client creating runs without pause makes the dispatcher fail,
    saying so, never decide on a partial ledger)."""
    deployments = DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
    tagged = FlowRunFilter(tags=FlowRunFilterTags(all_=[RUN_TAG]))
    for _ in range(READ_TRIES):
        found: dict[UUID, FlowRun] = {}
        offset = 0
        while True:
            page = client.read_flow_runs(deployment_filter=deployments, flow_run_filter=tagged,
                                         sort=FlowRunSort.ID_DESC, limit=PAGE, offset=offset)
            found.update((r.id, r) for r in page)
            offset += len(page)
            if len(page) < PAGE:
                break
        if client.count_flow_runs(deployment_filter=deployments,
                                  flow_run_filter=tagged) == len(found):
            return list(found.values())
    raise AnnouncementError(f"deployment: runs of {deployment_id} kept being created while "
                            f"the dispatcher read them ({READ_TRIES} reads); fix: announce "
                            "again once they stop")


def ensure_lock(client: SyncPrefectClient, name: str) -> None:
    try:
        client.read_global_concurrency_limit_by_name(name)
    except ObjectNotFound:
        with contextlib.suppress(ObjectAlreadyExists):  # another dispatcher made it first
            client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name,
                                                                                limit=1))


def _dispatcher_name() -> str:
    params = current_run.parameters or {}
    return dispatcher_run_name(params.get("kind", "?"), params.get("value", "?"))


def admit(target_parameters: dict[str, Any], new: Announcement) -> Profile:
    """Refuse, before any run is made, what the target cannot or may not train: the
    target's profile (with the deployment's own overrides) says its backend and the URI
    prefixes its announcements may name (flows/announcements/admission.py). Returns the
    profile. ``target_parameters`` are the target deployment's own, read from the API (set
    by whoever deployed it, as trusted as prefect.yaml): its ``profile`` may be a path, which
    the retrain run, passing the same value, is allowed too (flows/config/loading.py
    load_profile ``deployed_profile``); a run's own parameters never reach here."""
    profile = load_profile(str(target_parameters.get("profile", "rehearsal")),
                           target_parameters.get("overrides") or {}, origin="flow")
    if problem := admission_problem(profile, new):
        raise AnnouncementError(problem)
    return profile


@flow(name="tpurl-announcement", flow_run_name=_dispatcher_name, validate_parameters=True,
      persist_result=False)
@redacting_errors
def dispatch_announcement(deployment: str, kind: Kind, value: str, event_id: str,
                          occurred: str) -> dict[str, Any]:
    """Queue, coalesce or record one announcement for ``deployment`` ("flow/deployment").

    Its triggers (prefect.yaml) fill every argument from the event; run it by hand only to
    replay an announcement.

    Args:
        deployment: The retrain deployment, as "<flow name>/<deployment name>".
        kind: "dataset" (tpurl.dataset.updated) or "base-model" (tpurl.base-model.updated).
        value: The announced dataset URI or base-model revision (the event's payload).
        event_id: The event's id. Prefect's API drops an event whose id it has already
            received; the same kind, value and occurred under a new id is one announcement
            here (a duplicate).
        occurred: The event's time (ISO 8601): announcements are ordered by it.
    """
    # a deployment's run: its job variables and its target only repeat the deployment's
    refuse_run_choices(deployment_declared(), {"deployment": deployment}, profile_fixed=False,
                       fixed={"deployment": MUST_DECLARE})
    new = Announcement.of(kind, value, event_id, occurred)  # refused before any side effect
    logger = get_run_logger()
    with get_client(sync_client=True) as client:
        try:
            target = client.read_deployment_by_name(deployment)
        except ObjectNotFound:
            raise AnnouncementError(f"deployment: {deployment!r} does not exist; fix: pass "
                                    "'<flow name>/<deployment name>' of the retrain "
                                    "deployment") from None
        profile = admit(target.parameters or {}, new)
        lock = dispatch_lock_name(str(target.id))
        ensure_lock(client, lock)
        with concurrency(lock, occupy=1, strict=True, timeout_seconds=LOCK_WAIT_S):
            pending = _settled_pending(client, deployment, profile, logger)
            runs = read_ledger(client, target.id)
            items = [new, *(p.announcement for p in pending)]
            batch = decide_batch(items, runs)
            where = (str(target.id), deployment)
            names = {r.id: r.name for r in runs}
            queued = (_queue(client, target.id, where, batch.queue, profile.name, logger,
                             dict(target.parameters or {}))
                      if batch.queue is not None else None)
            run_id = queued["run"] if queued else ""
            names[PLANNED] = queued["run_name"] if queued else ""
            mine = batch.decisions[new.event_id]
            logger.info("%s", explain(mine, names))
            decided = _cancel_pending(client, pending, len(items), logger)
            for item in (new, *decided):  # the others' own dispatchers speak for them
                _decision_event(batch.decisions[item.event_id], where, names, run_id,
                                profile.name)
            if queued is not None and batch.served_by_planned(new.event_id):
                batched = {"batched": [p.announcement.event_id for p in pending]} if pending else {}
                return {**{k: v for k, v in queued.items() if k != "run_name"}, **batched}
            return _decision_result(mine, run_id)


def _settled_pending(client: SyncPrefectClient, target: str, profile: Profile,
                     logger: Any) -> list[PendingRun]:
    """The other announcements for ``target`` whose dispatcher runs have not finished, once
    the burst settled; none when this dispatcher was not started by its deployment (run by
    hand, or called as a function)."""
    own = client.read_flow_run(UUID(current_run.id)) if current_run.id else None
    if own is None or own.deployment_id is None:
        return []
    deployment_id = own.deployment_id

    def read() -> list[PendingRun]:
        return pending_runs(client, deployment_id, own.id, target)

    pending = settled_pending(read, own.created, profile.announcements.settle_s, logger.info)
    # what the target may not train is left to its own dispatcher, which refuses it by name
    return [p for p in pending if admission_problem(profile, p.announcement) is None]


def _cancel_pending(client: SyncPrefectClient, pending: list[PendingRun], batched: int,
                    logger: Any) -> list[Announcement]:
    """Cancel the decided dispatcher runs that have not started (after the retrain run
    exists: a crash before this leaves them to run and find their announcement held)."""
    me = _dispatcher_name()
    message = (f"Decided by dispatcher run {me} ({current_run.id}) with {batched - 1} "
               "other announcement(s): nothing left to do")
    cancelled = [p.announcement for p in pending
                 if p.waiting and _cancel_if_waiting(client, p.id, message)]
    if pending:
        logger.info("decided %d announcements at once; %d dispatcher run(s) that had not "
                    "started cancelled", batched, len(cancelled))
    return cancelled


def _decision_event(decision: Decision, where: tuple[str, str], names: dict[str, str],
                    planned_id: str, profile: str) -> None:
    """The event of a decision that queued no run (a queued or coalesced one has its event
    from _queue)."""
    if isinstance(decision, Queue):
        return
    run = planned_id if decision.run_id == PLANNED else decision.run_id
    new = decision.announcement
    if isinstance(decision, Duplicate | Dropped):
        announcement_event(decision.rule, new, where, {"rule": decision.rule, "run": run},
                           [(run, names.get(decision.run_id, ""), "serving-run")],
                           profile=profile)
    else:
        announcement_event("superseded", new, where, {
            "rule": "superseded", "by": decision.by.to_dict(), "run": run,
            "trained": decision.trained},
            [(run, names.get(decision.run_id, ""), "serving-run")], profile=profile)


def _decision_result(decision: Decision, planned_id: str) -> dict[str, Any]:
    run = planned_id if getattr(decision, "run_id", "") == PLANNED else \
        getattr(decision, "run_id", "")
    if isinstance(decision, Superseded):
        return {"decision": "superseded", "by": decision.by.event_id, "run": run,
                "trained": decision.trained}
    return {"decision": decision.rule, "run": run}


def _queue(client: SyncPrefectClient, deployment_id: UUID, where: tuple[str, str],
           decision: Queue, profile: str, logger: Any,
           target_parameters: dict[str, Any]) -> dict[str, Any]:
    new, record = decision.announcement, decision.run
    created = client.create_flow_run_from_deployment(
        deployment_id, parameters=record.parameters(), name=retrain_run_name(profile, record),
        idempotency_key=f"tpurl-announcement-{new.event_id}", tags=[RUN_TAG])
    new_id, new_name = str(created.id), created.name
    handed = record.parameters()["announcement"]
    if (created.parameters or {}) != {**target_parameters, **record.parameters()}:
        # the idempotency key named a run someone else created first, with other parameters
        # (another dataset or revision beside this announcement, say): never recorded
        raise AnnouncementError(
            f"event_id: run {new_name} ({new_id}) of the target already holds the idempotency "
            f"key tpurl-announcement-{new.event_id} with other parameters than this "
            "announcement's; fix: announce again under a new event id")
    write_record(client, str(current_run.id), new_id, str(deployment_id), handed)
    logger.info("queued %s for %s (serves %s)", new_name, new.describe(),
                "; ".join(a.describe() for a in record.serves.values()))
    for due in decision.retried:
        logger.info("%s: %s takes it up", due.describe(), new_name)
    cancelled, kept = [], []
    for old_id in decision.replaces:
        message = coalesced_message(new, new_id, new_name)
        if _cancel_if_waiting(client, old_id, message):
            cancelled.append(old_id)
            logger.info("cancelled waiting run %s: replaced by %s", old_id, new_name)
            _log_to_run(client, old_id, f"Not run: {message}")
        else:
            kept.append(old_id)
    if kept:
        logger.warning("runs %s started before they could be replaced; %s serves their "
                       "announcements as well", ", ".join(kept), new_name)
    for item in record.coalesced:
        announcement_event("coalesced", item, where, {
            "rule": "coalesced", "into_run": new_id, "into": new.to_dict(),
            "replaced_runs": cancelled},
            [(new_id, new_name, "queued-run"), *[(r, "", "coalesced-run") for r in cancelled]],
            profile=profile)
    announcement_event("queued", new, where, {
        "run": new_id, "run_name": new_name, "serves": record.summary(),
        "coalesced": [a.to_dict() for a in record.coalesced], "replaced_runs": cancelled,
        "carried_from": decision.carried, "rule": "queued",
        "retried": [{**d.announcement.to_dict(), "ended_run": d.run_id, "ended": d.ended}
                    for d in decision.retried]},
        [(new_id, new_name, "queued-run"), *[(r, "", "coalesced-run") for r in cancelled]],
        profile=profile)
    return {"decision": "queued", "run": new_id, "run_name": new_name, "replaced": cancelled,
            "coalesced": [a.event_id for a in record.coalesced],
            "retried": [d.announcement.event_id for d in decision.retried]}


def _cancel_if_waiting(client: SyncPrefectClient, run_id: str, message: str) -> bool:
    """Cancel a run only while it has not started (see the module's race note)."""
    run = client.read_flow_run(UUID(run_id))
    if run_view(run, vouched=False).phase != "waiting":
        return False
    result: OrchestrationResult[object] = client.set_flow_run_state(
        UUID(run_id), Cancelled(message=message), force=False)
    return result.state is not None and result.state.is_cancelled()


def _log_to_run(client: SyncPrefectClient, run_id: str, message: str) -> None:
    """A line in the replaced run's own log: it never starts, so nothing else would say in
    its Logs tab why it is Cancelled (best-effort: the state message says it too)."""
    try:
        # validated from a mapping: pydantic takes the datetime, which Prefect's annotation
        # (its own DateTime type) does not say
        client.create_logs([LogCreate.model_validate(
            {"name": "tpurl.announcements", "level": logging.INFO, "message": message,
             "timestamp": datetime.now(UTC), "flow_run_id": UUID(run_id)})])
    except Exception as exc:
        logging.getLogger(__name__).warning("log of run %s not written: %s", run_id, exc)
