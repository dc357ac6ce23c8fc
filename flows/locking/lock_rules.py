"""The per-profile lock's states and the waiter's verdict, as pure data and functions.

A holder goes through these states, each visible to a waiter as (slot, record):

- TAKEN: the slot is taken (with a Prefect lease), the record not yet written. Seen as
  "slot taken, no current record".
- LEASED: the record names the holder and its lease. Its liveness is the lease, which
  Prefect renews without an event; the record is rewritten only every ``LEASED_BEAT_S``.
- HEARTBEATING: the lease is gone while the holder lives (the API restarted: Prefect keeps
  leases in the server's memory). The record is rewritten every ``LOST_LEASE_BEAT_S``.
- RELEASED: the record says so, then the slot is released.
- DEAD: a waiter's verdict; it frees the slot (by the dead holder's lease when it has one)
  and marks the record FREED.

Staleness is always measured from the holder's own last sign of life as the API recorded
it (the record's or the slot's ``updated`` timestamp), never from when the waiter started
waiting: a waiter that arrives late must not count the time it waited against a holder
that just took the slot or just released it.
"""

from __future__ import annotations

import enum
import os
import socket
from dataclasses import dataclass
from typing import Any

from flows.core.processes import ProcessTag

LEASE_S = 60.0  # the shortest lease Prefect 3.9.1 grants (increment-with-lease, ge=60)
RENEW_S = 20.0  # three renewals per lease: two may fail before it expires
# The record's beat while the lease carries liveness. It matters only once the API restarted
# (leases are in its memory) while a holder on another host had died with its run not final
# (a worker marks a run Crashed when its process or pod exits, which makes it final): such a
# record is stale after STALE_BEATS of it (3 h; the wait says how to break the lock sooner).
# Each beat is a variable event in the run's feed, one an hour (at 600 s the beat
# was 6 of a run's events per hour, beside Prefect's 20 heartbeats; both grow with the run).
LEASED_BEAT_S = 3600.0
LOST_LEASE_BEAT_S = 15.0  # the record's beat once the lease is gone
STALE_BEATS = 3  # a recorded holder silent for this many of its own beats is dead
# A slot taken with no current record: Prefect's repossessor frees an expired lease within
# LEASE_S + its 15 s loop, so when this has passed the lease is gone with a restarted API.
UNRECORDED_STALE_S = 120.0
FENCE_GRACE_S = 10.0  # a holder writes its record within this of taking the slot


class RecordState(enum.StrEnum):
    LEASED = "leased"
    HEARTBEATING = "heartbeating"
    RELEASED = "released"
    FREED = "freed"


@dataclass
class Record:
    """The holder record (the Prefect Variable's value); ``updated`` comes from the API."""

    token: str
    state: RecordState
    flow_run_id: str
    flow_run_name: str
    process: dict[str, Any]
    since: float
    beat_every_s: float
    lease_id: str | None = None
    updated: float = 0.0  # the API's timestamp of the last write, not part of the value

    def value(self) -> dict[str, Any]:
        return {"token": self.token, "state": str(self.state), "flow_run_id": self.flow_run_id,
                "flow_run_name": self.flow_run_name, "process": self.process,
                "since": self.since, "beat_every_s": self.beat_every_s,
                "lease_id": self.lease_id}

    @classmethod
    def parse(cls, value: Any, updated: float) -> Record | None:
        try:
            fields = dict(value)
            fields["state"] = RecordState(fields["state"])
            return cls(**fields, updated=updated)
        except (TypeError, ValueError, KeyError):
            return None

    def tag(self) -> ProcessTag | None:
        try:
            return ProcessTag(**self.process)
        except TypeError:
            return None

    def holds(self) -> bool:
        return self.state in (RecordState.LEASED, RecordState.HEARTBEATING)

    def describe(self, now: float) -> str:
        tag = self.tag()
        where = f"pid {tag.pid} on {tag.host}" if tag else "an unknown process"
        return (f"flow run {self.flow_run_name or '?'} ({self.flow_run_id or 'no id'}), {where}, "
                f"{self.state} (last sign of life {now - self.updated:.0f} s ago)")


@dataclass(frozen=True)
class Slot:
    active: int
    limit: int
    updated: float  # the API's timestamp of the slot's last change


@dataclass(frozen=True)
class Verdict:
    """What a waiter does next: ``take`` (the slot is free), ``wait``, or ``free``."""

    action: str
    reason: str = ""
    record: Record | None = None  # the record the verdict is about (None: unrecorded)


def judge(slot: Slot, record: Record | None, now: float, run_is_final: bool) -> Verdict:
    """The waiter's verdict on one observation of the slot and the record.

    ``run_is_final`` is whether the recorded holder's flow run is in a final state (the
    caller looks it up only for a holding record with a flow run id)."""
    if slot.active < slot.limit:
        return Verdict("take")
    if record is None or not record.holds():
        # TAKEN (a new holder about to record) or RELEASED (the holder releasing the slot):
        # the last sign of life is the later of the slot's and the record's last change
        quiet = now - max(slot.updated, record.updated if record else 0.0)
        if quiet >= UNRECORDED_STALE_S:
            return Verdict("free", f"the slot is taken with no current holder record; nothing "
                                   f"has changed for {quiet:.0f} s")
        return Verdict("wait")
    tag = record.tag()
    if tag is not None and tag.host == socket.gethostname() and not tag.alive():
        return Verdict("free", f"its process (pid {tag.pid}) is no longer running on this host",
                       record)
    if record.flow_run_id and run_is_final:
        return Verdict("free", f"its flow run {record.flow_run_name} has finished", record)
    silent = now - record.updated
    if silent > STALE_BEATS * record.beat_every_s:
        return Verdict("free", f"it has been silent for {silent:.0f} s ({STALE_BEATS} of its "
                               f"{record.beat_every_s:.0f} s beats)", record)
    return Verdict("wait")


def same_host_pid() -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(ProcessTag.of(os.getpid(), "tpurl run"))
