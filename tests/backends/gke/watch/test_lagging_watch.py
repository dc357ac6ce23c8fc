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

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.backends.gke.watch.spend import SpendMeter, requests_tpu
from flows.core.failures import FailureCategory, StageFailed
from flows.core.layout import Layout
from flows.core.programs import train_workload
from flows.core.storage import file_uri
from tests.fakes.gke_backend import BUDGETS, ListLogger, jobsets_created, make_backend, run_stage
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.nodepools import Autoscaler, Reclaim, TpuPool
from tests.fakes.kube_api.scenarios import admit, exit_with, say, scenario, start, succeed
from tests.fakes.kube_api.tpu_nodes import MODE_LABELS
from tests.support.polling import until
from tests.support.profiles import fake_hf_token, tutorial_profile

PRICE = {"usd_per_chip_hour": "1.0", "source": "a quote", "as_of": "2026-12-01"}


def spot_pool() -> TpuPool:
    """The tutorial's slice as a spot pool: its nodes carry GKE's spot label."""
    return TpuPool(labels=dict(MODE_LABELS["spot"]))


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


@contextlib.contextmanager
def unlocked(kube: FakeKube) -> Iterator[None]:
    """A scenario's action runs under the store's lock: one that waits for the fake
    cluster's controllers lets it go meanwhile."""
    kube.cond.release()
    try:
        yield
    finally:
        kube.cond.acquire()


def tpu_workers(kube: FakeKube) -> list[dict]:
    return [p for p in kube.find("pods") if requests_tpu(p)]


def release_after_the_slice_is_gone(scaler: Autoscaler):
    """Waits (in the scenario's thread) until the autoscaler removed the nodes, then lets the
    JobSet watch deliver its Failed condition while the pod watch still lags a moment."""
    def release(kube: FakeKube, _name: str) -> None:
        with unlocked(kube):
            assert until(lambda: not scaler.nodes and scaler.peak_nodes == 8, within_s=30)
            with kube.cond:
                kube.held_watches.discard("jobsets")
            time.sleep(0.3)
            with kube.cond:
                kube.held_watches.discard("pods")
    release.__name__ = "release"
    return release


def test_a_program_that_failed_is_its_own_failure_though_the_nodes_went_before_the_watch_saw_it(
        server: FakeApiServer, tmp_path: Path) -> None:
    scaler = Autoscaler(server.kube, spot_pool())
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


def trains_again_after_a_preemption(server: FakeApiServer, tmp_path: Path,
                                    drain_s: float | None = None) -> None:
    """The tutorial's slice on spot runs its scenario: a preemption, then one resubmission
    that succeeds (``drain_s``: the log drain budget, the tests' own unless given)."""
    profile = tutorial_profile(**{"gke.capacity": "spot", "gke.reservation": "",
                                  **{f"gke.prices.spot.{k}": v for k, v in PRICE.items()}})
    budgets = BUDGETS if drain_s is None else dataclasses.replace(BUDGETS, log_drain_s=drain_s)
    outcome, logger, *_ = run_stage(server, "train", tmp_path, budgets, profile=profile)
    assert not isinstance(outcome, StageFailed), (outcome, logger.lines)
    assert jobsets_created(server.kube) == 2, logger.lines  # resumed once
    assert any("preempted" in line for line in logger.lines), logger.lines


def test_a_preemption_the_pod_watch_has_not_delivered_is_still_a_preemption(
        server: FakeApiServer, tmp_path: Path) -> None:
    """The slice is reclaimed (DisruptionTarget on the pods, then the JobSet Failed, as
    scenarios.disrupt_and_fail writes them) while the pod watch lags from before the workers
    were bound: the JobSet watch delivers Failed first, and the watch's copies hold no pod on
    a lost node. A CI run under load met it (test_capacity_pools.py, the scenario takes well
    under a second): the backend called the reclaim the program's failure and did not
    resume. Read live once the JobSet failed, the pods say preempted; the resubmission
    resumes."""
    scaler = Autoscaler(server.kube, spot_pool())

    def reclaim(kube: FakeKube, _name: str) -> None:
        scaler.preempt()
    reclaim.__name__ = "reclaim"
    try:
        scenario(server.kube,
                 [(0.05, admit), (0.0, hold("pods")), (0.05, start),
                  (0.05, say("step 1", "saved checkpoint 1")), (0.3, reclaim)],
                 [(0.0, released("pods")), (0.05, admit), (0.05, start),
                  (0.05, say("restored checkpoint 1")), (0.1, succeed)])
        trains_again_after_a_preemption(server, tmp_path)
    finally:
        scaler.stop()


# the head's last lines are read well before; the monitor waits for the pods up to the log
# drain budget, here far beyond it, so a busy machine's late threads still fit
LAGS_BEYOND_THE_LOG_S = 3.0
DRAIN_S = 15.0


def release_pods_once_the_head_gave_up(kube: FakeKube, _name: str) -> None:
    """Waits (in the scenario's thread) until the Pathways head gave up and failed the
    JobSet, then lets the pod watch deliver what it held, after the head's log was read to
    its end."""
    with unlocked(kube):
        assert until(lambda: "head_gives_up" in kube.action_times, within_s=30)
        time.sleep(LAGS_BEYOND_THE_LOG_S)
        with kube.cond:
            kube.held_watches.discard("pods")


