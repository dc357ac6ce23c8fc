"""One run per profile, never two, and no dead holder blocking it: a real `prefect server
start`, real holder processes (tests/support/lock_holder.py), the waiter in this process.

Each interleaving the issue names is stretched by pausing the holder between two of its
own API calls, so the waiter's check lands in that window every time. The waiter is compared
with the holder's own clock (each progress word carries it), never with when this process
read the word, and every wait is on a condition with a generous bound, so a loaded machine
slows these tests without failing them. The module mostly waits (leases expiring, servers
starting): it runs beside the CPU-bound tiers (`realtime`, tests/support/tiers.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows.common.paths import REPO_ROOT
from flows.locking import lock_rules as rules
from flows.locking import profile_lock as lock
from flows.locking.lock_rules import Record, RecordState, Slot, judge
from flows.locking.profile_lock import holder_variable, lock_name, profile_lock
from tests.support.net import free_port
from tests.support.prefect_server import PrefectServer, prefect_server_in, wait_until

pytestmark = [pytest.mark.services, pytest.mark.realtime]  # `prefect server start` of its own

# the repossessor (Prefect's expired-lease reaper) looks every 2 s instead of 15 s
SERVER_SETTINGS = {"PREFECT_SERVER_SERVICES_REPOSSESSOR_LOOP_SECONDS": "2"}


class Api:
    """The module's server, which a test may restart on the same port and home."""

    def __init__(self, home: Path) -> None:
        self.home, self.port = home, free_port()
        self._stack = contextlib.ExitStack()
        self.server = self._start()

    def _start(self) -> PrefectServer:
        return self._stack.enter_context(prefect_server_in(self.home, self.port,
                                                           SERVER_SETTINGS))

    def restart(self) -> None:
        self._stack.close()  # terminates the server and waits for it
        self._stack = contextlib.ExitStack()
        self.server = self._start()

    def close(self) -> None:
        self._stack.close()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    state = Api(tmp_path_factory.mktemp("prefect-lock"))
    try:
        with temporary_settings({PREFECT_API_URL: state.server.url}):
            yield state
    finally:
        state.close()


