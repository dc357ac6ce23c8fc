"""Kueue evicts a Workload, for each reason, in the order of kueue v0.15.2:

1. the cause is posted: pkg/scheduler/preemption (Preempted), pkg/controller/core/
   workload_controller.go reconcileNotReadyTimeout (PodsReadyTimeout, with
   ``status.requeueState`` counted up and ``requeueAt`` set), reconcileCheckBasedEviction
   (AdmissionCheck), or a deactivation: ``spec.active`` set false, by someone or by the
   workload controller after its DeactivationTarget condition (reasons
   RequeuingLimitExceeded, MaximumExecutionTimeExceeded, AdmissionCheck);
2. workload.Evict (pkg/workload/workload.go): Evicted=True with the reason, for a
   deactivation "Deactivated" or ReasonWithCause's "DeactivatedDueTo<cause>" and the
   message "The workload is deactivated due to <the target's message>"; the
   DeactivationTarget condition and the requeueState of a deactivated Workload go;
3. pkg/controller/jobframework/reconciler.go "handle eviction": the job is stopped (the
   JobSet suspended, its pods deleted: scenarios.stop_pods) while the quota is still
   held; once it is no longer active Requeued is set, True only for Preempted and
   NodeFailures, False with the eviction's reason otherwise, and the reservation unset
   (QuotaReserved=False Pending with the eviction's message, Admitted=False);
4. workload_controller.go re-queues a PodsReadyTimeout or AdmissionCheck eviction once
   ``requeueAt`` passed (Requeued=True BackoffFinished); a deactivated Workload is never
   re-queued unless spec.active is set true again (Reactivated).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.fakes.kube_api.scenarios import (
    NS,
    Action,
    _set_condition,
    _workload,
    stop_pods,
)
from tests.fakes.kube_api.store import FakeKube, condition

Obj = dict[str, Any]
REQUEUED = frozenset({"Preempted", "NodeFailures"})  # reconciler.go: setRequeued
# workload_controller.go: the DeactivationTarget reasons and messages it sets
DEACTIVATION_TARGETS = {
    "RequeuingLimitExceeded": "exceeding the maximum number of re-queuing retries",
    "MaximumExecutionTimeExceeded": "exceeding the maximum execution time",
    "AdmissionCheck": "Admission check(s): tpu-provisioning, were rejected",
}


def kueue_evicts(reason: str, message: str, release_s: float = 0.1, exit_code: int = 143,
                 backoff_s: float | None = None) -> Action:
    """Steps 2 to 4 for an eviction with ``reason``; ``backoff_s`` (PodsReadyTimeout,
    AdmissionCheck): the re-queue back-off, after which Requeued turns True."""
    def stop(kube: FakeKube, name: str) -> None:
        wl = _workload(kube, name)

        def evicted(obj: Obj) -> None:
            _set_condition(obj, condition("Evicted", "True", reason, message))
            if reason == "Preempted":  # SetPreemptedCondition
                _set_condition(obj, condition("Preempted", "True", "InClusterQueue", message))
            if backoff_s is not None:  # UpdateRequeueState
                state = obj["status"].setdefault("requeueState", {})
                at = datetime.now(UTC) + timedelta(seconds=backoff_s)
                state.update(count=int(state.get("count") or 0) + 1,
                             requeueAt=at.strftime("%Y-%m-%dT%H:%M:%SZ"))
            if reason.startswith("Deactivated"):  # the prepare of Evict's deactivation
                obj["status"]["conditions"] = [c for c in obj["status"]["conditions"]
                                               if c["type"] != "DeactivationTarget"]
                obj["status"].pop("requeueState", None)
        if wl:
            kube.mutate("workloads", NS, wl["metadata"]["name"], evicted)
        kube.mutate("jobsets", NS, name, lambda o: o["spec"].update(suspend=True))
        pods = stop_pods(kube, name, exit_code)
        uid = kube.get("jobsets", NS, name)["metadata"]["uid"]

        def released(obj: Obj) -> None:
            _set_condition(obj, condition("Requeued", "True" if reason in REQUEUED else "False",
                                          reason, message))
            _set_condition(obj, condition("QuotaReserved", "False", "Pending", message))
            _set_condition(obj, condition("Admitted", "False", "NoReservation",
                                          "The workload has no reservation"))

        def backoff_finished(obj: Obj) -> None:
            obj["status"].get("requeueState", {}).pop("requeueAt", None)
            _set_condition(obj, condition("Requeued", "True", "BackoffFinished",
                                          "The workload backoff was finished"))

        def later() -> None:
            time.sleep(release_s)
            with kube.cond:
                current = kube.objects.get(("jobsets", NS, name))
                if kube.closed or current is None or current["metadata"]["uid"] != uid:
                    return
                for pod in pods:  # the pods are gone, the job is no longer active
                    if ("pods", NS, pod) in kube.objects:
                        kube.delete("pods", NS, pod)
                if wl:
                    kube.mutate("workloads", NS, wl["metadata"]["name"], released)
            if backoff_s is None or not wl:
                return
            time.sleep(max(0.0, backoff_s - release_s))
            with kube.cond:
                if not kube.closed and ("workloads", NS, wl["metadata"]["name"]) in kube.objects:
                    kube.mutate("workloads", NS, wl["metadata"]["name"], backoff_finished)
        threading.Thread(target=later, daemon=True, name=f"kueue-{name}").start()
    stop.__name__ = "evict"
    return stop


def deactivate(cause: str = "", release_s: float = 0.1) -> Action:
    """Step 1 of a deactivation, then 2 to 4. ``cause`` "": someone set spec.active false
    (``kubectl patch workload ... active: false``); otherwise the workload controller did,
    after setting DeactivationTarget with that reason."""
    def act(kube: FakeKube, name: str) -> None:
        wl = _workload(kube, name)
        message = "The workload is deactivated"
        if wl:
            def inactive(obj: Obj) -> None:
                if cause:
                    _set_condition(obj, condition("DeactivationTarget", "True", cause,
                                                  DEACTIVATION_TARGETS[cause]))
                obj["spec"]["active"] = False
            kube.mutate("workloads", NS, wl["metadata"]["name"], inactive)
        reason = f"Deactivated{'DueTo' + cause if cause else ''}"
        if cause:
            message += f" due to {DEACTIVATION_TARGETS[cause]}"
        kueue_evicts(reason, message, release_s)(kube, name)
    act.__name__ = "evict"
    return act
