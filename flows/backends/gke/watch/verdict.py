"""What a JobSet's observed state means: a pure function of JobSet, Kueue Workload and pods.

Inputs are the objects as the Kubernetes API returns them (plain dicts), so the watcher, the
fake API of the tests and a `kubectl get -o json` dump all feed the same function. ``now`` is
a parameter, never read from the clock, so "queued too long" is testable.

Order matters, from the most specific evidence to the least:
1. the JobSet completed → succeeded;
2. the JobSet failed and a pod carries DisruptionTarget / was shut down with its node, or
   the watch saw such a pod during this attempt (``disruptions``: PodGC may have deleted
   it since) → preempted (resubmit and resume; not the program's fault). While the
   JobSet has not failed its own failure policy restarts it, so a disrupted pod alone is
   not terminal; a Workload that Kueue evicted is not terminal either: Kueue re-queues
   the same Workload by itself (kueue pkg/controller/jobframework/reconciler.go stops the
   job on eviction and the workload controller sets Requeued; pkg/workload/workload.go),
   keeping its queue position, so it stays queued under the queue budget, unless Kueue
   deactivated it (kueue.deactivated): that one is never re-queued;
3. the program's container failed (OOMKilled, non-zero exit with traceback) → user-error,
   unless the log names an infrastructure cause (then infrastructure), via flows.core.failures;
4. image pulls: a missing image or a refused pull is the user's (it never succeeds); other
   pull errors get ``pull_grace_s``, then infrastructure; unschedulable pods, a crashed
   Pathways server → infrastructure;
5. Kueue says the Workload cannot be admitted by waiting (kueue.py) → user-error at once;
6. still suspended (Kueue has not admitted it) beyond the queue budget → queue-timeout.
A JobSet that is neither finished nor failing yields ``phase`` queued/running and no diagnosis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from flows.backends.gke.fallback import NO_CAPACITY, NO_FLEX_CAPACITY
from flows.backends.gke.jobs.common import WORKLOAD_CONTAINER
from flows.backends.gke.watch.api_time import seconds_since
from flows.backends.gke.watch.evictions import CODE as EVICTION_CODE
from flows.backends.gke.watch.evictions import storage_eviction
from flows.backends.gke.watch.host_memory import memory_eviction, out_of_memory
from flows.backends.gke.watch.kueue import blocked, deactivated, status_line
from flows.backends.gke.watch.pulls import pull_verdict
from flows.backends.gke.watch.scaling import events_for, no_pool_fits, scale_up_failure, scaling_line
from flows.common.api_objects import Obj, condition
from flows.core.budgets import Budgets
from flows.core.failures import Diagnosis, FailureCategory, diagnose_exit

_PULL = frozenset({"ImagePullBackOff", "ErrImagePull", "ErrImageNeverPull", "RegistryUnavailable"})
_CONFIG = frozenset({"CreateContainerConfigError", "InvalidImageName", "CreateContainerError"})
_MAINTENANCE = ("maintenance", "NodeShutdown", "node shutdown", "Node is shutting down")


class Phase(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class Verdict:
    phase: Phase
    diagnosis: Diagnosis | None = None
    reason: str = ""  # one line for the log / UI, e.g. Kueue's pending message


def _tail(lines: list[str]) -> str:
    return "\n".join(f"    {line}" for line in lines[-30:])


def _diag(category: FailureCategory, summary: str, detail: str, fix: str,
          code: str = "") -> Verdict:
    return Verdict(Phase.FAILED, Diagnosis(category, summary, detail, fix, code), summary)


@dataclass(frozen=True)
class Observation:
    """What the watch saw of one JobSet, as the API returned it (plain dicts).
    ``pull_errors`` maps "pod/container" to the last ErrImagePull message seen: kubelet's
    ImagePullBackOff message only says "Back-off pulling image" and drops the cause.
    ``autoscaler_events`` are the cluster autoscaler's events (watch/scaling.py): with them
    an unschedulable pod is "waiting for nodes" or "no capacity" instead of a scheduler
    message. ``disruptions`` maps pod → why, for the disruptions the watch saw during this
    JobSet's current attempt (pods PodGC has deleted since, pods on nodes that are gone): a
    JobSet that fails after them was preempted, whatever its surviving pods say (the
    Pathways head exits 1 when it gives up on lost workers). ``ran_since_admitted``: seen
    running under the current admission (a suspension then is a stop)."""

    jobset: Obj
    workload: Obj | None = None
    pods: list[Obj] = field(default_factory=list)
    log_tail: list[str] = field(default_factory=list)
    pull_errors: dict[str, str] = field(default_factory=dict)
    autoscaler_events: list[Obj] = field(default_factory=list)
    disruptions: dict[str, str] = field(default_factory=dict)
    ran_since_admitted: bool = False


def diagnose(seen: Observation, budgets: Budgets, now: datetime) -> Verdict:
    """Classify the observed state of one JobSet (see the module docstring for the order)
    under the stage's budgets (flows/core/budgets.py: queue_s, schedule_s, pull_grace_s, and
    waits_for_capacity: flex-start keeps waiting for capacity under the queue budget instead
    of the scheduling budget)."""
    jobset, workload, pods, log_tail = seen.jobset, seen.workload, seen.pods, seen.log_tail
    queue_budget_s, schedule_budget_s = budgets.queue_s, budgets.schedule_s
    pull_errors, pull_grace_s = seen.pull_errors, budgets.pull_grace_s
    waits_for_capacity, disruptions = budgets.waits_for_capacity, seen.disruptions
    autoscaler_events, ran_since_admitted = seen.autoscaler_events, seen.ran_since_admitted
    name = jobset.get("metadata", {}).get("name", "jobset")
    if condition(jobset, "Completed"):
        return Verdict(Phase.SUCCEEDED, None, f"{name} completed")
    failed = condition(jobset, "Failed")
    disrupted = _disrupted(name, pods)
    if failed and not disrupted and disruptions:
        pod, why = sorted(disruptions.items())[0]
        disrupted = _preempted(name, pod, why)
    if disrupted and failed:
        return disrupted
    if disrupted:  # the JobSet restarts its jobs by itself: look at the other pods only
        gone = {_pod_name(p) for p in pods if _is_disrupted(p)}
        pods = [p for p in pods if _pod_name(p) not in gone]
    scaling = events_for(autoscaler_events or [], {_pod_name(p) for p in pods})
    waiting_budget_s = queue_budget_s if waits_for_capacity else schedule_budget_s
    evidence = [p for p in pods if not _stopped(p, bool(failed))]
    found = (_host_out_of_memory(name, evidence)
             or _program_failed(name, evidence, log_tail)
             or _no_pool_fits(name, evidence, now, schedule_budget_s, scaling)
             or _infrastructure(name, evidence, now, waiting_budget_s, pull_errors or {},
                                pull_grace_s, scaling, waits_for_capacity))
    if found:
        return found
    if failed:
        return _diag(FailureCategory.INFRASTRUCTURE, f"{name} failed: {failed.get('reason')}: "
                     f"{failed.get('message', '')}", _tail(log_tail),
                     "no pod explains it (they may be gone); it is retried with backoff")
    if stuck := deactivated(name, workload) or blocked(name, workload):
        return Verdict(Phase.FAILED, stuck, stuck.summary)
    # a JobSet seen running under this admission and suspended again is being stopped, even
    # before the pods' deletion or the Workload's Evicted reach their watches
    terminating = ran_since_admitted or any(
        (p.get("metadata") or {}).get("deletionTimestamp") for p in pods)
    verdict = _queued_or_running(name, jobset, workload, now, queue_budget_s, terminating)
    # an admitted JobSet whose pods wait for nodes; with startupPolicy InOrder (Pathways) the
    # JobSet keeps Suspended=True until every pod runs (jobset pkg/controllers/
    # jobset_controller.go resumeJobsIfNecessary returns before setJobSetResumedCondition)
    started = not (jobset.get("spec") or {}).get("suspend")
    if verdict.phase in (Phase.RUNNING, Phase.QUEUED) and started and scaling and \
            _unscheduled(pods):
        return Verdict(Phase.QUEUED, None, f"{name} is waiting for nodes: "
                       f"{scaling_line(scaling)}")
    return verdict


def _host_out_of_memory(name: str, pods: list[Obj]) -> Verdict | None:
    """Before the program's exit: a head that lost an OOMKilled worker exits with a
    traceback of its own (watch/host_memory.py)."""
    found = out_of_memory(name, pods, WORKLOAD_CONTAINER)
    return Verdict(Phase.FAILED, found, found.summary) if found else None


def _no_pool_fits(name: str, pods: list[Obj], now: datetime, budget_s: float,
                  scaling: list[Obj]) -> Verdict | None:
    """A pod unschedulable beyond the scheduling budget that the autoscaler says no node
    group can hold (scaling.no_pool_fits): the profile asks for nodes the cluster does not
    have. Waiting longer (flex-start's queue budget, hours) or retrying changes nothing."""
    for pod in pods:
        scheduled = next((c for c in (pod.get("status") or {}).get("conditions") or []
                          if c.get("type") == "PodScheduled" and c.get("status") == "False"
                          and c.get("reason") == "Unschedulable"), None)
        if not scheduled or seconds_since(scheduled.get("lastTransitionTime"), now) <= budget_s:
            continue
        unfit = no_pool_fits(events_for(scaling, {_pod_name(pod)}))
        if unfit is not None:
            return _diag(FailureCategory.USER_ERROR,
                         f"{name}: no node pool can hold pod {_pod_name(pod)}: "
                         f"{unfit.get('message', '')}", f"    {scheduled.get('message', '')}",
                         "the pods ask for nodes no node pool of the cluster provides: "
                         "gke.machine_type, gke.topology and gke.cpu_pool must match the "
                         "cluster's pools (redeploy the cluster with them, or change the "
                         "profile); the autoscaler created no node for it")
    return None


def _stopped(pod: Obj, failed: bool) -> bool:
    """A pod being deleted was stopped, not failed: a Kueue eviction suspends the JobSet,
    whose controller suspends its Jobs, whose controller deletes their pods (jobset
    pkg/controllers/jobset_controller.go suspendJobs; kubernetes pkg/controller/job/
    job_controller.go deleteJobPods); a failure-policy restart deletes the attempt's Jobs.
    The kubelet then posts each container's end (SIGTERM's 143, or 137 once the grace
    period ran out) and the Failed phase before the pod goes (pkg/kubelet/status/
    status_manager.go canBeDeleted), so the watch sees an exit code the program never
    chose. While the JobSet has not failed such a pod explains nothing (it is stopping or
    restarting); once it failed, only a signal's exit is the stop's, any other is kept."""
    if not (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if not failed:
        return True
    return any(_killed_by_signal(state) for state in _terminated(pod, WORKLOAD_CONTAINER))


def _killed_by_signal(state: Obj) -> bool:
    return int(state.get("exitCode", 0)) in (128 + 15, 128 + 9) and \
        state.get("reason") != "OOMKilled"


def _unscheduled(pods: list[Obj]) -> bool:
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               for p in pods for c in (p.get("status") or {}).get("conditions") or [])


def _is_disrupted(pod: Obj) -> bool:
    status = pod.get("status") or {}
    message = f"{status.get('reason', '')} {status.get('message', '')}"
    if storage_eviction(message) is not None or memory_eviction(message) is not None:
        return False  # evicted for its own disk or memory use: a sizing error, not a
        # disruption (_program_failed, _host_out_of_memory)
    return bool(condition(pod, "DisruptionTarget")) or any(w in message for w in _MAINTENANCE)


def disruption_of(pod: Obj) -> str | None:
    """Pure: why the pod was disrupted ("<reason>: <message>", and its node), or None."""
    if not _is_disrupted(pod):
        return None
    status = pod.get("status") or {}
    disruption = condition(pod, "DisruptionTarget")
    why = (f"{disruption.get('reason')}: {disruption.get('message', '')}" if disruption
           else f"{status.get('reason', '')} {status.get('message', '')}".strip())
    return f"{why} (node {pod.get('spec', {}).get('nodeName') or '?'})"


def _preempted(name: str, pod: str, why: str) -> Verdict:
    return _diag(FailureCategory.PREEMPTED, f"{name}: pod {pod} was disrupted ({why})",
                 f"    {why}", "host preempted or under maintenance; resubmitted with the "
                 "same run name, resuming from the newest actor checkpoint")


def _disrupted(name: str, pods: list[Obj]) -> Verdict | None:
    for pod in pods:
        if why := disruption_of(pod):
            return _preempted(name, _pod_name(pod), why)
    return None


def _program_failed(name: str, pods: list[Obj], log_tail: list[str]) -> Verdict | None:
    for pod in pods:
        status = pod.get("status") or {}
        if found := storage_eviction(str(status.get("message", ""))):
            summary = f"{name}: pod {_pod_name(pod)} was evicted for disk: {found[0]}"
            return Verdict(Phase.FAILED, Diagnosis(
                FailureCategory.USER_ERROR, summary, f"    {status.get('message')}", found[1],
                EVICTION_CODE), summary)
        for state in _terminated(pod, WORKLOAD_CONTAINER):
            if state.get("reason") == "OOMKilled":
                return _diag(FailureCategory.USER_ERROR,
                             f"{name}: {WORKLOAD_CONTAINER} was OOMKilled", _tail(log_tail),
                             "the same configuration will be killed again: raise the memory "
                             "limit or shrink the step (batch, lengths)")
            code = int(state.get("exitCode", 0))
            if code == 128 + 9:  # not OOMKilled: the runtime says so when the OOM killer did it
                return _diag(FailureCategory.INFRASTRUCTURE,
                             f"{name}: {WORKLOAD_CONTAINER} of pod {_pod_name(pod)} was killed "
                             "(SIGKILL, exit 137) from outside, not by the out-of-memory "
                             "killer (the container runtime reports OOMKilled for that)",
                             _tail(log_tail), "a stop whose grace period (30 s, the "
                             "pods' terminationGracePeriodSeconds) ran out, or the node "
                             "killed it; retried with backoff")
            if code != 0:
                returncode = -(code - 128) if code > 128 else code
                diagnosis = diagnose_exit(name, returncode, log_tail)
                return Verdict(Phase.FAILED, diagnosis, diagnosis.summary)
    return None


def _infrastructure(name: str, pods: list[Obj], now: datetime, schedule_budget_s: float,
                    pull_errors: dict[str, str], pull_grace_s: float,
                    scaling: list[Obj] | None = None,
                    waits_for_capacity: bool = False) -> Verdict | None:
    for pod in pods:
        for container in _container_statuses(pod):
            waiting = (container.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason", "")
            if reason in _PULL:
                key = f"{_pod_name(pod)}/{container.get('name')}"
                started = (pod.get("status") or {}).get("startTime") or \
                    pod.get("metadata", {}).get("creationTimestamp")
                diagnosis = pull_verdict(name, str(container.get("name")), reason,
                                         str(waiting.get("message", "")),
                                         pull_errors.get(key, ""), seconds_since(started, now),
                                         pull_grace_s)
                if diagnosis:
                    return Verdict(Phase.FAILED, diagnosis, diagnosis.summary)
                continue
            if reason in _CONFIG:
                category = (FailureCategory.USER_ERROR if reason == "InvalidImageName"
                            else FailureCategory.INFRASTRUCTURE)
                return _diag(category, f"{name}: {container.get('name')} cannot start: {reason}",
                             f"    {waiting.get('message', '')}",
                             "check the image exists and the node service account may pull it "
                             "(artifactregistry.reader), and that the Secret exists")
            terminated = (container.get("state") or {}).get("terminated") or {}
            if container.get("name") != WORKLOAD_CONTAINER and terminated.get("exitCode", 0):
                return _diag(FailureCategory.INFRASTRUCTURE,
                             f"{name}: {container.get('name')} exited with "
                             f"{terminated.get('exitCode')} ({terminated.get('reason', '')})",
                             f"    {terminated.get('message', '')}",
                             "a Pathways server crashed; retried with backoff")
        scheduled = next((c for c in (pod.get("status") or {}).get("conditions") or []
                          if c.get("type") == "PodScheduled" and c.get("status") == "False"), None)
        if scheduled and scheduled.get("reason") == "Unschedulable" and \
                seconds_since(scheduled.get("lastTransitionTime"), now) > schedule_budget_s:
            refused = scale_up_failure(scaling or [])
            if waits_for_capacity:
                cause = (scaling_line([refused]) if refused is not None
                         else scaling_line(scaling or []) or "no scale-up yet")
                return _diag(FailureCategory.QUEUE_TIMEOUT,
                             f"{name}: waited {schedule_budget_s / 60:.0f} min for flex-start "
                             f"capacity: {cause}",
                             f"    {scheduled.get('message', '')}",
                             "no slice was free in the zone within the queue budget: retry "
                             "later, raise gke.queue_budget_s, or use another zone or a "
                             "reservation; nothing was spent", NO_FLEX_CAPACITY)
            if refused is not None:
                return _diag(FailureCategory.INFRASTRUCTURE,
                             f"{name}: no TPU capacity for pod {_pod_name(pod)}: "
                             f"{refused.get('message', '')}",
                             f"    {scheduled.get('message', '')}",
                             "the zone has no free slice of this shape now (the autoscaler "
                             "could not create the nodes): retried with backoff; capacity "
                             "flex-start waits for capacity instead, a reservation holds it",
                             NO_CAPACITY)
            return _diag(FailureCategory.INFRASTRUCTURE,
                         f"{name}: pod {_pod_name(pod)} is unschedulable",
                         f"    {scheduled.get('message', '')}",
                         "the node pool lacks capacity (TPU reservation, cpu-np size or disk); "
                         "check the pools, then it is retried")
    return None


def _queued_or_running(name: str, jobset: Obj, workload: Obj | None, now: datetime,
                       queue_budget_s: float, terminating: bool = False) -> Verdict:
    suspended = (bool((jobset.get("spec") or {}).get("suspend"))
                 or condition(jobset, "Suspended") is not None
                 or (workload is not None and condition(workload, "Admitted") is None))
    if not suspended:
        return Verdict(Phase.RUNNING, None, f"{name} is running")
    why, since, admitted = status_line(workload)
    if admitted and terminating:  # its pods are being deleted: it is being stopped
        # (Kueue evicts before it releases the quota; the Workload watch may lag the
        # JobSet's). Pods of a start are new, without a deletionTimestamp.
        return Verdict(Phase.QUEUED, None, f"{name} is stopping: the JobSet was suspended "
                       "and its pods are terminating (a Kueue eviction)")
    if admitted:  # Kueue admitted it; the JobSet controller has not unsuspended it yet
        return Verdict(Phase.QUEUED, None, f"{name} is starting: {why}")
    since = since or jobset.get("metadata", {}).get("creationTimestamp")
    waited = seconds_since(since, now)
    if waited > queue_budget_s:
        return _diag(FailureCategory.QUEUE_TIMEOUT,
                     f"{name} waited {waited / 60:.0f} min in the queue: {why}",
                     f"    queue budget {queue_budget_s / 60:.0f} min",
                     "free quota in the ClusterQueue (another job holds the slice?) or raise "
                     "the queue budget; nothing ran, nothing was spent on this job")
    return Verdict(Phase.QUEUED, None, f"{name} is queued: {why}")


def _pod_name(pod: Obj) -> str:
    return str(pod.get("metadata", {}).get("name", "?"))


def _container_statuses(pod: Obj) -> list[Obj]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def _terminated(pod: Obj, container: str) -> list[Obj]:
    states = []
    for status in _container_statuses(pod):
        if status.get("name") != container:
            continue
        for key in ("state", "lastState"):
            if terminated := (status.get(key) or {}).get("terminated"):
                states.append(terminated)
    return states
