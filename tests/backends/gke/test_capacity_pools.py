"""The GKE backend against a TPU pool that scales from zero (tests/fakes/kube_api/nodepools.py):
scale-up for an admitted training JobSet and back to zero after success or failure, CPU work
that never brings TPU nodes up, no capacity reported with the autoscaler's own message,
flex-start waiting for capacity and its maximum run duration, spot preemption resumed. (A
cancelled run's slice going back to zero is in test_cancel.py, beside the other
cancellation: it runs a flow child with its own Prefect API, a services-tier test.)"""

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
    jobsets_created,
    run_stage,
)
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.nodepools import Autoscaler, Reclaim, TpuPool
from tests.fakes.kube_api.scenarios import admit, exit_with, say, scenario, start, succeed
from tests.fakes.kube_api.tpu_nodes import MODE_LABELS
from tests.support.polling import until
from tests.support.profiles import fake_hf_token, tutorial_profile

PRICE = {"usd_per_chip_hour": "1.0", "source": "a quote", "as_of": "2026-12-01"}


def mode_profile(mode: str):
    extra = {"gke.capacity": mode, "gke.reservation": "",
             **{f"gke.prices.{mode}.{k}": v for k, v in PRICE.items()}}
    if mode == "flex-start":
        extra["gke.max_run_hours"] = "5"
    return tutorial_profile(**extra)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("Qx7kP2mZ9v"))
    with FakeApiServer(FakeKube()) as running:
        yield running


def pool_on(server: FakeApiServer, mode: str = "on-demand", **settings
            ) -> tuple[Autoscaler, TpuPool]:
    """The tutorial's slice as a pool of ``mode``, its nodes labelled as GKE labels that mode's
    (tpu_nodes.MODE_LABELS)."""
    pool = TpuPool(labels=dict(MODE_LABELS.get(mode, {})), **settings)
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
    # the nodes take 2 s to come (minutes on GKE): the monitor's look at the pending pod must
    # fall inside it to report the scale-up (0.3 s was once too short under CI's load)
    scaler, pool = pool_on(server, "on-demand", provision_s=2.0)
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
    scaler, pool = pool_on(server, "on-demand")
    try:
        scenario(server.kube, RUN)
        outcome, *_ = run_stage(server, "convert", tmp_path, profile=mode_profile("on-demand"))
        assert not isinstance(outcome, StageFailed), outcome
        assert scaler.peak_nodes == 0 and [n for _, n in pool.history] == [0]
    finally:
        scaler.stop()


def test_a_failed_run_leaves_no_tpu_node_behind(server, tmp_path: Path) -> None:
    scaler, _pool = pool_on(server, "spot")
    try:
        scenario(server.kube, [(0.05, admit), (0.05, start),
                               (0.05, say("Traceback (most recent call last):",
                                          "ValueError: bad reward")), (0.1, exit_with(1))])
        # A loaded machine once saw this resubmitted as a preemption (the pod watch still held
        # the workers as running when the scaled-down nodes were gone) and the resubmission
        # time out in the queue: tests/backends/gke/watch/test_lagging_watch.py plays that.
        outcome, *_ = run_stage(server, "train", tmp_path, profile=mode_profile("spot"))
        assert isinstance(outcome, StageFailed)
        assert outcome.diagnosis.category is FailureCategory.USER_ERROR, outcome.diagnosis
        assert scaler.peak_nodes == 8 and until(lambda: not scaler.nodes)
    finally:
        scaler.stop()


def test_no_capacity_fails_with_the_autoscalers_message_and_holds_nothing(server,
                                                                         tmp_path: Path) -> None:
    scaler, _pool = pool_on(server, "on-demand", stockout=True)
    # 5 s: the first attempt fails 0.3 s after the autoscaler's thread sees the pod, and the
    # budget may end a second early (the PodScheduled lastTransitionTime has whole seconds).
    # With 2 s, a loaded 2-core machine once starved that thread past the budget, which then
    # named only the unschedulable pod.
    budgets = dataclasses.replace(BUDGETS, schedule_s=5.0)
    try:
        scenario(server.kube, RUN)
        outcome, *_ = run_stage(server, "train", tmp_path, budgets,
                                profile=mode_profile("on-demand"))
        assert isinstance(outcome, StageFailed), outcome
        diagnosis = outcome.diagnosis
        assert diagnosis.category is FailureCategory.INFRASTRUCTURE
        assert ("Node scale up in zones us-east5-b associated with this pod failed: GCE out of "
                "resources" in diagnosis.summary), diagnosis.summary
        assert "flex-start waits for capacity" in diagnosis.fix
        assert scaler.peak_nodes == 0
        assert until(lambda: not server.kube.find("jobsets"))  # quota released
    finally:
        scaler.stop()


