"""At most one run per profile at a time, across every deployment and the CLI, and no dead
holder blocking the profile for long.

Two runs of one profile would write the same output directories (same keys). A deployment's
own concurrency limit only covers that deployment, so the flow also holds a Prefect global
concurrency slot named after the profile (visible in the UI, shared by every worker).

The slot is taken with a Prefect lease, renewed here every ``RENEW_S`` (lease renewals are
not events, so the events feed stays quiet). While the API lives, a holder that dies stops
renewing and Prefect's repossessor frees its slot. Prefect keeps leases in the server's
memory, though: when the API restarts (the ephemeral API of a killed `tpurl run` always
does), every lease is gone and the slot stays taken. So the holder also keeps a record in a
Prefect Variable (flow run, host, pid and process start time, its lease) and a waiter judges
it (``flows.locking.lock_rules``): its process is gone on this host, its flow run has finished, or it
has been silent for three of its own beats. The record is rewritten only every
``LEASED_BEAT_S`` while the lease holds, every ``LOST_LEASE_BEAT_S`` once it is lost.

While it waits a run says who holds the slot, since when, and how to break it; a Ctrl-C
ends the wait at once.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import (
    GlobalConcurrencyLimitCreate,
    GlobalConcurrencyLimitUpdate,
    VariableCreate,
    VariableUpdate,
)
from prefect.client.schemas.objects import ConcurrencyLeaseHolder
from prefect.exceptions import ObjectNotFound

from flows.common.threads import context_thread
from flows.locking import lock_rules as rules
from flows.locking.lock_rules import Record, RecordState, Slot, Verdict
from flows.runpage.artifacts import slug

POLL_S = 2.0
REPORT_EVERY_S = 30.0


def lock_name(profile: str) -> str:
    return f"tpurl-profile-{slug(profile)}"


def holder_variable(profile: str) -> str:
    return f"tpurl-lock-holder-{slug(profile)}".replace(".", "-")


@dataclass
class LockHold:
    """What holding cost: reported in the result apart from the stages' time."""

    name: str
    waited_s: float = 0.0
    freed: list[str] = field(default_factory=list)


@contextlib.contextmanager
def profile_lock(profile: str, logger: Any) -> Iterator[LockHold]:
    name, variable = lock_name(profile), holder_variable(profile)
    hold = LockHold(name)
    try:
        with get_client(sync_client=True) as client:
            try:
                client.read_global_concurrency_limit_by_name(name)
            except ObjectNotFound:
                client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=name, limit=1))
    except Exception as exc:  # a missing lock must not stop a run; say so
        logger.warning("no per-profile lock (%s): concurrent runs of %s are not prevented", exc,
                       profile)
        yield hold
        return
    started = time.monotonic()
    lease_id = _acquire(name, variable, logger, hold)  # TAKEN
    hold.waited_s = time.monotonic() - started
    holding = _Holding(name, variable, lease_id, logger)
    try:
        holding.record()  # LEASED
        holding.start()
        logger.info("holding %s (one run of this profile at a time; waited %.1f s)", name,
                    hold.waited_s)
        yield hold
    finally:
        holding.release()  # RELEASED


class _Holding:
    """The holder's side: its record, the lease renewal and beat, and the release."""

    def __init__(self, name: str, variable: str, lease_id: str, logger: Any) -> None:
        from prefect.runtime import flow_run

        self.name, self.variable, self.logger = name, variable, logger
        self.taken_at = time.time()
        self.me = Record(token=uuid.uuid4().hex, state=RecordState.LEASED,
                         flow_run_id=str(flow_run.id or ""),
                         flow_run_name=str(flow_run.name or ""),
                         process=rules.same_host_pid(), since=self.taken_at,
                         beat_every_s=rules.LEASED_BEAT_S, lease_id=lease_id)
        self.stop = threading.Event()
        # in the caller's context: the API settings may live in a contextvar (as in Prefect's
        # own lease renewal thread, prefect/concurrency/_leases.py)
        self.thread = context_thread(self._beat, name=f"{name}-lease")

    def record(self) -> None:
        _write_record(self.variable, self.me)

    def start(self) -> None:
        self.thread.start()

    def _beat(self) -> None:
        last_write = time.monotonic()
        while not self.stop.wait(rules.RENEW_S if self.me.lease_id else
                                 rules.LOST_LEASE_BEAT_S):
            if self.me.lease_id and _renew(self.me.lease_id) is False:
                self.logger.warning("the lease on %s is gone (the API restarted?): the holder "
                                    "record now carries the liveness", self.name)
                self.me.lease_id, self.me.state = None, RecordState.HEARTBEATING
                self.me.beat_every_s = rules.LOST_LEASE_BEAT_S
                last_write = 0.0
            if time.monotonic() - last_write >= self.me.beat_every_s:
                with contextlib.suppress(Exception):  # a missed beat is retried next time
                    _write_record(self.variable, self.me)
                    last_write = time.monotonic()

    def release(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)
        with contextlib.suppress(Exception):
            current = _read_record(self.variable)
            if current is not None and current.token == self.me.token and current.holds():
                self.me.state = RecordState.RELEASED
                _write_record(self.variable, self.me)
            elif self.me.lease_id is None:
                self.logger.warning("%s was freed by another run while this one held it (%s): "
                                    "its slot is not released again", self.name,
                                    current.state if current else "no record")
                return
        with contextlib.suppress(Exception), get_client(sync_client=True) as client:
            if self.me.lease_id is not None:
                client.release_concurrency_slots_with_lease(uuid.UUID(self.me.lease_id))
            else:  # the lease died with the API; the record says the slot is still ours
                client.release_concurrency_slots(
                    [self.name], 1, max(time.time() - self.taken_at, 1.0))


