"""What a Kueue Workload's conditions say: a status line that matches the phase, and the
pending reasons that waiting cannot resolve.

Kueue writes why a Workload waits into its QuotaReserved=False condition. Most reasons clear
by themselves (another job frees quota), some never do: the pods ask for a resource the
ClusterQueue does not cover, the LocalQueue or ClusterQueue is missing or stopped, the
namespace is not one the ClusterQueue selects. Waiting out the queue budget (hours) for those
only hides a configuration error, so they fail the stage at once. The texts are Kueue's own:
- pkg/scheduler/flavorassigner/flavorassigner.go: "resource %s unavailable in ClusterQueue",
  wrapped by the scheduler as "couldn't assign flavors to pod set %s: %s" (reason Pending);
- pkg/scheduler/scheduler.go: "ClusterQueue %s is inactive", "ClusterQueue %s not found",
  "Workload namespace doesn't match ClusterQueue selector" (reason Pending);
- pkg/controller/core/workload_controller.go: "LocalQueue %s doesn't exist", "LocalQueue %s
  is inactive", "ClusterQueue %s doesn't exist", "ClusterQueue %s is inactive", and
  "... is terminating or missing" / "... is stopped" (reason Inadmissible).
"""

from __future__ import annotations

import re

from flows.common.api_objects import Obj, condition
from flows.common.failure_codes import Failure
from flows.core.failures import Diagnosis, FailureCategory

CODE = Failure.KUEUE_UNSCHEDULABLE
# The Kueue API versions we read, preferred first. Kueue 0.15 serves v1beta2 beside v1beta1
# (kubernetes-sigs/kueue#7304), 0.16 stores v1beta2 (kubernetes-sigs/kueue#8020), and
# v1beta1 is set unserved after that (kubernetes-sigs/kueue#14558,
# tracked in kubernetes-sigs/kueue#13957): v1beta2 whenever it is served, v1beta1 only on a
# cluster whose Kueue predates it. Pre-flight (infra/cloud.py) reads in the same order.
KUEUE_VERSIONS = ("v1beta2", "v1beta1")


def served_kueue_version(group_versions: list[str]) -> str | None:
    """Pure: the version of ``KUEUE_VERSIONS`` to use, of those the API group serves."""
    return next((v for v in KUEUE_VERSIONS if v in group_versions), None)

# What Kueue does after an eviction, by the Evicted condition's reason (kueue v0.15.2
# apis/kueue/v1beta2/workload_types.go lists them): pkg/controller/jobframework/reconciler.go
# ("handle eviction") sets Requeued=True only for Preempted and NodeFailures, and
# Requeued=False with the eviction's reason otherwise; pkg/controller/core/
# workload_controller.go then re-queues PodsReadyTimeout and AdmissionCheck (Retry) after
# the back-off in status.requeueState.requeueAt (Requeued=True BackoffFinished), a
# ClusterQueue/LocalQueue stop once the queue is started again (ClusterQueueRestarted), and
# a deactivation (spec.active false; reason Deactivated, or DeactivatedDueTo<cause> from
# workload.Evict's ReasonWithCause) only if spec.active is set true again.
DEACTIVATED = "Deactivated"
DEACTIVATED_CODE = Failure.KUEUE_DEACTIVATED
_BACKOFF = frozenset({"PodsReadyTimeout", "AdmissionCheck"})
_REQUEUE = {
    "PodsReadyTimeout": "Kueue re-queues it after its back-off",
    "AdmissionCheck": "Kueue re-queues it after its back-off",
    "ClusterQueueStopped": "Kueue re-queues it only once the ClusterQueue is started again "
                           "(its stopPolicy cleared)",
    "LocalQueueStopped": "Kueue re-queues it only once the LocalQueue is started again "
                         "(its stopPolicy cleared)",
}
# the DeactivationTarget reasons workload_controller.go sets (SetDeactivationTarget), and
# "" for a Workload someone set spec.active false on
_DEACTIVATIONS: dict[str, tuple[FailureCategory, str, str]] = {
    "RequeuingLimitExceeded": (
        FailureCategory.INFRASTRUCTURE,
        "its pods did not all become ready within Kueue's waitForPodsReady timeout, as "
        "many times as requeuingStrategy.backoffLimitCount allows",
        "the slice came up too slowly (capacity, node scale-up, image pulls); the stage is "
        "retried with a new JobSet. If the slice needs longer, raise waitForPodsReady.timeout "
        "(or backoffLimitCount) in Kueue's configuration"),
    "MaximumExecutionTimeExceeded": (
        FailureCategory.USER_ERROR,
        "it ran past its maximum execution time (the Workload's "
        "spec.maximumExecutionTimeSeconds, from the kueue.x-k8s.io/max-exec-time-seconds "
        "label)",
        "rerunning would be stopped the same way: raise or remove that limit where it is set "
        "(a policy that labels the JobSet), or shorten the stage"),
    "AdmissionCheck": (
        FailureCategory.INFRASTRUCTURE,
        "an admission check of its ClusterQueue rejected it (a ProvisioningRequest that "
        "failed for good, for one)",
        "the check's message is in the detail (`kubectl describe workload`); the stage is "
        "retried with a new JobSet: if the check rejects every time, fix its configuration "
        "(the ClusterQueue's admissionChecks)"),
    "": (
        FailureCategory.CANCELLED,
        "someone or something set its spec.active to false",
        "nothing re-queues it: run the flow again to start the stage anew. To pause the "
        "queue instead, hold the ClusterQueue (stopPolicy: Hold) rather than deactivating "
        "Workloads"),
}

