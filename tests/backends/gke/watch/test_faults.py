"""The GKE backend through faults the fake API produces, one test per fault.

Each test makes the fault happen against the fake API and says in its docstring what a
backend without the defence would do instead, so the assertion is read as that defence."""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke.watch.client import JOBSET_GROUP, JOBSET_VERSION, JOBSETS
from flows.backends.gke.watch.stream import ObjectWatch, WatchSettings
from flows.core.budgets import Budgets
from flows.core.failures import FailureCategory, StageFailed
from tests.fakes.gke_backend import BUDGETS, jobsets_created, no_jobsets_left, run_stage
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.scenarios import (
    admit,
    api_down,
    evict_releasing,
    once_its_pods_are_watched,
    pending,
    pull_fails,
    reserve_quota,
    say,
    scenario,
    start,
    succeed,
    worker_crashes,
)
from tests.support.cluster import cluster_at
from tests.support.polling import bare_jobset, until
from tests.support.profiles import fake_hf_token

WATCH = WatchSettings(timeout_s=5, read_timeout_s=5, connect_timeout_s=1, max_errors=2,
                      poll_interval_s=0.2, backoff_s=0.05, backoff_cap_s=0.1, healthy_s=10)
NOT_FOUND = ('rpc error: code = NotFound desc = failed to pull and unpack image '
             '"europe-docker.pkg.dev/p/r/tpurl:nope": failed to resolve reference '
             '"europe-docker.pkg.dev/p/r/tpurl:nope": europe-docker.pkg.dev/p/r/tpurl:nope: '
             'not found')


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("8dKLzdocJ2"))
    with FakeApiServer(FakeKube()) as srv:
        yield srv


def watch_of(server: FakeApiServer, seen: list[tuple[str, str]],
             warnings: list[str]) -> ObjectWatch:
    lister = functools.partial(cluster_at(server.url).custom.list_namespaced_custom_object,
                               JOBSET_GROUP, JOBSET_VERSION, "default", JOBSETS)
    return ObjectWatch("jobsets", lister, lambda: None, WATCH, warnings.append,
                       observe=lambda o: seen.append((o["metadata"]["name"],
                                                      o["metadata"]["resourceVersion"])))


# --- a stream that breaks mid-way -----------------------------------------------------------

def test_a_broken_stream_resumes_after_the_last_event_it_delivered(
        server: FakeApiServer) -> None:
    """More events pending than one stream delivers before it breaks: a watch that restarted
    from the version it started with would replay the same two events forever."""
    seen: list[tuple[str, str]] = []
    warnings: list[str] = []
    watch = watch_of(server, seen, warnings).start()
    try:
        assert until(watch.synced.is_set)
        server.kube.drop_watch_every = 2  # every stream is cut after two events
        for i in range(9):
            server.kube.create("jobsets", "default", bare_jobset(f"j{i}"))
        assert until(lambda: watch.get("j8") is not None)
        assert len(seen) == len(set(seen)) == 9  # each version once: nothing replayed
        assert watch.relists == 1  # no relist: only a 410 asks for one
    finally:
        watch.stop()


def test_streams_that_delivered_events_are_no_failures(server: FakeApiServer) -> None:
    """A stream that delivered events before it broke is no failure: counting every broken
    stream would fall back to polling after three."""
    seen: list[tuple[str, str]] = []
    warnings: list[str] = []
    watch = watch_of(server, seen, warnings).start()
    try:
        assert until(watch.synced.is_set)
        server.kube.drop_watch_every = 1
        for i in range(6):
            server.kube.create("jobsets", "default", bare_jobset(f"k{i}"))
            assert until(lambda i=i: watch.get(f"k{i}") is not None)
        assert watch.errors >= 5 and not watch.polling
        assert not any("polling" in w for w in warnings)
    finally:
        watch.stop()


def test_polling_keeps_trying_to_watch(server: FakeApiServer) -> None:
    """While polling, a watch is tried after every poll, so events flow again as soon as
    the API answers (not after poll_rounds more polls)."""
    seen: list[tuple[str, str]] = []
    warnings: list[str] = []
    server.kube.fail_next(6)
    watch = watch_of(server, seen, warnings).start()
    try:
        # the bounds are the claim here (back to watching at once, then events by the watch):
        # kept explicit, not the module-wide default
        assert until(lambda: watch.synced.is_set() and not watch.polling, within_s=5.0)
        server.kube.create("jobsets", "default", bare_jobset("late"))
        assert until(lambda: watch.get("late") is not None, within_s=1.0)
    finally:
        watch.stop()


