"""A Kueue eviction says what happened and whether Kueue re-queues it (kueue v0.15.2; the
fake, tests/fakes/kube_api/kueue_evictions.py, posts the conditions in Kueue's order).

Before: every Evicted Workload read "evicted by Kueue (...); re-queued", and a deactivated
one, which Kueue never re-queues, waited out the queue budget (hours) as "queued"."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke.watch.kueue import DEACTIVATED_CODE, status_line
from flows.backends.gke.watch.verdict import Observation, Phase, Verdict, diagnose
from flows.core.budgets import Budgets
from flows.core.failures import FailureCategory, StageFailed
from tests.fakes.gke_backend import BUDGETS, jobsets_created, no_jobsets_left, run_stage
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.kueue_evictions import deactivate, kueue_evicts
from tests.fakes.kube_api.scenarios import admit, say, scenario, start, succeed
from tests.support.profiles import fake_hf_token


def judge(jobset: dict[str, Any], workload: dict[str, Any] | None, pods: list[dict[str, Any]],
          tail: list[str], *, now: datetime, queue_budget_s: float, **seen: Any) -> Verdict:
    """The verdict on what a watch saw, under the default budgets but the queue budget."""
    return diagnose(Observation(jobset, workload, pods, tail, **seen),
                    Budgets(queue_s=queue_budget_s), now)

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
AT = "2026-01-01T11:59:00Z"
JOBSET = {"metadata": {"name": "train-rl-x", "creationTimestamp": AT},
          "spec": {"suspend": True}, "status": {"conditions": []}}


def released(reason: str, message: str, requeued: str, **status: Any) -> dict[str, Any]:
    """A Workload as reconciler.go "handle eviction" leaves it once its pods are gone."""
    conds = [{"type": "Evicted", "status": "True", "reason": reason, "message": message},
             {"type": "Requeued", "status": requeued, "reason": reason, "message": message},
             {"type": "QuotaReserved", "status": "False", "reason": "Pending",
              "message": message},
             {"type": "Admitted", "status": "False", "reason": "NoReservation"}]
    for c in conds:
        c["lastTransitionTime"] = AT
    return {"metadata": {"name": "jobset-train-rl-x-1"}, "spec": {"queueName": "tpu-lq"},
            "status": {"conditions": conds, **status}}


@pytest.mark.parametrize(("reason", "message", "requeued", "says"), [
    ("Preempted", "Preempted to accommodate a workload", "True", "; re-queued, "),
    ("PodsReadyTimeout", "Exceeded the PodsReady timeout default/x", "False",
     "Kueue re-queues it after its back-off (at 2026-01-01T12:05:00Z)"),
    ("AdmissionCheck", "At least one admission check is false", "False",
     "Kueue re-queues it after its back-off"),
    ("ClusterQueueStopped", "The ClusterQueue is stopped", "False",
     "only once the ClusterQueue is started again"),
])
def test_a_re_queued_eviction_waits_and_says_when_kueue_re_queues_it(
        reason: str, message: str, requeued: str, says: str) -> None:
    wl = released(reason, message, requeued,
                  requeueState={"count": 1, "requeueAt": "2026-01-01T12:05:00Z"})
    verdict = judge(JOBSET, wl, [], [], now=NOW, queue_budget_s=3600)
    assert verdict.phase is Phase.QUEUED, verdict
    assert f"({reason}: {message})" in verdict.reason and says in verdict.reason
    assert ("re-queued," in verdict.reason) is (requeued == "True"), verdict.reason


@pytest.mark.parametrize(("reason", "category", "names"), [
    ("Deactivated", FailureCategory.CANCELLED, "spec.active to false"),
    ("DeactivatedDueToRequeuingLimitExceeded", FailureCategory.INFRASTRUCTURE,
     "waitForPodsReady"),
    ("DeactivatedDueToMaximumExecutionTimeExceeded", FailureCategory.USER_ERROR,
     "maximum execution time"),
    ("DeactivatedDueToAdmissionCheck", FailureCategory.INFRASTRUCTURE, "admission check"),
])
def test_a_deactivated_workload_fails_at_once_and_says_it_is_not_re_queued(
        reason: str, category: FailureCategory, names: str) -> None:
    wl = released(reason, "The workload is deactivated", "False")
    verdict = judge(JOBSET, wl, [], [], now=NOW, queue_budget_s=3600)
    assert verdict.phase is Phase.FAILED and verdict.diagnosis is not None, verdict
    d = verdict.diagnosis
    assert d.category is category and d.code == DEACTIVATED_CODE
    assert names in d.summary and "does not re-queue" in d.summary and d.fix
    assert "re-queued," not in status_line(wl)[0]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("kueueevictions"))
    with FakeApiServer(FakeKube()) as srv:
        yield srv


@pytest.mark.parametrize("cause", ["", "RequeuingLimitExceeded"])
def test_a_deactivation_on_the_cluster_ends_the_stage_and_the_jobset(
        server: FakeApiServer, tmp_path: Path, cause: str) -> None:
    script = [(0.1, admit), (0.05, start), (0.05, say("step 1")), (0.1, deactivate(cause))]
    kube = scenario(server.kube, script)
    outcome, _, _, _ = run_stage(server, "train", tmp_path)
    assert isinstance(outcome, StageFailed), outcome
    assert outcome.diagnosis.code == DEACTIVATED_CODE, outcome.diagnosis
    assert "does not re-queue" in outcome.diagnosis.summary
    assert jobsets_created(kube) == 1
    assert no_jobsets_left(kube), "a deactivated Workload's JobSet would run unwatched"


def test_a_pods_ready_timeout_waits_out_kueues_back_off_then_runs_again(
        server: FakeApiServer, tmp_path: Path) -> None:
    evict = kueue_evicts("PodsReadyTimeout", "Exceeded the PodsReady timeout default/x",
                         release_s=0.2, backoff_s=0.5)
    script = [(0.1, admit), (0.05, start), (0.05, evict), (0.8, admit), (0.05, start),
              (0.05, say("step 2")), (0.1, succeed)]
    kube = scenario(server.kube, script)
    outcome, logger, _, _ = run_stage(server, "train", tmp_path, BUDGETS)
    assert not isinstance(outcome, StageFailed), outcome
    assert jobsets_created(kube) == 1
    lines = "\n".join(logger.lines)
    assert "evicted by Kueue (PodsReadyTimeout" in lines, lines
    assert "Kueue re-queues it after its back-off" in lines, lines