def _acquire(name: str, variable: str, logger: Any, hold: LockHold) -> str:
    """Wait for the slot in short, interruptible steps, freeing it from a dead holder; the
    lease id of the slot taken."""
    last_report = 0.0
    while True:
        slot = _read_slot(name)
        if slot.active < slot.limit:
            lease_id = _try_take(name)
            if lease_id is not None:
                return lease_id
        now = time.time()
        record = _read_record(variable)
        final = bool(record and record.holds() and record.flow_run_id
                     and _run_is_final(record.flow_run_id))
        if final:  # the slot and record were read before the run was seen final; a holder
            # releases both before its run ends, so a release in between shows only in a
            # second reading (a CI run caught a live holder "freed" by that race)
            slot, again = _read_slot(name), _read_record(variable)
            if again != record:
                record, final = again, False
        verdict = rules.judge(slot, record, now, final)
        if verdict.action == "free":
            if _free(name, variable, slot, verdict, logger):
                hold.freed.append(verdict.reason)
            continue
        if verdict.action == "wait" and now - last_report >= REPORT_EVERY_S:
            who = (record.describe(now) if record and record.holds()
                   else "a run that has not recorded itself (yet)")
            logger.warning(
                "waiting for %s: held by %s. A dead holder is freed automatically; to break "
                "the lock now: `prefect gcl update %s --active-slots 0`; Ctrl-C stops waiting",
                name, who, name)
            last_report = now
        time.sleep(POLL_S)


def _try_take(name: str) -> str | None:
    from prefect.runtime import flow_run

    holder = (ConcurrencyLeaseHolder(type="flow_run", id=uuid.UUID(str(flow_run.id)))
              if flow_run.id else None)
    with get_client(sync_client=True) as client:
        try:
            response = client.increment_concurrency_slots_with_lease(
                names=[name], slots=1, mode="concurrency", lease_duration=rules.LEASE_S,
                holder=holder)
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code == 423:  # another waiter was quicker
                return None
            raise
    return str(response.json()["lease_id"])


def _free(name: str, variable: str, slot: Slot, verdict: Verdict, logger: Any) -> bool:
    """Free a dead holder's slot, fenced: by its lease when it has one (a no-op if that lease
    no longer holds the slot), and by force only when, after ``FENCE_GRACE_S``, neither the
    slot nor the record has changed since the verdict."""
    dead = verdict.record
    who = dead.describe(time.time()) if dead else "an unrecorded holder"
    if dead is not None and dead.lease_id:
        with get_client(sync_client=True) as client:
            client.release_concurrency_slots_with_lease(uuid.UUID(dead.lease_id))
        if _read_slot(name).active < slot.limit:
            _mark_freed(variable, dead)
            logger.warning("%s was held by %s, which is gone (%s): freed its lease", name, who,
                           verdict.reason)
            return True
    time.sleep(rules.FENCE_GRACE_S)
    now_slot, now_record = _read_slot(name), _read_record(variable)
    if now_slot.active < now_slot.limit:
        return False  # released meanwhile: take it the ordinary way
    unchanged = (now_record.token, now_record.updated) == (dead.token, dead.updated) \
        if (dead and now_record) else (now_record is None or not now_record.holds())
    if not unchanged or (dead is None and now_slot.updated != slot.updated):
        return False  # a holder recorded itself or the slot changed hands: judge again
    with get_client(sync_client=True) as client:
        client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(active_slots=0))
    if dead is not None:
        _mark_freed(variable, dead)
    logger.warning("%s was held by %s, which is gone (%s): freeing the slot", name, who,
                   verdict.reason)
    return True


def _renew(lease_id: str) -> bool | None:
    """True when renewed, False when the API says the lease is gone, None when unknown."""
    try:
        with get_client(sync_client=True) as client:
            client.renew_concurrency_lease(uuid.UUID(lease_id), rules.LEASE_S)
        return True
    except httpx.HTTPStatusError as exc:
        return False if exc.response.status_code in (404, 410) else None
    except Exception:
        return None  # the API is unreachable: try again next time


def _run_is_final(flow_run_id: str) -> bool:
    try:
        with get_client(sync_client=True) as client:
            state = client.read_flow_run(uuid.UUID(flow_run_id)).state
    except ObjectNotFound:
        return True  # a run the API does not know cannot be holding anything
    except Exception:
        return False
    return state is not None and state.is_final()


def _read_slot(name: str) -> Slot:
    with get_client(sync_client=True) as client:
        limit = client.read_global_concurrency_limit_by_name(name)
    return Slot(active=limit.active_slots, limit=limit.limit,
                updated=limit.updated.timestamp() if limit.updated else 0.0)


def _read_record(variable: str) -> Record | None:
    with get_client(sync_client=True) as client:
        found = client.read_variable_by_name(variable)
    if found is None:
        return None
    return Record.parse(found.value, found.updated.timestamp() if found.updated else 0.0)


def _write_record(variable: str, record: Record) -> None:
    value = record.value()
    with get_client(sync_client=True) as client:
        if client.read_variable_by_name(variable) is None:
            client.create_variable(VariableCreate(name=variable, value=value))
        else:
            client.update_variable(VariableUpdate(name=variable, value=value))


def _mark_freed(variable: str, dead: Record) -> None:
    with contextlib.suppress(Exception):
        current = _read_record(variable)
        if current is not None and current.token == dead.token:
            current.state = RecordState.FREED
            _write_record(variable, current)
