"""The waiter's race with a holder that releases normally (flows/locking/profile_lock.py _acquire):
the waiter read the slot (held) and the record (leased), then the holder released both and
its flow run ended, then the waiter saw the run final and "freed" a live holder's lease (a
clean-clone CI run caught it: tests/test_profile_lock.py test_record_written_after_the_slot).
Driven step by step through the module's own reads, so the interleaving is exact."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from flows.locking import profile_lock as lock
from flows.locking.lock_rules import Record, RecordState, Slot


def _record(state: RecordState, updated: float) -> Record:
    return Record(token="t1", state=state, flow_run_id="run-1", flow_run_name="festive-aardvark",
                  process={"pid": 1, "host": "elsewhere"}, since=0.0, beat_every_s=300.0,
                  lease_id="00000000-0000-0000-0000-000000000001", updated=updated)


@pytest.mark.parametrize("holder_released", [True, False])
def test_a_holder_that_released_meanwhile_is_not_freed(monkeypatch: pytest.MonkeyPatch,
                                                       holder_released: bool) -> None:
    world: dict[str, Any] = {"slot": Slot(active=1, limit=1, updated=1.0),
                             "record": _record(RecordState.LEASED, 1.0), "freed": []}

    def run_is_final(flow_run_id: str) -> bool:
        if holder_released:  # between the waiter's first reads and this lookup
            world["record"] = _record(RecordState.RELEASED, 2.0)
            world["slot"] = Slot(active=0, limit=1, updated=2.0)
        return True  # the run has ended either way (released, or crashed holding)

    def free(name: str, variable: str, slot: Slot, verdict: Any, logger: Any) -> bool:
        world["freed"].append(verdict.reason)
        world["slot"] = Slot(active=0, limit=1, updated=3.0)
        return True

    monkeypatch.setattr(lock, "_read_slot", lambda name: world["slot"])
    monkeypatch.setattr(lock, "_read_record", lambda variable: world["record"])
    monkeypatch.setattr(lock, "_run_is_final", run_is_final)
    monkeypatch.setattr(lock, "_free", free)
    monkeypatch.setattr(lock, "_try_take", lambda name: "lease-2")
    monkeypatch.setattr(lock, "POLL_S", 0.0)
    hold = lock.LockHold(name="tpurl-profile-p")
    assert lock._acquire("tpurl-profile-p", "holder-p", logging.getLogger("w"), hold) == "lease-2"
    if holder_released:
        assert world["freed"] == []  # it took the released slot the ordinary way
    else:  # a holder whose run ended still holding: freed, as before
        assert world["freed"] == ["its flow run festive-aardvark has finished"]
