"""At most one run per profile at a time, across every deployment and the CLI, and no dead
holder blocking the profile for longer than ``STALE_AFTER_S``.

Two runs of one profile would write the same output directories (same keys). A deployment's
own concurrency limit only covers that deployment, so the flow also holds a Prefect global
concurrency slot named after the profile (visible in the UI, shared by every worker).

Why more than the slot: Prefect keeps slot leases in the API server's memory. When a run
died with the ephemeral API server it started (Ctrl-C, SIGKILL), the lease died too and the
slot stayed taken forever. So the holder also keeps a record in a Prefect Variable (flow
run, host, pid and process start time, and a heartbeat every ``HEARTBEAT_S``). A waiting run
frees the slot as soon as the record shows its holder is gone: its process is not running on
this host, its flow run has finished, or its heartbeat is older than ``STALE_AFTER_S``; a
slot taken with no record is freed after the same time. While it waits it says who holds
the slot, since when, and how to break it, and a Ctrl-C ends the wait at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from typing import Any

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import (
    GlobalConcurrencyLimitCreate,
    GlobalConcurrencyLimitUpdate,
    VariableCreate,
    VariableUpdate,
)
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectNotFound

from flows.core.processes import ProcessTag
from flows.runpage.artifacts import slug

HEARTBEAT_S = 15.0
STALE_AFTER_S = 60.0  # the stated bound: a silent holder is dead after this long
POLL_S = 2.0
REPORT_EVERY_S = 30.0


def lock_name(profile: str) -> str:
    return f"tpurl-profile-{slug(profile)}"


def holder_variable(profile: str) -> str:
    return f"tpurl-lock-holder-{slug(profile)}".replace(".", "-")


@dataclass
class Holder:
    """Who holds a profile's slot (the Variable's value)."""

    flow_run_id: str
    flow_run_name: str
    process: dict[str, Any]
    since: float
    heartbeat: float

    def tag(self) -> ProcessTag | None:
        try:
            return ProcessTag(**self.process)
        except TypeError:
            return None

    def describe(self, now: float) -> str:
        tag = self.tag()
        where = f"pid {tag.pid} on {tag.host}" if tag else "an unknown process"
        return (f"flow run {self.flow_run_name or '?'} ({self.flow_run_id or 'no id'}), {where}, "
                f"since {time.strftime('%H:%M:%S', time.localtime(self.since))}, last heartbeat "
                f"{now - self.heartbeat:.0f} s ago")


def dead_reason(holder: Holder | None, now: float, first_seen: float,
                run_is_final: Callable[[str], bool]) -> str | None:
    """Why the holder of a taken slot is gone, or None while it may be alive (pure but for
    the flow-run lookup it is given)."""
    if holder is None:
        waited = now - first_seen
        return (f"the slot is taken with no holder record for {waited:.0f} s"
                if waited >= STALE_AFTER_S else None)
    tag = holder.tag()
    if tag is not None and tag.host == ProcessTag.of(os.getpid(), "").host and not tag.alive():
        return f"its process (pid {tag.pid}) is no longer running on this host"
    if holder.flow_run_id and run_is_final(holder.flow_run_id):
        return f"its flow run {holder.flow_run_name} has finished"
    if now - holder.heartbeat > STALE_AFTER_S:
        return f"its heartbeat stopped {now - holder.heartbeat:.0f} s ago"
    return None


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
    with ExitStack() as stack:
        _acquire(stack, name, variable, logger, hold)
        hold.waited_s = time.monotonic() - started
        me = _claim(variable)
        stop = threading.Event()
        beat = threading.Thread(target=_heartbeat, args=(variable, me, stop), daemon=True,
                                name=f"{name}-heartbeat")
        beat.start()
        logger.info("holding %s (one run of this profile at a time; waited %.1f s)", name,
                    hold.waited_s)
        try:
            yield hold
        finally:
            stop.set()
            beat.join(timeout=5)
            _release_record(variable, me)


def _acquire(stack: ExitStack, name: str, variable: str, logger: Any, hold: LockHold) -> None:
    """Wait for the slot in short, interruptible steps, freeing it from a dead holder."""
    first_seen, last_report = time.time(), 0.0
    while True:
        try:
            stack.enter_context(concurrency(name, occupy=1, strict=True,
                                            timeout_seconds=POLL_S))
            return
        except TimeoutError:
            pass
        now = time.time()
        holder = _read_holder(variable)
        reason = dead_reason(holder, now, first_seen, _run_is_final)
        if reason is not None:
            who = holder.describe(now) if holder else "an unrecorded holder"
            logger.warning("%s was held by %s, which is gone (%s): freeing the slot", name, who,
                           reason)
            _free_slot(name, variable)
            hold.freed.append(reason)
            continue
        if now - last_report >= REPORT_EVERY_S:
            who = holder.describe(now) if holder else "a run that left no holder record"
            logger.warning(
                "waiting for %s: held by %s. A dead holder is freed automatically within %.0f s "
                "of its last heartbeat; to break the lock now: `prefect gcl update %s "
                "--active-slots 0`; Ctrl-C stops waiting", name, who, STALE_AFTER_S, name)
            last_report = now


def _run_is_final(flow_run_id: str) -> bool:
    try:
        with get_client(sync_client=True) as client:
            state = client.read_flow_run(flow_run_id).state
    except ObjectNotFound:
        return True  # a run the API does not know cannot be holding anything
    except Exception:
        return False
    return state is not None and state.is_final()


def _read_holder(variable: str) -> Holder | None:
    with get_client(sync_client=True) as client:
        found = client.read_variable_by_name(variable)
    if found is None:
        return None
    try:
        return Holder(**json.loads(str(found.value)))
    except (TypeError, ValueError):
        return None


def _write_holder(variable: str, holder: Holder) -> None:
    value = json.dumps(asdict(holder))
    with get_client(sync_client=True) as client:
        if client.read_variable_by_name(variable) is None:
            client.create_variable(VariableCreate(name=variable, value=value))
        else:
            client.update_variable(VariableUpdate(name=variable, value=value))


def _claim(variable: str) -> Holder:
    from prefect.runtime import flow_run

    now = time.time()
    holder = Holder(flow_run_id=str(flow_run.id or ""), flow_run_name=str(flow_run.name or ""),
                    process=asdict(ProcessTag.of(os.getpid(), "tpurl run")), since=now,
                    heartbeat=now)
    _write_holder(variable, holder)
    return holder


def _heartbeat(variable: str, me: Holder, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_S):
        me.heartbeat = time.time()
        with contextlib.suppress(Exception):  # a missed beat is retried; STALE_AFTER_S is 4 beats
            _write_holder(variable, me)


def _release_record(variable: str, me: Holder) -> None:
    with contextlib.suppress(Exception):
        current = _read_holder(variable)
        if current is not None and current.since == me.since and \
                current.process == me.process:
            with get_client(sync_client=True) as client:
                client.delete_variable_by_name(variable)


def _free_slot(name: str, variable: str) -> None:
    with get_client(sync_client=True) as client:
        client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(active_slots=0))
        with contextlib.suppress(ObjectNotFound):
            client.delete_variable_by_name(variable)
