"""What queued provisioning's ProvisioningRequests say about a JobSet waiting for its slice
(``gke.capacity: queued``); pure.

Kueue's provisioning admission check (kueue v0.15.2 pkg/controller/admissionchecks/
provisioning/controller.go syncCheckStates) creates one ProvisioningRequest per attempt,
named ``<workload>-<check>-<attempt>`` (provisioning.go ProvisioningRequestName), and mirrors
it in the Workload's ``status.admissionChecks``: Pending while GKE's Dynamic Workload
Scheduler has Accepted it and looks for capacity, Retry after Failed or BookingExpired
(a new attempt after a back-off, up to retryStrategy.backoffLimitCount), Rejected past the
limit or on CapacityRevoked, which deactivates the Workload; Ready once Provisioned (the
whole slice exists; the pods are admitted onto it). The request's conditions
(kubernetes/autoscaler cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1/
types.go: Accepted, Provisioned, Failed, BookingExpired, CapacityRevoked) name the cause;
the Workload's message alone is Kueue's paraphrase, so the verdict reads the request.

Kueue keeps only each check's newest attempt: every reconcile deletes the Workload's other
ProvisioningRequests (kueue v0.17.1 controller.go deleteUnusedProvisioningRequests, after
activeOrLastPRForChecks picks the highest attempt; v0.15.2 the same). So the list may hold
attempt 3 alone: the attempt count is read from the newest request's name, and the time
queued from the Workload's QuotaReserved condition (Kueue creates the first request only
after it), never from the oldest request still listed. A request that vanished is neither a
failure nor a success: the newest one listed decides, and with none listed while the check
is Pending or Retry the JobSet is still waiting for Kueue's next attempt.

Each state's verdict and fix:
- Accepted, not Provisioned: queued ("waiting for queued capacity"); past the queue budget
  queue-timeout, code NO_QUEUED_CAPACITY (the stage falls back to the next mode);
- Failed, Kueue retrying: queued, naming the attempt and GKE's message;
- Failed past the retries: infrastructure, code NO_QUEUED_CAPACITY (falls back);
- BookingExpired past the retries: infrastructure: the slice was there but the pods did not
  land on it in time (their node selector or tolerations do not match the queued pool);
- CapacityRevoked: preempted: GKE took the nodes back; resubmitted, resuming from the
  newest checkpoint.
"""

from __future__ import annotations

from datetime import datetime

from flows.backends.gke.fallback import NO_QUEUED_CAPACITY
from flows.backends.gke.watch.api_time import seconds_since
from flows.common.api_objects import Obj, condition
from flows.common.failure_codes import Failure
from flows.core.failures import Diagnosis, FailureCategory

PR_GROUP, PR_VERSION, PR_PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
BOOKING_EXPIRED_CODE = Failure.GKE_QUEUED_BOOKING_EXPIRED


def _attempt(request: Obj) -> int:
    tail = str((request.get("metadata") or {}).get("name", "")).rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def requests_of(workload: Obj | None, requests: list[Obj]) -> list[Obj]:
    """The Workload's ProvisioningRequests (its name is their prefix), oldest attempt first."""
    name = ((workload or {}).get("metadata") or {}).get("name")
    if not name:
        return []
    return sorted((r for r in requests if str(r.get("metadata", {}).get("name", ""))
                   .startswith(f"{name}-")), key=_attempt)


def _check_states(workload: Obj | None) -> list[str]:
    return [str(c.get("state")) for c in
            ((workload or {}).get("status") or {}).get("admissionChecks") or []]


def _queued_since(workload: Obj | None, mine: list[Obj]) -> str | None:
    """When the wait began: the Workload's QuotaReserved time, or the oldest request listed
    when that is earlier (older attempts may have been deleted)."""
    reserved = condition(workload, "QuotaReserved")
    stamps = [str(v) for v in ([(reserved or {}).get("lastTransitionTime")] + [
        (r.get("metadata") or {}).get("creationTimestamp") for r in mine]) if v]
    return min(stamps, key=lambda v: datetime.fromisoformat(v.replace("Z", "+00:00")),
               default=None)


