"""Deletion as the API server and the garbage collector do it: not at once.

``FakeKube.gc_delay_s`` (0 by default: the fake removes an object and its dependents in one
write, as it did before) turns it on; ``FakeKube.pod_grace_s`` is how long a deleted pod
takes to terminate.

- Background (kubectl's default cascade): the API server removes the owner itself at once;
  its dependents stay until the garbage collector, working from its informers' graph, finds
  their owner absent and deletes them (kubernetes v1.33 pkg/controller/garbagecollector/
  garbagecollector.go attemptToDeleteItem: "if all owners are absent, delete the item",
  with the item's own propagation, Background). So a Job's pods outlive their JobSet for
  the collector's lag plus their own termination.
- Foreground: the API server only sets the owner's deletionTimestamp and the
  ``foregroundDeletion`` finalizer (staging/src/k8s.io/apiserver/pkg/registry/generic/
  registry/store.go updateForGracefulDeletionAndFinalizers); the collector deletes its
  blocking dependents (processDeletingDependentsItem → attemptToDeleteItem, which deletes a
  dependent that has dependents of its own in the foreground too) and removes the finalizer
  once none is left, and only then is the owner gone. The JobSet controller's Jobs and the
  Job controller's pods carry ``blockOwnerDeletion: true`` (controller-runtime
  SetControllerReference; kubernetes pkg/controller/job metav1.NewControllerRef), so a
  JobSet deleted in the foreground goes after its last pod.
- A deleted pod is not gone either: it gets a deletionTimestamp with its grace period
  (pkg/registry/core/pod/strategy.go CheckGracefulDelete: terminationGracePeriodSeconds,
  30 s by default); the kubelet sends SIGTERM (exit 143), posts the terminal phase, and only
  then lets the API server remove it (pkg/kubelet/status/status_manager.go canBeDeleted).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from tests.fakes.kube_api.store import now_iso, terminated

if TYPE_CHECKING:
    from tests.fakes.kube_api.store import FakeKube

Obj = dict[str, Any]
Key = tuple[str, str, str]
FOREGROUND = "foregroundDeletion"


def delete(kube: FakeKube, key: Key, policy: str) -> Obj:
    """The API server's answer to a DELETE when ``kube.gc_delay_s`` is set (under the lock)."""
    obj = kube.objects[key]
    meta = obj["metadata"]
    if key[0] == "pods":
        _terminate(kube, key)
        return obj
    if meta.get("deletionTimestamp"):
        return obj  # already going: a second DELETE changes nothing
    if policy == "Foreground":
        meta["deletionTimestamp"] = now_iso()
        meta["finalizers"] = [*(meta.get("finalizers") or []), FOREGROUND]
        kube._bump(key[0], "MODIFIED", obj)
        _later(kube, 0.0, _foreground, kube, key, meta["uid"])
    else:
        _remove(kube, key)
        _later(kube, kube.gc_delay_s, _orphans, kube, meta["uid"])
    return obj


def dependents(kube: FakeKube, uid: str) -> list[Key]:
    with kube.cond:
        return [k for k, o in kube.objects.items()
                if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])]


def _foreground(kube: FakeKube, key: Key, uid: str) -> None:
    """processDeletingDependentsItem: delete the blocking dependents, then the owner."""
    time.sleep(kube.gc_delay_s)
    while not kube.closed:
        with kube.cond:
            children = dependents(kube, uid)
            for child in children:
                if child in kube.objects:
                    delete(kube, child, "Foreground")
            if not children:
                current = kube.objects.get(key)
                if current is not None and current["metadata"]["uid"] == uid:
                    _remove(kube, key)
                return
        time.sleep(0.02)


def _orphans(kube: FakeKube, uid: str) -> None:
    """attemptToDeleteItem of each dependent whose owner is absent: its own Background."""
    with kube.cond:
        for child in dependents(kube, uid):
            if child in kube.objects:
                delete(kube, child, "Background")


def _terminate(kube: FakeKube, key: Key) -> None:
    """A graceful pod deletion: the kubelet stops the containers (143), posts Failed, then
    the pod is removed ``kube.pod_grace_s`` later. A pod a scenario's kubelet already stops
    (a deletionTimestamp, no removal planned) is removed as well: its kubelet lets it go."""
    pod = kube.objects[key]
    uid = pod["metadata"]["uid"]
    if uid in kube.gc_removing:
        return  # already going: a second DELETE changes nothing
    kube.gc_removing.add(uid)
    pod["metadata"].setdefault("deletionTimestamp", now_iso())
    status = pod.setdefault("status", {})
    if status.get("phase") not in ("Succeeded", "Failed"):
        status["phase"] = "Failed"
    for container in status.get("containerStatuses") or []:
        if "terminated" not in (container.get("state") or {}):
            container["state"] = terminated(143, "Error", container.get("state"))
    kube._bump("pods", "MODIFIED", pod)

    def gone() -> None:
        with kube.cond:
            current = kube.objects.get(key)
            if current is not None and current["metadata"]["uid"] == uid:
                _remove(kube, key)
    _later(kube, kube.pod_grace_s, gone)


def _remove(kube: FakeKube, key: Key) -> None:
    obj = kube.objects.pop(key)
    kube._bump(key[0], "DELETED", obj)


def _later(kube: FakeKube, delay_s: float, fn: Any, *args: Any) -> None:
    def run() -> None:
        if delay_s > 0:
            time.sleep(delay_s)
        if not kube.closed:
            fn(*args)
    threading.Thread(target=run, daemon=True, name="fake-gc").start()
