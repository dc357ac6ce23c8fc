"""Pure: a host that ran out of memory under our own pods, read as the sizing error it is.

Why: the Pathways workers on the TPU hosts (and the head's sidecars) set no memory limit, so
when the step needs more host memory than the VM has, two things can happen, and neither
reads as memory on the workload container the verdict looks at first:
- the kernel's OOM killer ends the container: the runtime reports reason OOMKilled, exit 137
  (cgroup v2 memory.events oom_kill counts kills "by any kind of OOM killer"); with the
  workers' restartPolicy OnFailure the kubelet restarts it in place, so the kill is only in
  ``lastState`` (kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go), and the
  head, having lost a worker, exits with its own traceback;
- the kubelet evicts the pod first (pkg/kubelet/eviction/helpers.go: "The node was low on
  resource: memory. " then "Container %s was using %s, request is %s, has larger
  consumption of %v. ", read by evictions.over_request), marking it DisruptionTarget like a
  preemption (eviction_manager.go evictPod), so it was resubmitted as preempted, and ran
  out of memory again.
The same configuration runs out the same way: a user error, naming the pod, the container
and the node, with the fields that change what each host holds.
"""

from __future__ import annotations

import re

from flows.backends.gke.watch.evictions import over_request
from flows.common.api_objects import Obj
from flows.common.failure_codes import Failure
from flows.core.failures import Diagnosis, FailureCategory

CODE = Failure.GKE_HOST_MEMORY
_NODE_LOW = re.compile(r"The node was low on resource: memory")
FIX = ("the same configuration runs out of host memory again: make each host hold less "
       "(train.args: batch size, sequence and generation lengths) or spread it over more "
       "hosts (gke.topology, gke.num_slices)")


def memory_eviction(message: str) -> tuple[str, str, str] | None:
    """(container, its usage, its request) when the kubelet evicted the pod for node
    memory while that container used more than it asked for, else None."""
    return over_request(message) if _NODE_LOW.search(message) else None


def _where(pod: Obj) -> tuple[str, str]:
    return (str((pod.get("metadata") or {}).get("name", "?")),
            str((pod.get("spec") or {}).get("nodeName") or "?"))


def out_of_memory(name: str, pods: list[Obj], workload_container: str) -> Diagnosis | None:
    """The first pod that ran its host out of memory: evicted for memory over its request,
    or a container other than the program's (a Pathways worker or server) OOMKilled, now
    or before the kubelet restarted it."""
    for pod in pods:
        status = pod.get("status") or {}
        pod_name, node = _where(pod)
        if found := memory_eviction(str(status.get("message") or "")):
            who, used, request = found
            summary = (f"{name}: pod {pod_name} was evicted from node {node}: the host ran "
                       f"out of memory while {who} used {used} (its request: {request})")
            return Diagnosis(FailureCategory.USER_ERROR, summary,
                             f"    {status.get('message')}", FIX, CODE)
        for container in [*(status.get("initContainerStatuses") or []),
                          *(status.get("containerStatuses") or [])]:
            if container.get("name") == workload_container:
                continue
            for key in ("state", "lastState"):
                ended = (container.get(key) or {}).get("terminated") or {}
                if ended.get("reason") == "OOMKilled":
                    summary = (f"{name}: {container.get('name')} of pod {pod_name} was "
                               f"OOMKilled: node {node} ran out of memory")
                    return Diagnosis(FailureCategory.USER_ERROR, summary,
                                     f"    {container.get('name')}: exit "
                                     f"{ended.get('exitCode')} (OOMKilled), restarted "
                                     f"{container.get('restartCount', 0)} times", FIX, CODE)
    return None
