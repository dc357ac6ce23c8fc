"""Every thread of ours that can write to the stage logger runs in its starter's context, so
it sends to the Prefect API the run uses.

Why it matters: `tpurl run` names its own API server in a contextvar (temporary_settings in
flows/console/interrupts.py private_api); Prefect's root settings, read where no context
is set, name no API. A thread started bare (threading.Thread starts with an empty context
in Python 3.12) that logged made Prefect's log worker (keyed by PREFECT_API_URL,
prefect/logging/handlers.py APILogWorker.instance at prefect 3.9.1) start a temporary
server of its own for the rest of the run, and after a Ctrl-C that worker held the
command's exit for 20-30 s. The threads: the programs run together (image, evaluate), the
Kubernetes watches and the coordinator's log follower (their warnings and lines go to the
stage logger).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows.backends.gke.watch.logs import LogFollower
from flows.backends.gke.watch.stream import ObjectWatch, WatchSettings
from flows.backends.local.program_group import run_together

RUN_API = "http://127.0.0.1:9/api"  # only ever named, never called


@pytest.fixture
def run_api() -> Iterator[str]:
    """The run's API as `tpurl run` sets it: in the context only."""
    with temporary_settings({PREFECT_API_URL: RUN_API}):
        yield RUN_API


def test_programs_run_together_see_the_runs_api(run_api: str) -> None:
    seen = run_together([lambda started: PREFECT_API_URL.value() for _ in range(3)],
                        lambda proc: None)
    assert seen == [run_api] * 3


def _seen_from_its_thread(make: Callable[[Callable[..., None]], Any]) -> set[str | None]:
    """Starts what ``make`` builds around a callback its thread calls; the API that callback
    saw."""
    seen: list[str | None] = []
    called = threading.Event()

    def callback(*_: object, **__: object) -> None:
        seen.append(PREFECT_API_URL.value())
        called.set()  # returns nothing: a watch retries its list, a follower its pod

    running = make(callback)
    running.start()
    try:
        assert called.wait(10)
    finally:
        running.stop()
    return set(seen)


def test_a_watch_thread_sees_the_runs_api(run_api: str) -> None:
    assert _seen_from_its_thread(lambda lister: ObjectWatch(
        "jobsets", lister, lambda: None, WatchSettings(backoff_s=0.05, backoff_cap_s=0.1),
        lambda text: None)) == {run_api}


def test_the_log_followers_thread_sees_the_runs_api(run_api: str) -> None:
    assert _seen_from_its_thread(lambda pod: LogFollower(
        core=None, namespace="default", container="main", pod=pod, sink=None,  # type: ignore[arg-type]
        wake=threading.Event())) == {run_api}
