"""Observed JobSet + Kueue Workload + pods → phase and failure category, table-driven.

The objects are shaped as the API returns them (only the fields the function reads)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from flows.backends.gke.watch.verdict import Phase, diagnose
from flows.core.failures import FailureCategory

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
LONG_AGO = "2026-01-01T10:00:00Z"  # two hours before NOW
JUST_NOW = "2026-01-01T11:59:00Z"
TRACEBACK = ["step 3", "Traceback (most recent call last):", '  File "x.py", line 1',
             "ValueError: ici_fsdp_parallelism does not divide the devices"]


def cond(kind: str, status: str = "True", reason: str = "", message: str = "",
         at: str = JUST_NOW) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": at}


def jobset(*conditions: dict[str, Any], suspend: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": "train-rl-x", "creationTimestamp": LONG_AGO},
            "spec": {"suspend": suspend}, "status": {"conditions": list(conditions)}}


def workload(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"conditions": list(conditions)}}


ADMITTED = workload(cond("QuotaReserved"), cond("Admitted"))


def pod(name: str = "train-rl-x-pathways-head-0-0", conditions: list | None = None,
        containers: list | None = None, init: list | None = None, **status: Any) -> dict:
    return {"metadata": {"name": name}, "spec": {"nodeName": "gke-node-1"},
            "status": {"conditions": conditions or [], "containerStatuses": containers or [],
                       "initContainerStatuses": init or [], **status}}


def terminated(name: str, code: int, reason: str = "Error") -> dict[str, Any]:
    return {"name": name, "state": {"terminated": {"exitCode": code, "reason": reason}}}


def waiting(name: str, reason: str) -> dict[str, Any]:
    return {"name": name, "state": {"waiting": {"reason": reason, "message": "pulling"}}}


CASES: list[tuple[str, dict, dict | None, list, list[str], Phase, FailureCategory | None]] = [
    ("completed", jobset(cond("Completed")), ADMITTED, [], [], Phase.SUCCEEDED, None),
    ("running", jobset(), ADMITTED, [pod()], [], Phase.RUNNING, None),
    ("queued within budget", jobset(suspend=True),
     workload(cond("QuotaReserved", "False", "Pending", "insufficient google.com/tpu",
                   at=JUST_NOW)), [], [], Phase.QUEUED, None),
    ("queued beyond budget", jobset(suspend=True),
     workload(cond("QuotaReserved", "False", "Pending", "insufficient google.com/tpu",
                   at=LONG_AGO)), [], [], Phase.FAILED, FailureCategory.QUEUE_TIMEOUT),
    ("kueue evicted (preempted)", jobset(suspend=True),
     workload(cond("Evicted", reason="Preempted", message="Preempted to accommodate a higher "
                   "priority Workload")), [], [], Phase.FAILED, FailureCategory.PREEMPTED),
    ("kueue preempted condition", jobset(), workload(cond("Preempted", reason="InClusterQueue")),
     [], [], Phase.FAILED, FailureCategory.PREEMPTED),
    ("pod disruption target", jobset(), ADMITTED,
     [pod(conditions=[cond("DisruptionTarget", reason="PreemptionByScheduler")],
          containers=[terminated("workload-container", 143)])], [], Phase.FAILED,
     FailureCategory.PREEMPTED),
    ("node maintenance", jobset(), ADMITTED,
     [pod(reason="Terminated", message="Pod was terminated in response to imminent node "
          "shutdown (NodeShutdown)")], [], Phase.FAILED, FailureCategory.PREEMPTED),
    ("image pull back-off", jobset(), ADMITTED,
     [pod(containers=[waiting("workload-container", "ImagePullBackOff")])], [], Phase.FAILED,
     FailureCategory.INFRASTRUCTURE),
    ("err image pull on a sidecar", jobset(), ADMITTED,
     [pod(init=[waiting("pathways-proxy", "ErrImagePull")])], [], Phase.FAILED,
     FailureCategory.INFRASTRUCTURE),
    ("unschedulable too long", jobset(), ADMITTED,
     [pod(conditions=[cond("PodScheduled", "False", "Unschedulable",
                           "0/3 nodes are available: Insufficient ephemeral-storage",
                           at=LONG_AGO)])], [], Phase.FAILED, FailureCategory.INFRASTRUCTURE),
    ("unschedulable briefly (autoscaler)", jobset(), ADMITTED,
     [pod(conditions=[cond("PodScheduled", "False", "Unschedulable", "scaling up")])], [],
     Phase.RUNNING, None),
    ("exit with traceback", jobset(cond("Failed", reason="PodFailurePolicy")), ADMITTED,
     [pod(containers=[terminated("workload-container", 1)])], TRACEBACK, Phase.FAILED,
     FailureCategory.USER_ERROR),
    ("exit with transient error", jobset(), ADMITTED,
     [pod(containers=[terminated("workload-container", 1)])],
     ["Traceback (most recent call last):", "  x",
      "google.api_core.exceptions.ServiceUnavailable: 503 GCS"], Phase.FAILED,
     FailureCategory.INFRASTRUCTURE),
    ("oom killed", jobset(), ADMITTED,
     [pod(containers=[terminated("workload-container", 137, "OOMKilled")])], [], Phase.FAILED,
     FailureCategory.USER_ERROR),
    ("disk over its request", jobset(), ADMITTED,
     [pod(reason="Evicted", message="Pod ephemeral local storage usage exceeds the total limit "
          "of containers 200Gi.")], [], Phase.FAILED, FailureCategory.USER_ERROR),
    ("pathways server crashed", jobset(), ADMITTED,
     [pod(init=[terminated("pathways-rm", 1)])], [], Phase.FAILED,
     FailureCategory.INFRASTRUCTURE),
    ("failed, no pods left", jobset(cond("Failed", reason="ReachedMaxRestarts")), ADMITTED, [],
     [], Phase.FAILED, FailureCategory.INFRASTRUCTURE),
]


@pytest.mark.parametrize(("label", "js", "wl", "pods", "tail", "phase", "category"), CASES,
                         ids=[c[0] for c in CASES])
def test_diagnose(label, js, wl, pods, tail, phase, category):
    verdict = diagnose(js, wl, pods, tail, now=NOW, queue_budget_s=3600)
    assert verdict.phase == phase, verdict
    assert (verdict.diagnosis.category if verdict.diagnosis else None) == category, verdict
    if verdict.diagnosis:
        assert verdict.diagnosis.summary and verdict.diagnosis.resolution


def test_user_error_names_the_exception():
    verdict = diagnose(jobset(), ADMITTED, [pod(containers=[terminated("workload-container", 1)])],
                       TRACEBACK, now=NOW, queue_budget_s=3600)
    assert verdict.diagnosis is not None
    assert "ici_fsdp_parallelism" in verdict.diagnosis.summary


def test_queue_timeout_carries_kueues_reason():
    verdict = diagnose(jobset(suspend=True), workload(cond("QuotaReserved", "False", "Pending",
                       "couldn't assign flavors: insufficient quota for google.com/tpu",
                       at=LONG_AGO)), [], [], now=NOW, queue_budget_s=600)
    assert verdict.diagnosis is not None and "insufficient quota" in verdict.diagnosis.summary