def _waiting_for_next_attempt(name: str, workload: Obj | None, now: datetime,
                              queue_budget_s: float) -> tuple[str, Diagnosis | None] | None:
    """No request listed: Kueue is between attempts (or has not made the first) while its
    check is Pending or Retry; anything else is not ours to judge."""
    states = _check_states(workload)
    since = _queued_since(workload, [])
    if not states or since is None or not set(states) <= {"Pending", "Retry"}:
        return None
    waited = seconds_since(since, now)
    if waited > queue_budget_s:
        return f"{name}: no queued capacity", Diagnosis(
            FailureCategory.QUEUE_TIMEOUT, f"{name} waited {waited / 60:.0f} min for queued "
            "capacity; Kueue lists no ProvisioningRequest for it now",
            f"    queue budget {queue_budget_s / 60:.0f} min",
            "Dynamic Workload Scheduler had no slice within the queue budget; the next mode of "
            "gke.capacity is tried, if any; nothing was spent", NO_QUEUED_CAPACITY)
    return (f"{name} waits for queued capacity: Kueue's next ProvisioningRequest is not "
            "listed yet", None)


def queued_diagnosis(name: str, workload: Obj | None, requests: list[Obj], now: datetime,
                     queue_budget_s: float) -> tuple[str, Diagnosis | None] | None:
    """(a status line, a diagnosis or None) while the JobSet's capacity comes through
    ProvisioningRequests, or None when it does not (no admission check waiting, no request)
    or the slice is Provisioned (the ordinary verdict applies)."""
    mine = requests_of(workload, requests)
    if not mine:
        return _waiting_for_next_attempt(name, workload, now, queue_budget_s)
    last, states = mine[-1], _check_states(workload)
    attempts = f"{max(len(mine), _attempt(last))} attempt(s)"
    if revoked := condition(last, "CapacityRevoked"):
        why = revoked.get("message", "")
        return f"{name}: queued capacity revoked", Diagnosis(
            FailureCategory.PREEMPTED, f"{name}: GKE revoked the queued slice "
            f"(ProvisioningRequest {last['metadata']['name']} CapacityRevoked: {why})",
            f"    {why}", "the nodes were taken back before maxRunDurationSeconds; "
            "resubmitted with the same run name, resuming from the newest checkpoint")
    rejected = "Rejected" in states or ((workload or {}).get("spec") or {}).get("active") is False
    for kind in ("Failed", "BookingExpired"):
        cond = condition(last, kind)
        if cond is None:
            continue
        message = str(cond.get("message", ""))
        if not rejected:
            return (f"{name} waits for queued capacity: ProvisioningRequest "
                    f"{last['metadata']['name']} {kind} ({message}); Kueue retries after "
                    f"its back-off ({attempts} so far)", None)
        if kind == "Failed":
            return f"{name}: no queued capacity", Diagnosis(
                FailureCategory.INFRASTRUCTURE, f"{name}: queued provisioning could not get "
                f"the slice after {attempts}: {message}", f"    ProvisioningRequest "
                f"{last['metadata']['name']}: Failed: {message}",
                "Dynamic Workload Scheduler found no slice of this shape in the zone; the "
                "next mode of gke.capacity is tried, if any; otherwise retry later or add a "
                "zone", NO_QUEUED_CAPACITY)
        return f"{name}: queued booking expired", Diagnosis(
            FailureCategory.INFRASTRUCTURE, f"{name}: the queued slice was provisioned but its "
            f"pods did not land on it in time, {attempts}: {message}",
            f"    ProvisioningRequest {last['metadata']['name']}: BookingExpired: {message}",
            "the pods must tolerate the cloud.google.com/gke-queued taint and select the "
            "queued pool; check `kubectl describe pod` for why they stayed Pending",
            BOOKING_EXPIRED_CODE)
    if condition(last, "Provisioned"):
        return None
    accepted = condition(last, "Accepted")
    waited = seconds_since(_queued_since(workload, mine), now)
    eta = str(((last.get("status") or {}).get("conditions") or [{}])[-1].get("message", ""))
    if waited > queue_budget_s:
        return f"{name}: no queued capacity", Diagnosis(
            FailureCategory.QUEUE_TIMEOUT, f"{name} waited {waited / 60:.0f} min for queued "
            f"capacity ({attempts}): {eta}", f"    queue budget {queue_budget_s / 60:.0f} min",
            "Dynamic Workload Scheduler had no slice within the queue budget; the next mode of "
            "gke.capacity is tried, if any; nothing was spent", NO_QUEUED_CAPACITY)
    what = "accepted, waiting for capacity" if accepted else "not yet accepted"
    return f"{name} waits for queued capacity: ProvisioningRequest {what}: {eta}", None
