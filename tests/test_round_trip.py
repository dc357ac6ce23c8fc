"""The round-trip probe (tests/support/round_trip.py) reports a stall of the process's
HTTP answers as long as it lasted, one that falls between two round trips too, and
milliseconds when nothing stalls."""

from __future__ import annotations

import time

import pytest

from tests.support import round_trip
from tests.support.round_trip import RoundTripProbe


def test_an_answer_held_back_half_a_second_is_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = round_trip._NoContent.do_GET

    def held(self: round_trip._NoContent) -> None:
        time.sleep(0.5)
        answer(self)

    monkeypatch.setattr(round_trip._NoContent, "do_GET", held)
    with RoundTripProbe(every_s=0.05) as probe:
        time.sleep(1.0)
    assert probe.trips >= 1
    assert probe.worst_s >= 0.5


def test_a_stall_still_unanswered_at_the_end_counts_for_its_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(round_trip._NoContent, "do_GET", lambda self: time.sleep(3.0))
    with RoundTripProbe(every_s=0.05) as probe:
        time.sleep(1.0)
    assert probe.worst_s >= 0.9



def _hold_every_thread() -> float:
    """Keep the interpreter's lock in one C call (a builtin's loop never lets another
    thread run), as a collection of a large heap does; how long it held (about 0.4 s on a
    quiet machine, longer on a loaded one)."""
    began = time.monotonic()
    sum(range(15_000_000))
    return time.monotonic() - began


def test_a_stall_between_two_round_trips_is_measured() -> None:
    with RoundTripProbe(every_s=60.0) as probe:  # no round trip falls inside the stall
        time.sleep(0.2)
        held = _hold_every_thread()
        time.sleep(0.1)
    assert probe.trips == 0
    assert probe.worst_s >= held - 2 * probe.tick_s
