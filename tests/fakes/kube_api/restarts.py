"""A child Job fails and the JobSet's failure policy acts, in the order of jobset v0.10.1
pkg/controllers/failure_policy.go and jobset_controller.go:

1. the Job controller marks the Job Failed with its reason (BackoffLimitExceeded when a
   pod failed in a way no podFailurePolicy rule matched, or a Pathways worker crash-looped
   past its backoffLimit; PodFailurePolicy when a FailJob rule matched);
2. executeFailurePolicy: the first rule whose onJobFailureReasons (and
   targetReplicatedJobs) match decides; none matching means RestartJobSet. FailJobSet sets
   Failed=True reason FailJobSetFailurePolicyAction; RestartJobSet with
   ``restartsCountTowardsMax >= maxRestarts`` sets Failed=True reason ReachedMaxRestarts
   ("jobset failed due to reaching max number of restarts (first failed job: <job>)");
   otherwise ``status.restarts`` is incremented, and nothing else, in this reconcile;
3. the next reconcile deletes the Jobs whose restart-attempt label is below
   ``status.restarts`` (Foreground), so their pods stop: SIGTERM, the Failed phase and the
   exit code posted with a deletionTimestamp, then gone (scenarios.stop_pods);
4. only once the old Job of a name is gone is a Job of that name created again
   (shouldCreateJob), labelled with the new restart attempt, and its pods with it.

So a watch sees ``status.restarts`` grow while no Job of the new attempt exists yet, and
the old attempt's pods end with exit codes their program never chose.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tests.fakes.kube_api.scenarios import (
    NS,
    Action,
    _fail,
    _pods,
    _set_condition,
    create_children,
    stop_pods_of,
)
from tests.fakes.kube_api.store import FakeKube, condition, jobset_failed

Obj = dict[str, Any]
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"


def _crash_looped(obj: Obj) -> None:
    """restartPolicy OnFailure: the kubelet restarts the container in place; the Job
    controller counts its restarts against backoffLimit."""
    for status in obj["status"].get("containerStatuses") or []:
        status.update(restartCount=33, lastState={"terminated": {"exitCode": 1,
                                                                 "reason": "Error"}},
                      state={"waiting": {"reason": "CrashLoopBackOff",
                                         "message": "back-off 5m0s restarting failed container"}})


def job_fails(replicated_job: str, reason: str = "BackoffLimitExceeded",
              compact_between: bool = False) -> Action:
    """Job 0 of ``replicated_job`` fails with ``reason`` (its pods crash-looped); the JobSet
    applies its failure policy. ``compact_between``: etcd compacts and the API server drops
    every watch between the old attempt's end and the new one's start, so a watch resumed
    from before gets 410 Gone and must list again."""
    def fail(kube: FakeKube, name: str) -> None:
        job = f"{name}-{replicated_job}-0"
        for pod in _pods(kube, name):
            if pod["metadata"]["labels"].get("jobset.sigs.k8s.io/replicatedjob-name") == \
                    replicated_job:
                kube.mutate("pods", NS, pod["metadata"]["name"], _crash_looped)
        message = "Job has reached the specified backoff limit"
        kube.mutate("jobs", NS, job, lambda o: _set_condition(
            o, condition("Failed", "True", reason, message)))
        js = kube.get("jobsets", NS, name)
        policy = js["spec"].get("failurePolicy") or {}
        rule = next((r for r in policy.get("rules") or []
                     if reason in (r.get("onJobFailureReasons") or [reason])
                     and replicated_job in (r.get("targetReplicatedJobs") or [replicated_job])),
                    None)
        action = rule["action"] if rule else "RestartJobSet"
        status = js.setdefault("status", {})
        counted = int(status.get("restartsCountTowardsMax") or 0)
        if action == "FailJobSet" or counted >= int(policy.get("maxRestarts") or 0):
            why = ("FailJobSetFailurePolicyAction" if action == "FailJobSet"
                   else "ReachedMaxRestarts")
            kube.mutate("jobsets", NS, name, lambda o: _fail(o, jobset_failed(why, job)))
            # the next reconcile: "If JobSet is already completed or failed, clean up active
            # child jobs" (jobset_controller.go reconcile → deleteJobs)
            stop_pods_of(kube, name, lambda p: p["metadata"]["labels"].get(
                "jobset.sigs.k8s.io/replicatedjob-name") != replicated_job)
            return
        attempt = int(status.get("restarts") or 0)

        def restarted(obj: Obj) -> None:
            obj["status"].update(restarts=attempt + 1, restartsCountTowardsMax=counted + 1)
        kube.mutate("jobsets", NS, name, restarted)
        _recreate(kube, name, attempt, compact_between)
    fail.__name__ = "job_fails"
    return fail


def _recreate(kube: FakeKube, name: str, attempt: int, compact_between: bool,
              stop_s: float = 0.3) -> None:
    """Steps 3 and 4; the old pods stay, Failed and deleting, for ``stop_s`` (the kubelet
    unmounts and removes cgroups before its final delete: syncTerminatedPod)."""
    def old(obj: Obj) -> bool:
        return int(obj["metadata"]["labels"].get(RESTART_ATTEMPT, 0)) <= attempt
    stale = [j["metadata"]["name"] for j in
             kube.find("jobs", NS, f"jobset.sigs.k8s.io/jobset-name={name}") if old(j)]
    pods = stop_pods_of(kube, name, old)
    uid = kube.get("jobsets", NS, name)["metadata"]["uid"]

    def next_attempt() -> None:
        with kube.cond:
            current = kube.objects.get(("jobsets", NS, name))
            if kube.closed or current is None or current["metadata"]["uid"] != uid:
                return
            for pod in pods:
                if ("pods", NS, pod) in kube.objects:
                    kube.delete("pods", NS, pod)
            for job in stale:
                if ("jobs", NS, job) in kube.objects:
                    kube.delete("jobs", NS, job)
            if compact_between:
                kube.compact()
                kube.cut_watches()
            create_children(kube, name)
    later(stop_s, next_attempt)


def later(delay_s: float, action: Callable[[], None]) -> None:
    timer = threading.Timer(delay_s, action)
    timer.daemon = True
    timer.start()


def old_attempt_disrupted(kube: FakeKube, name: str) -> None:
    """While the attempt a restart ended is still stopping (step 3), its node is shut down:
    the kubelet marks one of its pods DisruptionTarget. Its restart-attempt label (set when
    its Job was created: jobset_controller.go labelAndAnnotateObject) is below the JobSet's
    ``status.restarts`` by now."""
    current = int(kube.get("jobsets", NS, name)["status"].get("restarts") or 0)
    old = next(p["metadata"]["name"] for p in _pods(kube, name)
               if int(p["metadata"]["labels"][RESTART_ATTEMPT]) < current)
    kube.mutate("pods", NS, old, lambda o: _set_condition(o, condition(
        "DisruptionTarget", "True", "TerminationByKubelet",
        "Pod was terminated in response to imminent node shutdown.")))


def past_backoff_limit_on_failure(job: Obj, pods: list[Obj]) -> bool:
    """The Job controller's check for restartPolicy OnFailure (kubernetes
    pkg/controller/job/job_controller.go pastBackoffLimitOnFailure): the container and init
    container restarts of the Job's Running or Pending pods, summed over all of them, reach
    ``backoffLimit`` (any restart at all with a limit of 0)."""
    spec = job["spec"]
    if spec["template"]["spec"].get("restartPolicy") != "OnFailure":
        return False
    total = sum(int(s.get("restartCount") or 0) for pod in pods
                if (pod.get("status") or {}).get("phase") in ("Running", "Pending")
                for key in ("initContainerStatuses", "containerStatuses")
                for s in (pod.get("status") or {}).get(key) or [])
    limit = int(spec.get("backoffLimit", 6))
    return total > 0 if limit == 0 else total >= limit


def restarted_while_waiting(wait_s: float, first_s: float = 10.0, most_s: float = 300.0) -> int:
    """How often the kubelet restarts a container that exits at once, within ``wait_s``:
    after 10 s, then double each time up to 300 s (kubernetes pkg/kubelet/kubelet.go
    backOffPeriod, MaxContainerBackOff), counted independently of the product's own sum."""
    times, delay, at = [], first_s, 0.0
    while True:
        at += delay
        if at > wait_s:
            return len(times)
        times.append(at)
        delay = min(2 * delay, most_s)
