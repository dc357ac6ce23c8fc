"""What the cluster autoscaler says about our pods: scaling up, or no capacity; pure.

Why: in the capacity modes that scale from zero (gke.capacity on-demand, spot, flex-start)
an admitted training JobSet's TPU pods are unschedulable until the autoscaler has brought a
whole slice up. The scheduler's own message ("0/4 nodes are available: ... didn't match
Pod's node affinity/selector") says nothing useful then; the autoscaler's events on the pod
do: ``TriggeredScaleUp`` ("pod triggered scale-up: [{<group> 0->8 (max: 8)}]"),
``NotTriggerScaleUp`` ("pod didn't trigger scale-up: ...") and the Warning ``FailedScaleUp``
("Node scale up in zones <zone> associated with this pod failed: GCE out of resources. Pod is
at risk of not being scheduled."). Reasons and texts: kubernetes/autoscaler
cluster-autoscaler/FAQ.md ("What events are emitted by CA?") and GKE's clusters as users
report them. The monitor lists them with a field selector the API server supports for
Events (kubernetes pkg/apis/core/v1/conversion.go: involvedObject.kind, source).
"""

from __future__ import annotations

from flows.common.api_objects import Obj

AUTOSCALER_EVENTS = "involvedObject.kind=Pod,source=cluster-autoscaler"
SCALE_UP_FAILED = "FailedScaleUp"


def _when(event: Obj) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime")
               or (event.get("metadata") or {}).get("creationTimestamp") or "")


def events_for(events: list[Obj], pod_names: set[str]) -> list[Obj]:
    """The autoscaler's events about these pods, newest last."""
    found = [e for e in events if (e.get("involvedObject") or {}).get("name") in pod_names]
    return sorted(found, key=_when)


def scale_up_failure(events: list[Obj]) -> Obj | None:
    """The newest FailedScaleUp, even when a later attempt (TriggeredScaleUp) or the
    back-off (NotTriggerScaleUp "in backoff") came after it: while the autoscaler retries
    after its back-off (5 min doubling to 30 min), the newest event only says it is trying
    again, and the failure's text (the zone, "GCE out of resources") is the cause."""
    failures = [e for e in events if e.get("reason") == SCALE_UP_FAILED]
    return failures[-1] if failures else None


NOT_TRIGGERED = "NotTriggerScaleUp"
_NOT_TRIGGERED_PREFIX = "pod didn't trigger scale-up:"
# NotTriggerScaleUp's reasons that pass by themselves (cluster-autoscaler core/scaleup/
# orchestrator/skippedreasons.go, rejectedreasons.go, orchestrator.go; processors/status/
# eventing_scale_up_processor.go ReasonsMessage): a back-off, a group at its size, the
# cluster's node limit. The others are the scheduler's predicates failing on every node
# group's template node ("node(s) didn't match Pod's node affinity/selector",
# "Insufficient google.com/tpu", "node(s) had untolerated taint ..."): no group can hold
# the pod however long it waits.
_PASSING = ("in backoff after failed scale-up", "max node group size reached",
            "not ready for scale-up", "max total nodes in cluster reached",
            "exceeds cluster node count limit", "all-or-nothing")


def no_pool_fits(events: list[Obj]) -> Obj | None:
    """The newest event when it is a NotTriggerScaleUp whose every reason is a node group
    that cannot hold the pod, else None. The message is "pod didn't trigger scale-up: " +
    "<count> <reason>" joined by ", " (ReasonsMessage); one without reasons (every group
    skipped as not existing yet) or any other text (ProvisioningRequest's "Unschedulable
    pod didn't trigger scale-up, because it's consuming ProvisioningRequest ...") decides
    nothing."""
    if not events or events[-1].get("reason") != NOT_TRIGGERED:
        return None
    message = str(events[-1].get("message") or "")
    if not message.startswith(_NOT_TRIGGERED_PREFIX):
        return None
    reasons = message.removeprefix(_NOT_TRIGGERED_PREFIX).strip()
    if not reasons or any(passing in reasons for passing in _PASSING):
        return None
    return events[-1]


def scaling_line(events: list[Obj]) -> str:
    """One line for the log while pods wait for nodes ("" without autoscaler news)."""
    if not events:
        return ""
    last = events[-1]
    return f"{last.get('reason')}: {last.get('message', '')}"