# --- budgets on the wall clock, API retries -------------------------------------------------

def _in_thread(fn: Any, within_s: float) -> Any:
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    thread.start()
    thread.join(within_s)
    assert box, f"still waiting after {within_s} s"
    return box[0]


def test_an_api_that_fails_from_the_create_on_fails_within_the_budget(
        server: FakeApiServer, tmp_path: Path) -> None:
    """The budgets hold from the create on: an API down before the first list fails the
    stage within them instead of waiting forever."""
    scenario(server.kube, [(0.0, api_down)])
    budgets = Budgets(**{**BUDGETS.__dict__, "queue_s": 2.0, "run_s": 2.0})
    began = time.monotonic()
    outcome, *_ = _in_thread(lambda: run_stage(server, "convert", tmp_path, budgets), 20)
    assert isinstance(outcome, StageFailed), outcome
    # within the budgets, not the 30 s of the default ones (the margin rides out a loaded CI)
    assert time.monotonic() - began < 2.0 + BUDGETS.api_s + 5
    d = outcome.diagnosis
    assert d.category is FailureCategory.INFRASTRUCTURE and "503" in d.summary


def test_a_5xx_burst_before_the_create_is_ridden_out_honouring_retry_after(
        server: FakeApiServer, tmp_path: Path) -> None:
    """A burst of 429s and 503s before the create is ridden out within the API budget, each
    429 waited by its Retry-After (a fixed five attempts would give up on this burst)."""
    server.kube.fail_next(2, status=429, retry_after=0.5)
    server.kube.fail_next(4)  # six failures in all: more than a fixed five attempts
    kube = scenario(server.kube, [(0.1, admit), (0.05, start), (0.1, succeed)])
    budgets = Budgets(**{**BUDGETS.__dict__, "api_s": 20.0})  # a burst of minutes, scaled down
    outcome, logger, _, _ = run_stage(server, "convert", tmp_path, budgets)
    assert not isinstance(outcome, StageFailed), outcome
    assert jobsets_created(kube) == 1
    retries = [line for line in logger.lines if "retry " in line]
    assert len(retries) == 6 and len(set(retries)) == 6  # each retry logged once
    assert sum("429" in r and "in 0.5 s" in r for r in retries) == 2  # Retry-After honoured


# --- diagnoses from the cluster's own words ------------------------------------------------

def test_an_image_that_does_not_exist_is_a_configuration_error(
        server: FakeApiServer, tmp_path: Path) -> None:
    """A pull of an image that does not exist is the user's error, not retryable
    infrastructure (which would submit a JobSet per retry)."""
    kube = scenario(server.kube, [(0.1, admit),
                                  (0.1, once_its_pods_are_watched(pull_fails(NOT_FOUND)))])
    began = time.monotonic()
    outcome, *_ = run_stage(server, "convert", tmp_path)
    assert isinstance(outcome, StageFailed)
    d = outcome.diagnosis
    assert d.category is FailureCategory.USER_ERROR and not d.retryable
    assert d.code == "image/not-found" and "tpurl:nope" in d.detail
    assert time.monotonic() - began < 10
    assert jobsets_created(kube) == 1 and no_jobsets_left(kube)


def test_the_pull_cause_posted_once_is_remembered_from_the_watch(
        server: FakeApiServer, tmp_path: Path) -> None:
    """Kubelet posts ErrImagePull's cause once per pull attempt (10 s or more apart),
    then only "Back-off pulling image". Only the monitor's memory of every pod version it
    watched (Monitor._remember_pull_errors) can name the cause: with a grace longer than
    the run budget, a monitor that does not remember it never decides on the image."""
    scenario(server.kube, [(0.1, admit),
                           (0.1, once_its_pods_are_watched(pull_fails(NOT_FOUND)))])
    budgets = dataclasses.replace(BUDGETS, pull_grace_s=3600, run_s=5)
    outcome, _logger, _log, backend = run_stage(server, "convert", tmp_path, budgets)
    assert isinstance(outcome, StageFailed)
    assert outcome.diagnosis.code == "image/not-found", outcome.diagnosis.summary
    assert backend.monitor is not None
    assert list(backend.monitor.pull_errors.values()) == [NOT_FOUND]


