"""JobSets, Workloads, pods and autoscaler events shaped as the Kubernetes API returns them
(only the fields flows/backends/gke/watch/verdict.py reads; the API omits empty fields), and
``judge``: ``diagnose`` at a fixed now under given budgets. For the pure verdict tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from flows.backends.gke.watch.verdict import Observation, Phase, Verdict, diagnose
from flows.core.budgets import Budgets
from flows.core.failures import FailureCategory

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
NAME = "train-rl-x"
HEAD = "train-rl-x-pathways-head-0-0"
WORKER = "train-rl-x-worker-0-0"
PROGRAM = "workload-container"


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def cond(kind: str, status: str = "True", reason: str = "", message: str = "",
         at_s: float = 60.0) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": ago(at_s)}


def jobset(*conditions: dict[str, Any], suspend: bool = False,
           created_s: float = 7200.0) -> dict[str, Any]:
    return {"metadata": {"name": NAME, "creationTimestamp": ago(created_s)},
            "spec": {"suspend": suspend}, "status": {"conditions": list(conditions)}}


ADMITTED = {"status": {"conditions": [cond("QuotaReserved"), cond("Admitted")]}}
FAILED = cond("Failed", reason="FailedJobs", message="jobset failed")


def pod(name: str = HEAD, conditions: list | None = None, containers: list | None = None,
        init: list | None = None, deleting: bool = False, node: str | None = "gke-node-1",
        **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "creationTimestamp": ago(7200)}
    if deleting:
        meta["deletionTimestamp"] = ago(5)
    return {"metadata": meta, "spec": {"nodeName": node},
            "status": {"conditions": conditions or [], "containerStatuses": containers or [],
                       "initContainerStatuses": init or [], **status}}


def ended(name: str, code: int, reason: str = "Error", message: str = "",
          key: str = "state") -> dict[str, Any]:
    return {"name": name, key: {"terminated": {"exitCode": code, "reason": reason,
                                               "message": message}}}


def waiting(name: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"name": name, "state": {"waiting": {"reason": reason, "message": message}}}


def unschedulable(name: str = WORKER, for_s: float = 7200.0,
                  message: str = "0/3 nodes are available: 3 Insufficient google.com/tpu"
                  ) -> dict[str, Any]:
    return pod(name, conditions=[cond("PodScheduled", "False", "Unschedulable", message,
                                      at_s=for_s)], node=None)


def event(reason: str, message: str, pod_name: str = WORKER, at_s: float = 60.0) -> dict:
    return {"reason": reason, "message": message, "involvedObject": {"name": pod_name},
            "lastTimestamp": ago(at_s)}


def judge(js: dict[str, Any], pods: list[dict[str, Any]] | None = None,
          workload: dict[str, Any] | None = ADMITTED, tail: list[str] | None = None,
          budgets: Budgets | None = None, **seen: Any) -> Verdict:
    return diagnose(Observation(js, workload, pods or [], tail or [], **seen),
                    budgets or Budgets(queue_s=3600.0, schedule_s=1800.0), NOW)


def failure(verdict: Verdict) -> tuple[FailureCategory, str, str, str, str]:
    d = verdict.diagnosis
    assert verdict.phase is Phase.FAILED and d is not None, verdict
    assert verdict.reason == d.summary  # the log's line is the summary
    return d.category, d.summary, d.detail, d.fix, d.code


NO_GROUP = ("pod didn't trigger scale-up: 2 node(s) didn't match Pod's node affinity/selector")


def pending_workload(at_s: float, message: str = "insufficient unused quota") -> dict:
    return {"spec": {"queueName": "tpu-lq"}, "status": {"conditions": [
        cond("QuotaReserved", "False", "Pending", message, at_s=at_s)]}}

