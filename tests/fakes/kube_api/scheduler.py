"""kube-scheduler's binding of a pod to a node, later than the pod's creation.

The Job controller creates a pod with no ``spec.nodeName`` and no PodScheduled condition;
kube-scheduler pops it from its queue, picks a node and POSTs ``pods/binding``, and the API
server's BindingREST sets ``spec.nodeName`` and PodScheduled=True in one write (kubernetes
v1.33 pkg/registry/core/pod/storage/storage.go setPodHostAndAnnotations;
pkg/scheduler/schedule_one.go bind). Until then the pod is Pending and unbound, with no
PodScheduled condition at all: PodScheduled=False (reason Unschedulable) is written only
when a scheduling attempt failed (schedule_one.go handleSchedulingFailure), which is what
tests/fakes/kube_api/nodepools.py plays. The kubelet of the node starts the containers only
after that, so a scenario's program actions wait for the binding (``may_go``).

``FakeKube.binding_delay_s`` (0 by default: the pod is created bound, as the fake did
before) sets how long the queue and the binding take.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.fakes.kube_api.store import FakeKube

Obj = dict[str, Any]
# what the control plane does to a JobSet before any pod runs: no binding needed
CONTROL_PLANE = {"admit", "evict", "reserve_quota", "pending", "api_down"}
TPU_SELECTOR = "cloud.google.com/gke-tpu-accelerator"  # a TPU pod's node selector key


def unbound(kube: FakeKube, spec: Obj, node: str) -> Obj:
    """The pod's spec as the Job controller creates it: bound now without a delay, else
    unbound (the node is the one the scheduler will pick). A pod the TPU-pool fake places
    (``kube.tpu_pool_binds``: its node selector names a TPU accelerator) is created unbound:
    the fake binds it to a node it made; created bound to a node that never existed, it
    looked like a pod holding a TPU node until the fake's next tick, and a watch that lagged
    showed the spend meter a slice that was not there."""
    if kube.tpu_pool_binds and TPU_SELECTOR in (spec.get("nodeSelector") or {}):
        return dict(spec)
    if kube.binding_delay_s <= 0 or kube.action_gate is not None:
        return {**spec, "nodeName": node}  # (the TPU-pool fakes bind their own pods)
    return dict(spec)


def bind_later(kube: FakeKube, ns: str, pod: Obj, node: str) -> None:
    """After ``kube.binding_delay_s``: the binding, unless the pod went or is going."""
    if kube.binding_delay_s <= 0 or kube.action_gate is not None:
        return
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    kube.binding_pending.add(uid)

    def bind() -> None:
        time.sleep(kube.binding_delay_s)
        with kube.cond:
            kube.binding_pending.discard(uid)
            current = kube.objects.get(("pods", ns, name))
            if kube.closed or current is None or current["metadata"]["uid"] != uid or \
                    current["metadata"].get("deletionTimestamp"):
                return

            def bound(obj: Obj) -> None:
                obj["spec"]["nodeName"] = node
                conds = obj.setdefault("status", {}).setdefault("conditions", [])
                conds[:] = [c for c in conds if c["type"] != "PodScheduled"] + [
                    {"type": "PodScheduled", "status": "True",
                     "lastTransitionTime": _now()}]
            kube.mutate("pods", ns, name, bound)
            kube.action_times["pods_bound"] = time.monotonic()
    threading.Thread(target=bind, daemon=True, name=f"scheduler-{name}").start()


def may_go(kube: FakeKube, jobset_uid: str, action: str) -> bool:
    """A program's action (containers start, print, exit) waits until the JobSet's pods
    are bound: no kubelet runs an unbound pod."""
    if action in CONTROL_PLANE or not kube.binding_pending:
        return True
    with kube.cond:
        return not any(
            o["metadata"]["uid"] in kube.binding_pending for (plural, _, _), o in
            kube.objects.items() if plural == "pods" and (o["metadata"].get("labels") or {})
            .get("jobset.sigs.k8s.io/jobset-uid") == jobset_uid)


def _now() -> str:
    from tests.fakes.kube_api.store import now_iso

    return now_iso()
