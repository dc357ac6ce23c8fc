"""A program that fails on its own, seen through a pod watch that lags the API server.

When the JobSet fails, its controller deletes the active Jobs; each live kubelet stops its
pods and deletes them (tests/fakes/kube_api/nodepools.py ``_kubelet_removes_deleted_pods``),
and only then can the autoscaler find the slice's nodes unneeded and remove them. A watch
that delivers late (a loaded client, a slow stream) can still hold the workers as running
when the nodes are already gone: the backend once read that as the slice lost under the
program, a preemption, and trained the user's broken reward again. A clean-clone CI run met
it (tests/backends/gke/test_capacity_pools.py, under load); this plays the same order on
purpose, every time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.core.failures import FailureCategory, StageFailed
from tests.fakes.gke_backend import BUDGETS, jobsets_created, run_stage
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.nodepools import Autoscaler, TpuPool
from tests.fakes.kube_api.scenarios import admit, exit_with, say, scenario, start, succeed
from tests.support.polling import until
from tests.support.profiles import fake_hf_token, tutorial_profile

PRICE = {"usd_per_chip_hour": "1.0", "source": "a quote", "as_of": "2026-12-01"}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("Lg4wQz81Rt"))
    with FakeApiServer(FakeKube()) as running:
        yield running


def hold(*plurals: str):
    def held(kube: FakeKube, _name: str) -> None:
        kube.held_watches.update(plurals)
    held.__name__ = "hold"
    return held


def release_after_the_slice_is_gone(scaler: Autoscaler):
    """Waits (in the scenario's thread) until the autoscaler removed the nodes, then lets the
    JobSet watch deliver its Failed condition while the pod watch still lags a moment."""
    def release(kube: FakeKube, _name: str) -> None:
        kube.cond.release()  # the script runs its action under the store's lock
        try:
            assert until(lambda: not scaler.nodes and scaler.peak_nodes == 8, within_s=30)
            with kube.cond:
                kube.held_watches.discard("jobsets")
            time.sleep(0.3)
            with kube.cond:
                kube.held_watches.discard("pods")
        finally:
            kube.cond.acquire()
    release.__name__ = "release"
    return release


def test_a_program_that_failed_is_its_own_failure_though_the_nodes_went_before_the_watch_saw_it(
        server: FakeApiServer, tmp_path: Path) -> None:
    scaler = Autoscaler(server.kube, TpuPool())
    try:
        scenario(server.kube, [
            (0.05, admit), (0.05, start),
            (0.05, say("Traceback (most recent call last):", "ValueError: bad reward")),
            (0.3, hold("jobsets", "pods")), (0.05, exit_with(1)),
            (0.05, release_after_the_slice_is_gone(scaler))])
        profile = tutorial_profile(**{"gke.capacity": "spot", "gke.reservation": "",
                                      **{f"gke.prices.spot.{k}": v for k, v in PRICE.items()}})
        outcome, logger, *_ = run_stage(server, "train", tmp_path, BUDGETS, profile=profile)
        assert isinstance(outcome, StageFailed), outcome
        assert outcome.diagnosis.category is not FailureCategory.PREEMPTED, logger.lines
        assert jobsets_created(server.kube) == 1, logger.lines  # never trained again
        assert not any("preempted" in line for line in logger.lines), logger.lines
    finally:
        scaler.stop()


def released(*plurals: str):
    def release(kube: FakeKube, _name: str) -> None:
        kube.held_watches.difference_update(plurals)
    release.__name__ = "release"
    return release


def test_a_preemption_the_pod_watch_has_not_delivered_is_still_a_preemption(
        server: FakeApiServer, tmp_path: Path) -> None:
    """The slice is reclaimed (DisruptionTarget on the pods, then the JobSet Failed, as
    scenarios.disrupt_and_fail writes them) while the pod watch lags from before the workers
    were bound: the JobSet watch delivers Failed first, and the watch's copies hold no pod on
    a lost node. A CI run under load met it (test_capacity_pools.py, the scenario takes well
    under a second): the backend called the reclaim the program's failure and did not
    resume. Read live once the JobSet failed, the pods say preempted; the resubmission
    resumes."""
    scaler = Autoscaler(server.kube, TpuPool())

    def reclaim(kube: FakeKube, _name: str) -> None:
        scaler.preempt()
    reclaim.__name__ = "reclaim"
    try:
        scenario(server.kube,
                 [(0.05, admit), (0.0, hold("pods")), (0.05, start),
                  (0.05, say("step 1", "saved checkpoint 1")), (0.3, reclaim)],
                 [(0.0, released("pods")), (0.05, admit), (0.05, start),
                  (0.05, say("restored checkpoint 1")), (0.1, succeed)])
        profile = tutorial_profile(**{"gke.capacity": "spot", "gke.reservation": "",
                                      **{f"gke.prices.spot.{k}": v for k, v in PRICE.items()}})
        outcome, logger, *_ = run_stage(server, "train", tmp_path, BUDGETS, profile=profile)
        assert not isinstance(outcome, StageFailed), (outcome, logger.lines)
        assert jobsets_created(server.kube) == 2, logger.lines  # resumed once
        assert any("preempted" in line for line in logger.lines), logger.lines
    finally:
        scaler.stop()
