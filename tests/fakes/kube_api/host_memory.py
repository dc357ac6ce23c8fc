"""A TPU host runs out of memory under a Pathways worker, both ways a cluster ends it
(flows/backends/gke/watch/host_memory.py says why the verdict reads them as it does)."""

from __future__ import annotations

from typing import Any

from tests.fakes.kube_api.reclaim import head_gives_up, later
from tests.fakes.kube_api.scenarios import NS, _pods, _set_condition
from tests.fakes.kube_api.store import FakeKube, condition, terminated

Obj = dict[str, Any]
# kubernetes pkg/kubelet/eviction/helpers.go: nodeLowMessageFmt, thresholdMetMessageFmt,
# containerMessageFmt (the worker sets no memory request: "request is 0")
MEMORY_EVICTION = ("The node was low on resource: memory. Threshold quantity: 100Mi, "
                   "available: 60Mi. Container pathways-worker was using 701Gi, request is 0, "
                   "has larger consumption of memory. ")


def _first_worker(kube: FakeKube, name: str) -> str:
    return next(p["metadata"]["name"] for p in _pods(kube, name)
                if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "worker")


def _then_head_gives_up(kube: FakeKube, name: str) -> None:
    later(0.2, kube, lambda: head_gives_up(kube, name))


def worker_oom_killed(kube: FakeKube, name: str) -> None:
    """The OOM killer ends pathways-worker (the runtime: reason OOMKilled, exit 137); its
    restartPolicy OnFailure has the kubelet start it again in place, so the kill is left in
    lastState (kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go); the head,
    having lost the worker, gives up."""
    def restarted(obj: Obj) -> None:
        for status in obj["status"].get("containerStatuses") or []:
            status.update(restartCount=1, lastState={"terminated": {
                "exitCode": 137, "reason": "OOMKilled"}})
    kube.mutate("pods", NS, _first_worker(kube, name), restarted)
    _then_head_gives_up(kube, name)


def worker_evicted_for_memory(kube: FakeKube, name: str) -> None:
    """The kubelet's eviction manager gets there first: the pod is Failed, reason Evicted,
    with DisruptionTarget TerminationByKubelet carrying the same message
    (pkg/kubelet/eviction/eviction_manager.go evictPod); the head gives up."""
    def evicted(obj: Obj) -> None:
        obj["status"].update(phase="Failed", reason="Evicted", message=MEMORY_EVICTION)
        _set_condition(obj, condition("DisruptionTarget", "True", "TerminationByKubelet",
                                      MEMORY_EVICTION))
        for status in obj["status"].get("containerStatuses") or []:
            status["state"] = terminated(137, "Error", status.get("state"))
    kube.mutate("pods", NS, _first_worker(kube, name), evicted)
    _then_head_gives_up(kube, name)