_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"resource (?P<what>\S+) unavailable in ClusterQueue"),
     "the pods request {what}, which the ClusterQueue does not cover: add {what} to the "
     "ClusterQueue's coveredResources (and a quota for it in each flavor), or drop the request"),
    (re.compile(r"LocalQueue (?P<what>\S+) (doesn't exist|is terminating or missing)"),
     "create the LocalQueue {what} in the JobSet's namespace (the cluster blueprint's Kueue "
     "manifest), or set gke.kueue_queue to one that exists"),
    (re.compile(r"LocalQueue (?P<what>\S+) (is inactive|is stopped)"),
     "the LocalQueue {what} is stopped or points at a missing ClusterQueue: fix it or clear "
     "its stopPolicy"),
    (re.compile(r"ClusterQueue (?P<what>\S+) (doesn't exist|not found|is terminating or "
                r"missing)"),
     "create the ClusterQueue {what} the LocalQueue points at (the blueprint's Kueue manifest)"),
    (re.compile(r"ClusterQueue (?P<what>\S+) (is inactive|is stopped)"),
     "the ClusterQueue {what} is inactive (a flavor it names is missing) or stopped: check "
     "`kubectl describe clusterqueue {what}`"),
    (re.compile(r"namespace doesn't match ClusterQueue selector"),
     "the ClusterQueue's namespaceSelector does not select the JobSet's namespace: label "
     "the namespace or widen the selector"),
]


def _conditions(obj: Obj | None) -> list[Obj]:
    return list(((obj or {}).get("status") or {}).get("conditions") or [])


def _find(obj: Obj | None, kind: str) -> Obj | None:
    return next((c for c in _conditions(obj) if c.get("type") == kind), None)


def blocked(name: str, workload: Obj | None) -> Diagnosis | None:
    """Pure: a user-error diagnosis when Kueue's pending message is one waiting cannot fix."""
    pending = _find(workload, "QuotaReserved")
    if not pending or pending.get("status") != "False" or condition(workload, "Admitted"):
        return None
    message = str(pending.get("message") or "")
    queue = str(((workload or {}).get("spec") or {}).get("queueName") or "?")
    for pattern, fix in _RULES:
        if m := pattern.search(message):
            what = m.groupdict().get("what") or queue
            return Diagnosis(
                FailureCategory.USER_ERROR,
                f"{CODE}: {name} cannot be admitted through LocalQueue {queue}: {message}",
                f"    Kueue Workload {(workload or {}).get('metadata', {}).get('name', '?')}: "
                f"QuotaReserved=False ({pending.get('reason')}): {message}",
                fix.format(what=what) + "; nothing ran, nothing was spent", code=CODE)
    return None