@pytest.mark.parametrize(("message", "names"), [
    ("couldn't assign flavors to pod set main: resource cpu unavailable in ClusterQueue",
     "cpu"),
    ("LocalQueue tpu-lq doesn't exist", "tpu-lq"),
    ("ClusterQueue tpu-cq is inactive", "tpu-cq"),
])
def test_a_workload_kueue_cannot_admit_fails_at_once(server: FakeApiServer, tmp_path: Path,
                                                     message: str, names: str) -> None:
    """Kueue's words for a workload it cannot admit end the stage at once, naming what is
    missing, instead of after the whole queue budget (30 s here)."""
    reason = "Inadmissible" if "LocalQueue" in message else "Pending"
    kube = scenario(server.kube, [(0.1, pending(message, reason))])
    began = time.monotonic()
    outcome, *_ = run_stage(server, "convert", tmp_path)
    assert isinstance(outcome, StageFailed)
    d = outcome.diagnosis
    assert d.category is FailureCategory.USER_ERROR and d.code == "kueue/unschedulable"
    assert names in d.summary and names in d.fix
    assert time.monotonic() - began < 10
    assert no_jobsets_left(kube)


def test_the_status_line_follows_the_phase(server: FakeApiServer, tmp_path: Path) -> None:
    """Once admitted, the status line says so, never "is queued: Quota reserved in ..."."""
    # admitted for a second: the monitor ticks while it is, however loaded the machine
    script = [(0.1, reserve_quota), (0.4, admit), (1.0, start), (0.05, say("step 1")),
              (0.1, succeed)]
    scenario(server.kube, script)
    outcome, logger, _, _ = run_stage(server, "convert", tmp_path)
    assert not isinstance(outcome, StageFailed), outcome
    assert not any("queued: Quota reserved" in line for line in logger.lines)
    assert any("admitted by Kueue" in line for line in logger.lines)


def test_the_status_line_follows_an_eviction_before_the_quota_is_released(
        server: FakeApiServer, tmp_path: Path) -> None:
    """While Kueue stops an evicted job it keeps the reservation (Admitted=True): the status
    line says the job was evicted, not "admitted by Kueue, waiting for the JobSet to start"."""
    # warnings, which the run's log shows (flows/core/program_log.py), mark the attempts
    script = [(0.1, admit), (0.05, start), (0.05, say("WARNING: step 1")),
              (0.2, evict_releasing(0.6)), (1.0, admit), (0.05, start),
              (0.05, say("WARNING: step 2")), (0.1, succeed)]
    scenario(server.kube, script)
    outcome, logger, _, _ = run_stage(server, "convert", tmp_path)
    assert not isinstance(outcome, StageFailed), outcome
    lines = logger.lines
    # from when the watch saw the first attempt run (the status line and the program's log
    # arrive on separate streams, so either may come first)
    stopped = max(next(i for i, line in enumerate(lines) if "step 1" in line),
                  next(i for i, line in enumerate(lines) if line.endswith("is running")))
    requeued = next(i for i, line in enumerate(lines) if "re-queued" in line)
    window = lines[stopped:requeued]
    assert not any("waiting for the JobSet to start" in line for line in window), window
    assert any("evicted by Kueue" in line for line in window), window


def test_no_wait_for_the_log_of_a_coordinator_that_never_terminated(
        server: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a verdict the stage does not wait log_drain_s (10 s) for the log of a head
    whose program is still running (a worker crashed): that log cannot end."""
    from flows.backends.gke.watch.logs import LogFollower

    waits: list[float] = []
    real = LogFollower.wait_drained

    def spied(self: LogFollower, timeout_s: float) -> bool:
        waits.append(timeout_s)
        return real(self, timeout_s)
    monkeypatch.setattr(LogFollower, "wait_drained", spied)
    scenario(server.kube, [(0.1, admit), (0.05, start), (0.05, say("step 1")),
                           (0.1, worker_crashes)])
    outcome, *_ = run_stage(server, "train", tmp_path)
    assert isinstance(outcome, StageFailed)
    assert outcome.diagnosis.category is FailureCategory.INFRASTRUCTURE
    assert "pathways-worker exited with 1" in outcome.diagnosis.summary
    assert waits == []