def _holder(api: Api, profile: str, hold_s: float, *flags: str) -> subprocess.Popen[str]:
    env = {**api.server.env, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen([sys.executable, "-m", "tests.support.lock_holder", profile,
                             str(hold_s), *flags], cwd=REPO_ROOT, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)


def _until(proc: subprocess.Popen[str], word: str) -> float:
    """Reads the holder's progress up to ``word``; the holder's clock when it said it."""
    assert proc.stdout is not None
    for line in proc.stdout:
        said, _, at = line.strip().partition(" ")
        if said == word:
            return float(at)
    raise AssertionError(f"the holder ended before {word} (rc {proc.wait()})")


def _tell(proc: subprocess.Popen[str]) -> float:
    """Ends an ``--until-told`` hold; when it was told."""
    assert proc.stdin is not None
    told_at = time.time()
    proc.stdin.write("release\n")
    proc.stdin.flush()
    return told_at


def _wait_in_thread(profile: str, logger: str) -> tuple[threading.Thread, dict]:
    """A waiter that records when it got the slot and what it freed."""
    seen: dict = {}

    def run() -> None:
        with profile_lock(profile, logging.getLogger(logger)) as hold:
            seen["inside_at"] = time.time()
            seen["freed"] = list(hold.freed)
            seen["slot"] = _slot(profile)  # 1: it holds the slot (0: it ran unlocked)

    context = contextvars.copy_context()  # the module's API settings live in a contextvar
    thread = threading.Thread(target=context.run, args=(run,), daemon=True)
    thread.start()
    return thread, seen


def _slot(profile: str) -> int:
    with get_client(sync_client=True) as client:
        return client.read_global_concurrency_limit_by_name(lock_name(profile)).active_slots


def _updates(api: Api, resource_name: str) -> list[dict]:
    """The API's `prefect.variable.updated` events of one variable (Prefect's payload holds
    the value written: prefect/server/events/schemas/lifecycle.py)."""
    body = {"filter": {"event": {"name": ["prefect.variable.updated"]}, "any_resource": {
        "id_prefix": ["prefect.variable."]}}, "limit": 50}
    events = api.server.api("POST", "/events/filter", json=body).json()["events"]
    return [e for e in events if e["resource"].get("prefect.resource.name") == resource_name]


@pytest.fixture(autouse=True)
def _impatient_old_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lock that freed an unrecorded slot after STALE_AFTER_S of the waiter's own waiting
    would race; 3 s makes that race show in seconds when these tests run against such a lock
    (a mutant or a regression). This lock has no such knob."""
    monkeypatch.setattr(lock, "STALE_AFTER_S", 3.0, raising=False)


def test_held_recorded_and_released(api: Api):
    # held until told: a fixed 1 s hold ended before a loaded CI machine read the record
    holder = _holder(api, "plain", 600.0, "--until-told")
    _until(holder, "HOLDING")
    assert _slot("plain") == 1
    record = lock._read_record(holder_variable("plain"))
    assert record is not None and record.state == RecordState.LEASED and record.lease_id
    assert record.process["pid"] == holder.pid and record.flow_run_id
    _tell(holder)
    _until(holder, "DONE")
    assert holder.wait(30) == 0
    assert _slot("plain") == 0
    assert lock._read_record(holder_variable("plain")).state == RecordState.RELEASED


def test_release_versus_the_waiters_check(api: Api):
    """The waiter has waited long; the holder marks its record released, then pauses 8 s
    before releasing the slot: the waiter must wait for the slot, never free it."""
    holder = _holder(api, "release-race", 6.0, "--pause-release", "8")
    _until(holder, "HOLDING")
    waiter, seen = _wait_in_thread("release-race", "waiter")
    released_mark = _until(holder, "RELEASING")  # then 8 s before the slot is released
    _until(holder, "DONE")
    waiter.join(120)
    assert not waiter.is_alive() and seen["freed"] == [] and seen["slot"] == 1
    assert seen["inside_at"] >= released_mark + 7  # it entered after the slot was released
    assert holder.wait(30) == 0 and _slot("release-race") == 0


def test_record_written_after_the_slot(api: Api):
    """The holder takes the slot and writes its record 8 s later; a waiter arriving in
    between must not take that for a dead holder."""
    holder = _holder(api, "late-record", 3.0, "--pause-record", "8")
    _until(holder, "TAKEN")
    waiter, seen = _wait_in_thread("late-record", "waiter")
    _until(holder, "HOLDING")
    done_at = _until(holder, "DONE")
    waiter.join(120)
    assert not waiter.is_alive() and seen["freed"] == [] and seen["slot"] == 1
    # it took the released slot (polls every 2 s), long before an unrecorded slot counts
    # as stale (rules.UNRECORDED_STALE_S, 120 s)
    assert seen["inside_at"] <= done_at + 60 and holder.wait(30) == 0


def test_holder_killed_between_slot_and_record(api: Api):
    """Killed after taking the slot, before writing a record, the API alive: its lease
    stops being renewed and Prefect's repossessor frees the slot (lease 60 s); the waiter
    takes it then, having freed nothing itself."""
    holder = _holder(api, "killed-between", 30.0, "--hang-before-record")
    taken_at = _until(holder, "TAKEN")  # its lease was taken just before this
    holder.send_signal(signal.SIGKILL)
    holder.wait(30)
    waiter, seen = _wait_in_thread("killed-between", "waiter")
    waiter.join(rules.LEASE_S + 60)
    assert not waiter.is_alive() and seen["freed"] == [] and seen["slot"] == 1
    assert seen["inside_at"] >= taken_at + rules.LEASE_S - 25  # by the lease, not by force
    assert _slot("killed-between") == 0


def test_api_restart_while_held(api: Api):
    """The API restarts under a live holder: every lease is gone, the slot stays taken in
    the database. The holder notices, carries its liveness in the record, and releases its
    own slot at the end; the waiter waits for it and frees nothing. The holder holds until
    told, so a slow restart cannot end the hold before the holder noticed; it renews every
    2 s, so it notices at its first renewal after the restart in seconds, not in 20."""
    holder = _holder(api, "restart", 600.0, "--until-told", "--renew-s", "2")
    _until(holder, "HOLDING")
    api.restart()
    waiter, seen = _wait_in_thread("restart", "waiter")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # the holder's next renewal finds its lease gone
        record = lock._read_record(holder_variable("restart"))
        if record is not None and record.state == RecordState.HEARTBEATING:
            break
        time.sleep(1)
    else:
        raise AssertionError("the holder did not notice that its lease was gone")
    assert _slot("restart") == 1 and "inside_at" not in seen
    told_at = _tell(holder)
    _until(holder, "DONE")
    waiter.join(120)
    assert not waiter.is_alive() and seen["freed"] == [] and seen["slot"] == 1
    assert seen["inside_at"] >= told_at  # it got in only once the holder let go
    assert holder.wait(30) == 0 and _slot("restart") == 0


def test_a_killed_holder_on_this_host_is_freed_at_once(api: Api, caplog):
    caplog.set_level(logging.INFO)
    holder = _holder(api, "killed", 60.0)
    _until(holder, "HOLDING")
    holder.send_signal(signal.SIGKILL)
    holder.wait(30)
    started = time.monotonic()
    with profile_lock("killed", logging.getLogger("t")) as hold:
        pass
    assert time.monotonic() - started < rules.LEASE_S  # not by the lease's expiry
    assert hold.freed and "no longer running on this host" in hold.freed[0]
    assert "freed its lease" in caplog.text and _slot("killed") == 0


def test_a_live_holder_is_waited_for_and_named(api: Api, caplog, monkeypatch):
    monkeypatch.setattr(lock, "REPORT_EVERY_S", 0.0)
    caplog.set_level(logging.INFO)
    holder = _holder(api, "busy", 5.0)
    _until(holder, "HOLDING")
    with profile_lock("busy", logging.getLogger("second")) as hold:
        pass
    assert not hold.freed and hold.waited_s >= 2
    assert f"pid {holder.pid}" in caplog.text and \
        "prefect gcl update tpurl-profile-busy" in caplog.text
    assert holder.wait(30) == 0


def test_no_event_per_beat(api: Api):
    """A holder held for 5 s while renewing its lease every 2 s (two renewals, the lock's
    beat) writes its record twice (leased, released), so the events feed gets one variable
    update, not one per beat."""
    holder = _holder(api, "quiet", 5.0, "--renew-s", "2")
    _until(holder, "DONE")
    assert holder.wait(30) == 0
    # the API's event pipeline is asynchronous: wait for the release's update (the last
    # write, its value marked released); any beat before it was published before it
    def released() -> list[dict] | None:
        found = _updates(api, holder_variable("quiet"))
        return found if any('"released"' in json.dumps(e["payload"].get("value"))
                            for e in found) else None

    updates = wait_until(released, 120, "the event of the release's write")
    assert len(updates) == 1, [e["payload"] for e in updates]


def test_judge_rules():
    now = 1_000_000.0
    me = rules.same_host_pid()
    gone = dict(me, pid=2 ** 22 + 7, ticks=1)
    remote = dict(me, host="another-host")
    taken = Slot(active=1, limit=1, updated=now - 5)

    def record(process: dict, state: RecordState = RecordState.LEASED, age: float = 1.0,
               beat: float = rules.LEASED_BEAT_S) -> Record:
        return Record("t", state, "run-id", "run", process, now - 100, beat, "lease",
                      updated=now - age)

    assert judge(Slot(0, 1, now), None, now, False).action == "take"
    assert judge(taken, record(me), now, False).action == "wait"
    assert "no longer running" in judge(taken, record(gone), now, False).reason
    assert judge(taken, record(remote, age=rules.LEASED_BEAT_S * 2), now, False).action == "wait"
    assert "silent" in judge(taken, record(remote, age=rules.LEASED_BEAT_S * 3 + 1), now,
                             False).reason
    assert "silent" in judge(taken, record(remote, RecordState.HEARTBEATING, age=50,
                                           beat=rules.LOST_LEASE_BEAT_S), now, False).reason
    assert "has finished" in judge(taken, record(remote), now, True).reason
    # unrecorded and released: counted from the last change, not from the waiter's arrival
    assert judge(taken, None, now, False).action == "wait"
    old_slot = Slot(1, 1, now - rules.UNRECORDED_STALE_S - 1)
    assert judge(old_slot, None, now, False).action == "free"
    assert judge(old_slot, record(me, RecordState.RELEASED, age=2), now, False).action == "wait"
    assert judge(old_slot, record(me, RecordState.FREED, age=rules.UNRECORDED_STALE_S + 5), now,
                 False).action == "free"