def status_line(workload: Obj | None) -> tuple[str, str | None, bool]:
    """Pure: (what the queued JobSet waits for, since when, admitted yet) from the Workload.
    The QuotaReserved message is shown only while it is False: once quota is reserved its
    message ("Quota reserved in ClusterQueue ...") is history, not a reason to wait."""
    if workload is None:
        return "waiting for Kueue to create its Workload", None, False
    reserved = _find(workload, "QuotaReserved")
    evicted = _find(workload, "Evicted")
    if condition(workload, "Evicted") and condition(workload, "QuotaReserved"):
        # kueue pkg/controller/jobframework/reconciler.go ("handle eviction") stops the job
        # first and unsets the reservation (Admitted too) only once it is no longer active
        return (f"{_evicted_by(evicted)}; its pods are stopping, then "
                f"{requeue_of(workload)}", (evicted or {}).get("lastTransitionTime"), False)
    if condition(workload, "Admitted"):
        return "admitted by Kueue, waiting for the JobSet to start", None, True
    if reserved and reserved.get("status") == "True":
        return ("quota reserved, waiting for admission checks",
                reserved.get("lastTransitionTime"), False)
    why = str((reserved or {}).get("message") or "waiting for Kueue to admit it")
    if evicted and evicted.get("status") == "True":
        state = "re-queued" if condition(workload, "Requeued") else requeue_of(workload)
        why = f"{_evicted_by(evicted)}; {state}, {why}"
    # queued since the latest of: pending, evicted, re-queued (an eviction restarts the wait)
    times = [str(c.get("lastTransitionTime")) for c in _conditions(workload)
             if c.get("type") in ("QuotaReserved", "Evicted", "Preempted", "Requeued")
             and c.get("lastTransitionTime")]
    return why, max(times, default=None), False


def _evicted_by(evicted: Obj | None) -> str:
    return (f"evicted by Kueue ({(evicted or {}).get('reason')}: "
            f"{(evicted or {}).get('message', '')})")


def requeue_of(workload: Obj | None) -> str:
    """Pure: whether and when Kueue puts an evicted Workload back in the queue, by its
    Evicted reason (see ``_REQUEUE``)."""
    reason = str((_find(workload, "Evicted") or {}).get("reason") or "")
    if reason.startswith(DEACTIVATED):
        return "Kueue does not re-queue a deactivated Workload"
    until = (((workload or {}).get("status") or {}).get("requeueState") or {}).get("requeueAt")
    when = _REQUEUE.get(reason, "Kueue re-queues it")
    return f"{when} (at {until})" if until and reason in _BACKOFF else when


def deactivated(name: str, workload: Obj | None) -> Diagnosis | None:
    """Pure: the verdict on a Workload Kueue deactivated (spec.active false, Evicted reason
    Deactivated or DeactivatedDueTo<cause>), or None. Kueue never re-queues it
    (workload_controller.go re-queues only on reactivation, spec.active set true again), so
    waiting would run out the queue budget for nothing."""
    evicted = _find(workload, "Evicted")
    reason = str((evicted or {}).get("reason") or "") if condition(workload, "Evicted") else ""
    inactive = ((workload or {}).get("spec") or {}).get("active") is False
    if not (reason.startswith(DEACTIVATED) or inactive):
        return None
    cause = reason.removeprefix(DEACTIVATED).removeprefix("DueTo")
    category, explained, fix = _DEACTIVATIONS.get(cause) or (
        FailureCategory.CANCELLED, f"Kueue deactivated it ({cause})", _DEACTIVATIONS[""][2])
    message = str((evicted or {}).get("message") or "spec.active is false")
    wl_name = (workload or {}).get("metadata", {}).get("name", "?")
    checks = [f"    admission check {c.get('name')}: {c.get('state')}: {c.get('message', '')}"
              for c in ((workload or {}).get("status") or {}).get("admissionChecks") or []
              if c.get("state") in ("Rejected", "Retry")]
    # the code is the Diagnosis' field (render shows it), never the summary's start
    summary = (f"Kueue deactivated the Workload of {name} ({message}): "
               f"{explained}; Kueue does not re-queue it")
    return Diagnosis(category, summary, "\n".join(
        [f"    Kueue Workload {wl_name}: Evicted=True ({reason or 'not yet'}): {message}",
         *checks]), fix, code=DEACTIVATED_CODE)