@pytest.mark.parametrize("mode", ["on-demand", "flex-start"])
def test_the_stockout_cause_survives_the_autoscalers_next_attempt(server, tmp_path: Path,
                                                                  mode: str) -> None:
    """The budget ends while the autoscaler retries after its back-off: the summary names the
    FailedScaleUp's cause although a newer TriggeredScaleUp follows it, not the generic "the
    node pool lacks capacity" (nor, on flex-start, the newest event's words)."""
    # first attempt fails at 0.2 s; the next starts 1.1 s later (a later second, so its
    # TriggeredScaleUp is the newest event) and is still provisioning when the budget ends
    # (5 to 6 s: lastTransitionTime has whole seconds; at 3 s a loaded machine was once
    # seen to end the budget before the autoscaler's thread had started the next attempt)
    scaler, pool = pool_on(server, mode, stockout=True, provision_s=0.2, scale_up_backoff_s=1.1)
    flex = mode == "flex-start"
    budgets = dataclasses.replace(BUDGETS, schedule_s=6.0, queue_s=6.0 if flex else 30,
                                  waits_for_capacity=flex)
    try:
        threading.Thread(target=lambda: until(lambda: _seen(server, "FailedScaleUp"), within_s=30)
                         and setattr(pool, "provision_s", 60.0), daemon=True).start()
        scenario(server.kube, RUN)
        outcome, *_ = run_stage(server, "train", tmp_path, budgets, profile=mode_profile(mode))
        assert isinstance(outcome, StageFailed), outcome
        assert _seen(server, "TriggeredScaleUp", count=2)  # it ended during the next attempt
        summary = outcome.diagnosis.summary
        assert "GCE out of resources" in summary and "us-east5-b" in summary, summary
    finally:
        scaler.stop()


def _seen(server: FakeApiServer, reason: str, count: int = 1) -> bool:
    """The autoscaler recorded ``reason`` on a pod at least ``count`` times."""
    return any(int(e.get("count") or 1) >= count for e in server.kube.find("events")
               if e.get("reason") == reason)


def test_flex_start_waits_for_capacity_under_the_queue_budget(server, tmp_path: Path) -> None:
    scaler, pool = pool_on(server, "flex-start", stockout=True)
    # the queue budget is far above the 1.5 s the stockout lasts (the run ends as soon as
    # the nodes come), so a loaded machine's slower scale-up cannot run it out
    budgets = dataclasses.replace(BUDGETS, schedule_s=0.5, queue_s=20.0, waits_for_capacity=True)
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
    scaler, _pool = pool_on(server, "flex-start", stockout=True)
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
    scaler, pool = pool_on(server, "flex-start", max_run_s=1.0)
    try:
        scenario(server.kube, INTERRUPTED, RESUMED)
        outcome, *_ = run_stage(server, "train", tmp_path, profile=mode_profile("flex-start"))
        assert not isinstance(outcome, StageFailed), outcome
        assert outcome.submissions == 2 and outcome.preemptions == 1
        assert [n for _, n in pool.history][:4] == [0, 8, 0, 8]
    finally:
        scaler.stop()


def test_spot_preemption_resumes_and_is_reported(server, tmp_path: Path) -> None:
    scaler, _pool = pool_on(server, "spot")
    try:
        scenario(server.kube, INTERRUPTED, RESUMED)
        preempt_once_it_ran(server, scaler)
        outcome, *_ = run_stage(server, "train", tmp_path, profile=mode_profile("spot"))
        assert not isinstance(outcome, StageFailed), outcome
        assert scaler.preemptions == 1 and jobsets_created(server.kube) == 2
        assert outcome.preemptions == 1 and outcome.preempted_chip_hours > 0
        assert until(lambda: not scaler.nodes)
    finally:
        scaler.stop()


def preempt_once_it_ran(server: FakeApiServer, scaler: Autoscaler) -> None:
    """Reclaim the slice once the program has printed (its checkpoint is saved)."""
    def reclaim() -> None:
        if until(lambda: "log" in server.kube.action_times and scaler.nodes, within_s=60):
            scaler.preempt()
    threading.Thread(target=reclaim, daemon=True).start()


@pytest.mark.parametrize("reclaim", [
    Reclaim(kubelet_posts=True, pod_gc_s=0.4),  # kubelet marked the pods, PodGC removed them
    Reclaim(kubelet_posts=False, pod_gc_s=0.4),  # the VM went silently; PodGC marked them
    Reclaim(kubelet_posts=False, pod_gc_s=None),  # silent, and PodGC has not run yet
], ids=["kubelet-then-podgc", "podgc-only", "node-gone-only"])
def test_a_spot_reclaim_the_program_notices_late_is_a_preemption(server, tmp_path: Path,
                                                                  reclaim: Reclaim) -> None:
    """The Pathways head gives up on its lost workers (its own timeout) after PodGC deleted
    them: the disruption is remembered as the watch saw it, so the verdict is a preemption
    (retried), not a user error read from the head's exit alone."""
    scaler, _pool = pool_on(server, "spot", reclaim=reclaim)
    try:
        scenario(server.kube, INTERRUPTED, RESUMED)
        preempt_once_it_ran(server, scaler)
        outcome, logger, _log, _backend = run_stage(server, "train", tmp_path,
                                                     profile=mode_profile("spot"))
        assert not isinstance(outcome, StageFailed), outcome.diagnosis.summary
        assert outcome.preemptions == 1 and jobsets_created(server.kube) == 2
        assert any("preempted: resubmitting" in line for line in logger.lines)
    finally:
        scaler.stop()
