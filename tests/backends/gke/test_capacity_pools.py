"""The GKE backend against a TPU pool that scales from zero (tests/fakes/kube_api/nodepools.py):
scale-up for an admitted training JobSet and back to zero after success or failure, CPU work
that never brings TPU nodes up, no capacity reported with the autoscaler's own message,
flex-start waiting for capacity and its maximum run duration, spot preemption resumed."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.core.failures import FailureCategory, StageFailed
from tests.fakes.gke_backend import (
    BUDGETS,
    cancel_like_the_runner,
    child_is_running,
    flow_child,
    jobsets_created,
    run_stage,
)
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.nodepools import Autoscaler, TpuPool
from tests.fakes.kube_api.scenarios import admit, exit_with, say, scenario, start, succeed
from tests.support.polling import until
from tests.support.profiles import tutorial_profile

PRICE = {"usd_per_chip_hour": "1.0", "source": "a quote", "as_of": "2026-12-01"}


def mode_profile(mode: str):
    extra = {"gke.capacity": mode, "gke.reservation": "",
             **{f"gke.prices.{mode}.{k}": v for k, v in PRICE.items()}}
    if mode == "flex-start":
        extra["gke.max_run_hours"] = "5"
    return tutorial_profile(**extra)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", "hf_capacity_test_token_not_a_secret")
    with FakeApiServer(FakeKube()) as running:
        yield running


def pool_on(server: FakeApiServer, **settings) -> tuple[Autoscaler, TpuPool]:
    pool = TpuPool(**settings)
    return Autoscaler(server.kube, pool), pool


RUN = [(0.05, admit), (0.05, start), (0.05, say("step 1", "saved checkpoint 1")),
       (0.1, succeed)]
# A run still going when its nodes end (it would succeed only after 5 s), and the
# resubmission that resumes from the checkpoint the first one saved.
INTERRUPTED = [(0.05, admit), (0.05, start), (0.05, say("step 1", "saved checkpoint 1")),
               (5.0, succeed)]
RESUMED = [(0.05, admit), (0.05, start), (0.05, say("restored checkpoint 1")), (0.1, succeed)]


def test_training_scales_the_slice_up_from_zero_and_back_after_success(server, tmp_path: Path
                                                                       ) -> None:
    scaler, pool = pool_on(server)
    try:
        scenario(server.kube, RUN)
        outcome, logger, _log, _backend = run_stage(server, "train", tmp_path,
                                                    profile=mode_profile("on-demand"))
        assert not isinstance(outcome, StageFailed), outcome
        assert scaler.peak_nodes == 8
        assert any("waiting for nodes: TriggeredScaleUp: pod triggered scale-up" in line
                   for line in logger.lines), logger.lines
        assert until(lambda: not scaler.nodes)  # the autoscaler removed the slice
        assert [n for _, n in pool.history] == [0, 8, 0]
    finally:
        scaler.stop()


def test_cpu_work_never_brings_tpu_nodes_up(server, tmp_path: Path) -> None:
    scaler, pool = pool_on(server)
    try:
        scenario(server.kube, RUN)
        outcome, *_ = run_stage(server, "convert", tmp_path, profile=mode_profile("on-demand"))
        assert not isinstance(outcome, StageFailed), outcome
        assert scaler.peak_nodes == 0 and [n for _, n in pool.history] == [0]
    finally:
        scaler.stop()


def test_a_failed_run_leaves_no_tpu_node_behind(server, tmp_path: Path) -> None:
    scaler, _pool = pool_on(server)
    try:
        scenario(server.kube, [(0.05, admit), (0.05, start),
                               (0.05, say("Traceback (most recent call last):",
                                          "ValueError: bad reward")), (0.1, exit_with(1))])
        outcome, *_ = run_stage(server, "train", tmp_path, profile=mode_profile("spot"))
        assert isinstance(outcome, StageFailed)
        assert outcome.diagnosis.category is FailureCategory.USER_ERROR
        assert scaler.peak_nodes == 8 and until(lambda: not scaler.nodes)
    finally:
        scaler.stop()


def test_no_capacity_fails_with_the_autoscalers_message_and_holds_nothing(server,
                                                                         tmp_path: Path) -> None:
    scaler, _pool = pool_on(server, stockout=True)
    budgets = dataclasses.replace(BUDGETS, schedule_s=1.0)
    try:
        scenario(server.kube, RUN)
        outcome, *_ = run_stage(server, "train", tmp_path, budgets,
                                profile=mode_profile("on-demand"))
        assert isinstance(outcome, StageFailed), outcome
        diagnosis = outcome.diagnosis
        assert diagnosis.category is FailureCategory.INFRASTRUCTURE
        assert ("Node scale up in zones us-east5-b associated with this pod failed: GCE out of "
                "resources" in diagnosis.summary), diagnosis.summary
        assert "flex-start waits for capacity" in diagnosis.resolution
        assert scaler.peak_nodes == 0
        assert until(lambda: not server.kube.find("jobsets"))  # quota released
    finally:
        scaler.stop()


def test_flex_start_waits_for_capacity_under_the_queue_budget(server, tmp_path: Path) -> None:
    scaler, pool = pool_on(server, stockout=True)
    budgets = dataclasses.replace(BUDGETS, schedule_s=0.5, queue_s=3.0, waits_for_capacity=True)
    try:
        scenario(server.kube, RUN)
        started = time.monotonic()
        threading.Timer(1.5, lambda: setattr(pool, "stockout", False)).start()
        outcome, *_ = run_stage(server, "train", tmp_path, budgets,
                                profile=mode_profile("flex-start"))
        assert not isinstance(outcome, StageFailed), outcome  # capacity came after 1.5 s
        assert time.monotonic() - started > 1.5 and scaler.peak_nodes == 8
    finally:
        scaler.stop()


def test_flex_start_gives_up_after_the_queue_budget_with_nothing_spent(server,
                                                                      tmp_path: Path) -> None:
    scaler, _pool = pool_on(server, stockout=True)
    budgets = dataclasses.replace(BUDGETS, schedule_s=0.5, queue_s=1.5, waits_for_capacity=True)
    try:
        scenario(server.kube, RUN)
        outcome, *_ = run_stage(server, "train", tmp_path, budgets,
                                profile=mode_profile("flex-start"))
        assert isinstance(outcome, StageFailed)
        assert outcome.diagnosis.category is FailureCategory.QUEUE_TIMEOUT
        assert "flex-start capacity" in outcome.diagnosis.summary
    finally:
        scaler.stop()


def test_flex_start_nodes_end_at_their_maximum_run_and_training_resumes(server,
                                                                       tmp_path: Path) -> None:
    scaler, pool = pool_on(server, max_run_s=1.0)
    try:
        scenario(server.kube, INTERRUPTED, RESUMED)
        outcome, *_ = run_stage(server, "train", tmp_path, profile=mode_profile("flex-start"))
        assert not isinstance(outcome, StageFailed), outcome
        assert outcome.submissions == 2 and outcome.preemptions == 1
        assert [n for _, n in pool.history][:4] == [0, 8, 0, 8]
    finally:
        scaler.stop()


def test_spot_preemption_resumes_and_is_reported(server, tmp_path: Path) -> None:
    scaler, _pool = pool_on(server)
    try:
        scenario(server.kube, INTERRUPTED, RESUMED)
        threading.Timer(1.0, scaler.preempt).start()
        outcome, *_ = run_stage(server, "train", tmp_path, profile=mode_profile("spot"))
        assert not isinstance(outcome, StageFailed), outcome
        assert scaler.preemptions == 1 and jobsets_created(server.kube) == 2
        assert outcome.preemptions == 1 and outcome.preempted_chip_hours > 0
        assert until(lambda: not scaler.nodes)
    finally:
        scaler.stop()


def test_a_cancelled_run_leaves_no_tpu_node_behind(server, tmp_path: Path) -> None:
    """Prefect's cancellation (the runner's SIGTERM to the flow process, as in
    test_cancel.py) deletes the JobSet; its pods go and the autoscaler removes the slice."""
    scaler, pool = pool_on(server)
    kube = scenario(server.kube, [(0.1, admit), (0.05, start), (0.05, say("step 1")),
                                  (60, say("never"))])
    try:
        with flow_child(server.url, tmp_path) as child:
            assert until(lambda: scaler.nodes and child_is_running(tmp_path), within_s=120)
            cancel_like_the_runner(child)
        assert until(lambda: not kube.find("jobsets") and not scaler.nodes, within_s=10)
        assert [n for _, n in pool.history] == [0, 8, 0]
    finally:
        scaler.stop()
