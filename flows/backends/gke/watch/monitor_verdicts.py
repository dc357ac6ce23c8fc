"""The verdicts the monitor itself gives, beside what the JobSet's state says (verdict.py):
the JobSet deleted from outside the flow, a run past its budget, an API that never answered
usably. Pure: each builds the words, the category and the fix of one case."""

from __future__ import annotations

from datetime import UTC, datetime

from flows.backends.gke.watch.verdict import Phase, Verdict
from flows.common.api_objects import Obj
from flows.common.failure_codes import Failure
from flows.core.failures import Diagnosis, FailureCategory

DELETED_BY_OPERATOR = Failure.GKE_DELETED_BY_OPERATOR


def duration(seconds: float) -> str:
    """A budget as a person reads it: 2.0 h, 45 min, 30 s (a short budget read "0.0 h")."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def deleted_from_outside(name: str, namespace: str, last: Obj | None) -> Verdict:
    """The JobSet went while this run watched it, and this run deletes only after its watch
    ends: someone else stopped it (kubectl delete, a script). Retrying would bring back a
    slice someone stopped on purpose, so it is cancelled, not retried. The object says when
    (its deletionTimestamp, once a deletion waits for dependents) but never who: the API
    server records the caller only in its audit log."""
    stamp = ((last or {}).get("metadata") or {}).get("deletionTimestamp")
    when = (stamp.replace("T", " ").removesuffix("Z") if stamp
            else datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S"))
    summary = (f"{name} was deleted from outside the flow at {when} UTC; the stage is "
               "cancelled, not retried")
    return Verdict(Phase.FAILED, Diagnosis(
        FailureCategory.CANCELLED, summary,
        f"    the JobSet disappeared while it was watched (deletionTimestamp: {stamp or 'not seen'})",
        "nothing recreates what was stopped on purpose: run the flow again to start it anew. "
        "Who deleted it is in the cluster's Cloud Audit Logs (Admin Activity, "
        f"protoPayload.resourceName ending namespaces/{namespace}/jobsets/{name})",
        code=DELETED_BY_OPERATOR), summary)


def stalled(name: str, budget_s: float, tail: list[str]) -> Verdict:
    summary = f"{name} ran longer than its budget of {duration(budget_s)}"
    return Verdict(Phase.FAILED, Diagnosis(
        FailureCategory.STALLED, summary, "\n".join(f"    {line}" for line in tail[-30:]),
        "look at the last log lines for a hang (GRPO can stall, google/tunix#2196); raise "
        "gke.run_budget_s if the job is just slow"), summary)


def api_down(name: str, budget_s: float, error: str) -> Verdict:
    summary = (f"the Kubernetes API failed while {name} was watched: its budget of "
               f"{budget_s:.0f} s ran out with no usable answer ({error})")
    return Verdict(Phase.FAILED, Diagnosis(
        FailureCategory.INFRASTRUCTURE, summary, f"    last error: {error}",
        "the control plane was unavailable (an upgrade, an outage, RBAC on watch); the JobSet "
        "is deleted and the stage retried"), summary)