def test_a_slice_podgc_cleared_behind_a_lagging_pod_watch_is_still_a_preemption(
        server: FakeApiServer, tmp_path: Path) -> None:
    """The VMs go before any kubelet posts a thing; PodGC marks the orphaned workers
    DeletionByPodGC and deletes them; then the Pathways head gives up and fails the JobSet
    (reclaim.py has the sources). The pod watch lags through all of it, so when the JobSet's
    Failed arrives the live pods hold no worker on a lost node (PodGC deleted them) and the
    watch's copies no disruption: only the versions the pod watch has yet to deliver say
    what happened. A clean-clone CI run under load met it (benchmarks/gke_watch.py's
    spot-reclaim race) and called the reclaim the program's own failure."""
    pool = TpuPool(labels=dict(MODE_LABELS["spot"]),
                   reclaim=Reclaim(kubelet_posts=False, pod_gc_s=0.3, program_gives_up_s=0.8))
    scaler = Autoscaler(server.kube, pool)

    def reclaim(kube: FakeKube, _name: str) -> None:
        with unlocked(kube):
            assert until(lambda: bool(scaler.nodes), within_s=30)
        kube.held_watches.add("pods")
        scaler._end_nodes("preempted")
    reclaim.__name__ = "reclaim"
    try:
        scenario(server.kube,
                 [(0.05, admit), (0.05, start), (0.05, say("step 1", "saved checkpoint 1")),
                  (0.1, reclaim), (0.0, release_pods_once_the_head_gave_up), (30.0, succeed)],
                 [(0.05, admit), (0.05, start), (0.05, say("restored checkpoint 1")),
                  (0.1, succeed)])
        trains_again_after_a_preemption(server, tmp_path, drain_s=DRAIN_S)
    finally:
        scaler.stop()


def bound_for(seconds: float):
    """Waits (in the scenario's thread) until the pool bound every TPU worker, then
    ``seconds`` more: the slice held for at least that long before the program ends."""
    def once_the_slice_is_bound(kube: FakeKube, _name: str) -> None:
        with unlocked(kube):
            assert until(lambda: (workers := tpu_workers(kube))
                         and all(p["spec"].get("nodeName") for p in workers), within_s=30)
            time.sleep(seconds)
    return once_the_slice_is_bound


def release_once_the_workers_are_gone(kube: FakeKube, _name: str) -> None:
    """Waits until the JobSet controller's clean-up and the kubelets deleted every TPU worker
    (tests/fakes/kube_api/nodepools.py), then lets both watches deliver what they held."""
    with unlocked(kube):
        assert until(lambda: not tpu_workers(kube), within_s=30)
    released("jobsets", "pods")(kube, _name)


HELD_S = 3.0
RELEASES = {  # when the lagging watches deliver, against the program's end
    "before the program ends": [(0.0, released("jobsets", "pods")), (0.3, succeed)],
    "once its pods are deleted": [(0.3, succeed), (0.0, release_once_the_workers_are_gone)],
}


@pytest.mark.parametrize("release", RELEASES)
def test_a_slice_bound_behind_a_lagging_watch_is_charged_from_its_binding(
        server: FakeApiServer, tmp_path: Path, release: str) -> None:
    """The JobSet and pod watches deliver nothing from admission until the slice has been
    bound for 3 s (a CI run's fault schedule dropped them for as long): then the program
    succeeds, or it had succeeded and the JobSet controller's clean-up had deleted the
    workers, which no look saw. The ticks went on with the watch's stale copies, so charging
    from the previous tick charged a fraction of what GCP billed, and nothing at all in the
    second order. The pods' record (PodScheduled's time, written at the binding; the last
    version the watch delivered of a deleted pod) charges the slice from its binding."""
    scaler = Autoscaler(server.kube, spot_pool())
    try:
        scenario(server.kube, [
            (0.05, admit), (0.0, hold("jobsets", "pods")), (0.05, start),
            (0.05, say("step 1")), (0.0, bound_for(HELD_S)), *RELEASES[release]])
        profile = tutorial_profile(**{"gke.capacity": "spot", "gke.reservation": "",
                                      **{f"gke.prices.spot.{k}": v for k, v in PRICE.items()}})
        logger = ListLogger()
        backend = make_backend(server.url, "train", tmp_path, logger, BUDGETS, profile)
        gke = profile.gke
        assert gke is not None
        meter = SpendMeter("train", gke.total_chips, 1.0, False, None, None,
                           key=str(tmp_path))
        backend.spend = meter
        backend.run_workload(train_workload(profile, Layout(profile), backend.runtime),
                             file_uri(tmp_path / "train.log"))
        # held 3 s and more, less the record's whole seconds: the binding is read as the
        # second's end (up to a second lost), a deleted pod's finishedAt as the second's start
        # (another); never more than the nodes lived
        charged_chip_s = meter.spent_usd * 3600
        assert charged_chip_s >= gke.total_chips * (HELD_S - 2.0), (meter, logger.lines)
        assert charged_chip_s <= scaler.node_seconds() * gke.chips_per_host + \
            gke.total_chips * 1.0, (meter, scaler.node_seconds())
    finally:
        scaler.stop()
