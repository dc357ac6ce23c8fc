"""One run per profile, and no dead holder blocking it: real Prefect API, real processes."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate

from flows import profile_lock as lock
from flows.core.processes import ProcessTag
from flows.profile_lock import Holder, dead_reason, holder_variable, lock_name, profile_lock

pytestmark = pytest.mark.usefixtures("prefect_api")


def test_lock_is_created_with_one_slot_and_held_while_running():
    seen = {}

    @flow
    def holder() -> None:
        with profile_lock("Rehearsal X", logging.getLogger("t")), get_client(sync_client=True) as c:
            seen["inside"] = c.read_global_concurrency_limit_by_name(lock_name("Rehearsal X"))
            seen["holder"] = c.read_variable_by_name(holder_variable("Rehearsal X"))

    holder()
    with get_client(sync_client=True) as client:
        after = client.read_global_concurrency_limit_by_name("tpurl-profile-rehearsal-x")
        record = client.read_variable_by_name(holder_variable("Rehearsal X"))
    assert seen["inside"].limit == 1 and seen["inside"].active_slots == 1
    assert seen["holder"] is not None and str(os.getpid()) in str(seen["holder"].value)
    assert after.active_slots == 0 and record is None


def _dead_process_tag() -> ProcessTag:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    tag = ProcessTag.of(proc.pid, "tpurl run")
    proc.wait()
    return tag


def _take_slot_as(profile: str, holder: Holder | None) -> None:
    """What a run killed by SIGKILL leaves behind: the slot taken, its lease gone."""
    with profile_lock(profile, logging.getLogger("t")):
        pass  # creates the limit
    with get_client(sync_client=True) as client:
        client.update_global_concurrency_limit(lock_name(profile),
                                               GlobalConcurrencyLimitUpdate(active_slots=1))
    if holder is not None:
        lock._write_holder(holder_variable(profile), holder)


def test_a_killed_holder_on_this_host_is_freed_at_once(caplog):
    now = time.time()
    _take_slot_as("killed", Holder("", "rehearsal-old", asdict(_dead_process_tag()), now, now))
    caplog.set_level(logging.INFO)
    started = time.monotonic()
    with profile_lock("killed", logging.getLogger("t")) as hold:
        pass
    assert time.monotonic() - started < 20
    assert hold.freed and "no longer running on this host" in hold.freed[0]
    assert "rehearsal-old" in caplog.text and "freeing the slot" in caplog.text


def test_a_live_holder_is_waited_for_and_named(caplog, monkeypatch):
    monkeypatch.setattr(lock, "REPORT_EVERY_S", 0.0)
    caplog.set_level(logging.INFO)
    inside, release = threading.Event(), threading.Event()

    def first() -> None:
        with profile_lock("busy", logging.getLogger("first")):
            inside.set()
            release.wait(20)

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(20)
    threading.Timer(4.0, release.set).start()
    with profile_lock("busy", logging.getLogger("second")) as hold:
        pass
    thread.join()
    assert hold.waited_s >= 3 and not hold.freed
    assert f"pid {os.getpid()}" in caplog.text and "prefect gcl update tpurl-profile-busy" in \
        caplog.text


def test_dead_reason_rules():
    now = 1_000_000.0
    alive = asdict(ProcessTag.of(os.getpid(), "me"))
    gone = asdict(_dead_process_tag())
    remote = {**alive, "host": "another-host"}
    never_final = lambda run: False  # noqa: E731
    assert dead_reason(Holder("", "", alive, now, now), now, now, never_final) is None
    assert "no longer running" in dead_reason(Holder("", "", gone, now, now), now, now, never_final)
    # another host: only the heartbeat (or the flow run's state) can tell
    assert dead_reason(Holder("", "", remote, now, now - 30), now, now, never_final) is None
    assert "heartbeat stopped" in dead_reason(
        Holder("", "", remote, now, now - lock.STALE_AFTER_S - 1), now, now, never_final)
    assert "has finished" in dead_reason(Holder("r1", "run-1", remote, now, now), now, now,
                                         lambda run: True)
    assert dead_reason(None, now, now - 10, never_final) is None
    assert "no holder record" in dead_reason(None, now, now - lock.STALE_AFTER_S, never_final)
