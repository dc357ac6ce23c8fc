"""The end of a spot slice as a cluster's controllers race it, on FakeKube (used by
tests/fakes/kube_api/nodepools.py when a TpuPool has ``reclaim`` set)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.fakes.kube_api.store import FakeKube, condition, jobset_failed, terminated

NS = "default"
Obj = dict[str, Any]


@dataclass(frozen=True)
class Reclaim:
    """How the end of a spot slice plays out, in seconds scaled down from the cluster's.

    - ``kubelet_posts``: the kubelet's graceful node shutdown (kubernetes
      pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go, processShutdownEvent) kills
      the node's pods and marks each DisruptionTarget=True, reason TerminationByKubelet,
      "Pod was terminated in response to imminent node shutdown.", status reason
      Terminated, and records a NodeShutdown event on the Node. When the VM goes before
      the kubelet reaches the API server (GCE's 30 s spot notice), nothing is posted and
      the pods stay Running on a node that no longer exists.
    - ``pod_gc_s``: PodGC (pkg/controller/podgc/gc_controller.go, gcOrphaned) finds pods
      bound to a deleted node on its 20 s loop, quarantines the node for 40 s, then marks
      each pod not yet terminal Failed with DisruptionTarget=True reason DeletionByPodGC
      "PodGC: node no longer exists" and deletes it with grace 0: 40 to 60 s after the
      node went. None: PodGC has not run yet when the JobSet fails.
    - ``program_gives_up_s``: the Pathways head waits ``--pathways_pipe_unreachable_timeout``
      (60 s) for its lost workers, then exits 1; its Job fails through its
      podFailurePolicy and the JobSet's failOnProgramExit rule fails the JobSet
      (flows/backends/gke/jobs/common.py). The worker Job (restartPolicy OnFailure,
      backoffLimit 32, no podFailurePolicy) does not fail: its controller creates
      replacement pods, which wait for nodes.
    """

    kubelet_posts: bool = True
    pod_gc_s: float | None = 0.4
    program_gives_up_s: float = 0.6


def shut_down_by_kubelet(pod: Obj) -> None:
    status = pod["status"]
    status.update(phase="Failed", reason="Terminated",
                  message="Pod was terminated in response to imminent node shutdown.")
    conds = status.setdefault("conditions", [])
    conds[:] = [c for c in conds if c["type"] != "DisruptionTarget"] + [condition(
        "DisruptionTarget", "True", "TerminationByKubelet",
        "Pod was terminated in response to imminent node shutdown.")]
    for container in status.get("containerStatuses") or []:
        container["state"] = terminated(143, "Error", container.get("state"))


def replacement(pod: Obj, rv: int) -> Obj:
    meta = pod["metadata"]
    return {"metadata": {"name": f"{meta['name'].rsplit('-x', 1)[0]}-x{rv % 100000}r",
                         "labels": dict(meta.get("labels") or {}),
                         "ownerReferences": list(meta.get("ownerReferences") or [])},
            "spec": {**{k: v for k, v in (pod.get("spec") or {}).items() if k != "nodeName"},
                     "nodeName": ""},  # the Job's template again, not yet scheduled
            "status": {"phase": "Pending", "containerStatuses": [
                {"name": c["name"], "state": {"waiting": {"reason": "ContainerCreating"}}}
                for c in pod["status"].get("containerStatuses") or []]}}


def pod_gc(kube: FakeKube, names: set[str]) -> None:
    """gcOrphaned: a pod not yet terminal is marked Failed with DisruptionTarget
    DeletionByPodGC, then every orphaned pod is deleted."""
    for name in sorted(names):
        pod = kube.objects.get(("pods", NS, name))
        if pod is None:
            continue
        if not finished(pod):
            def orphaned(obj: Obj) -> None:
                obj["status"]["phase"] = "Failed"
                conds = obj["status"].setdefault("conditions", [])
                conds[:] = [c for c in conds if c["type"] != "DisruptionTarget"] + [condition(
                    "DisruptionTarget", "True", "DeletionByPodGC",
                    "PodGC: node no longer exists")]
            kube.mutate("pods", NS, name, orphaned)
        kube.delete("pods", NS, name)


HEAD_GIVES_UP = ["Traceback (most recent call last):",
                 '  File "/deps/src/maxtext/rl/train_rl.py", line 412, in <module>',
                 "RuntimeError: pathways workers of slice 0 unreachable for 60 s, giving up"]
# The exit of a program that gave up: a plain traceback, which alone reads as the user's
# (the real text is Pathways' own; what matters is that it names no infrastructure cause).


def head_gives_up(kube: FakeKube, name: str) -> None:
    """The Pathways head's program exits 1 after its lost workers' timeout; the JobSet
    fails through failOnProgramExit."""
    if ("jobsets", NS, name) not in kube.objects:
        return
    kube.action_times["head_gives_up"] = time.monotonic()  # for benchmarks/gke_watch.py
    for pod in kube.find("pods", NS, f"jobset.sigs.k8s.io/jobset-name={name}"):
        if pod["metadata"]["labels"].get("jobset.sigs.k8s.io/replicatedjob-name") != \
                "pathways-head" or finished(pod):
            continue
        kube.append_log(NS, pod["metadata"]["name"], "workload-container", HEAD_GIVES_UP)

        def exited(obj: Obj) -> None:
            obj["status"]["phase"] = "Failed"
            for container in obj["status"].get("containerStatuses") or []:
                if container["name"] == "workload-container":
                    container["state"] = terminated(1, "Error", container.get("state"))
        kube.mutate("pods", NS, pod["metadata"]["name"], exited)

    def failed(obj: Obj) -> None:
        conds = obj.setdefault("status", {}).setdefault("conditions", [])
        conds.append(jobset_failed("FailJobSetFailurePolicyAction", f"{name}-pathways-head-0"))
        obj["status"]["terminalState"] = "Failed"
    kube.mutate("jobsets", NS, name, failed)


def later(delay_s: float, kube: FakeKube, action: Callable[[], None]) -> None:
    def run() -> None:
        with kube.cond:
            if not kube.closed:
                action()
    timer = threading.Timer(delay_s, run)
    timer.daemon = True
    timer.start()


def finished(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
