"""Scenario actions of a multi-slice JobSet (gke.num_slices > 1): one slice's containers
start, one slice's VMs are reclaimed. Each slice is a worker Job on its own node pool
(placement.py)."""

from __future__ import annotations

from tests.fakes.kube_api.placement import slice_of
from tests.fakes.kube_api.scenarios import (
    NS,
    Action,
    _containers,
    _fail,
    _job_of,
    _pods,
    _resumed,
    _set_condition,
    create_children,
)
from tests.fakes.kube_api.store import FakeKube, condition, jobset_failed, now_iso


def start_slice(index: int) -> Action:
    """The containers of one slice (worker Job ``index``) and the head start. With
    startupPolicy InOrder the JobSet stays Suspended=True until every replicated job has
    all its Jobs ready (jobset v0.10.1 pkg/controllers/jobset_controller.go
    resumeJobsIfNecessary returns early, startup_policy.go allReplicasStarted: replicas ==
    failed + ready + succeeded), so a multi-slice JobSet is resumed only once every slice
    runs; the last slice's start resumes it."""
    def up(kube: FakeKube, name: str) -> None:
        _containers(kube, name, {"running": {"startedAt": now_iso()}}, "Running",
                    slices={index})
        # InOrder: the head running resumes the worker Jobs (every slice's at once, as
        # ``start`` does); only this slice's containers start
        create_children(kube, name)
        _containers(kube, name, {"running": {"startedAt": now_iso()}}, "Running",
                    slices={index})
        if all(p["status"]["phase"] == "Running" for p in _pods(kube, name)
               if not p["metadata"].get("deletionTimestamp")):
            _resumed(kube, name)
    up.__name__ = f"start_slice_{index}"
    return up


def preempt_slice(index: int) -> Action:
    """One slice's VMs are reclaimed (its own node pool): its pods get DisruptionTarget and
    its nodes go; the other slice's pods keep running. The slice's worker Job fails and the
    JobSet, its restarts spent, is Failed naming that Job first (as disrupt_and_fail; jobset
    v0.10.1 pkg/controllers/failure_policy.go messageWithFirstFailedJob)."""
    def reclaim(kube: FakeKube, name: str) -> None:
        pods = [p for p in _pods(kube, name) if slice_of(p) == index]
        for pod in pods:
            kube.mutate("pods", NS, pod["metadata"]["name"], lambda o: _set_condition(
                o, condition("DisruptionTarget", "True", "TerminationByKubelet",
                             "Pod was terminated in response to imminent node shutdown.")))
        for node in sorted({p["spec"]["nodeName"] for p in pods}):
            if ("nodes", "", node) in kube.objects:
                kube.delete("nodes", "", node)
        first = _job_of(kube, pods[0]["metadata"]["name"])
        kube.mutate("jobsets", NS, name, lambda o: _fail(
            o, jobset_failed("ReachedMaxRestarts", first)))
    reclaim.__name__ = f"preempt_slice_{index}"
    return reclaim
