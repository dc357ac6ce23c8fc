"""What Kueue, the JobSet controller, the kubelet and the program do, as actions on FakeKube.

A scenario is a list of scripts, one per JobSet creation (the first submission, then each
resubmission), each a list of (delay seconds, action). Actions change objects the way the
real controllers do, so the backend sees the same sequence of watch events it would see on a
cluster: Workload admitted → JobSet unsuspended → Jobs and pods created → containers running
→ log lines → terminated → JobSet condition.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.fakes.kube_api import scheduler
from tests.fakes.kube_api.placement import NODE_POOL, exclusive_pool, slice_of
from tests.fakes.kube_api.store import (
    FakeKube,
    Script,
    condition,
    jobset_failed,
    now_iso,
    terminated,
)

NS = "default"
Obj = dict[str, Any]
Action = Callable[[FakeKube, str], None]


def _set_condition(obj: Obj, cond: Obj) -> None:
    conds = obj.setdefault("status", {}).setdefault("conditions", [])
    conds[:] = [c for c in conds if c["type"] != cond["type"]] + [cond]


def _fail(jobset: Obj, cond: Obj) -> None:
    """failure_policy.go setJobSetFailedCondition: the condition and the terminal state."""
    _set_condition(jobset, cond)
    jobset["status"]["terminalState"] = "Failed"


def _job_of(kube: FakeKube, pod: str) -> str:
    """The child Job a pod belongs to (placement.GenJobName: <jobset>-<rjob>-<index>)."""
    labels = kube.get("pods", NS, pod)["metadata"]["labels"]
    return (f"{labels['jobset.sigs.k8s.io/jobset-name']}-"
            f"{labels['jobset.sigs.k8s.io/replicatedjob-name']}-"
            f"{labels['jobset.sigs.k8s.io/job-index']}")


def _workload(kube: FakeKube, name: str) -> Obj | None:
    uid = kube.get("jobsets", NS, name)["metadata"]["uid"]
    found = kube.find("workloads", NS, f"kueue.x-k8s.io/job-uid={uid}")
    return found[0] if found else None


def _pods(kube: FakeKube, name: str) -> list[Obj]:
    return kube.find("pods", NS, f"jobset.sigs.k8s.io/jobset-name={name}")


def coordinator(kube: FakeKube, name: str) -> str:
    """The pod whose workload-container is the program (Pathways head, or index 0)."""
    pods = sorted(_pods(kube, name), key=lambda p: bool(p["metadata"].get("deletionTimestamp")))
    for pod in pods:
        if pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "pathways-head":
            return pod["metadata"]["name"]
    return pods[0]["metadata"]["name"]


def admit(kube: FakeKube, name: str) -> None:
    """Kueue admits the Workload and unsuspends the JobSet; the JobSet controller creates one
    Job per replicated job replica, the Job controller one pod per completion index."""
    js = kube.get("jobsets", NS, name)
    if wl := _workload(kube, name):
        def admitted(obj: Obj) -> None:
            _set_condition(obj, condition("QuotaReserved", "True", "QuotaReserved",
                                      "Quota reserved in ClusterQueue tpu-cq"))
            _set_condition(obj, condition("Admitted", "True", "Admitted",
                                      "The workload is admitted"))
            evicted = next((c for c in obj["status"]["conditions"]
                            if c["type"] == "Evicted"), None)
            if evicted and evicted["status"] == "True":
                # kueue pkg/workload/workload.go SetQuotaReservation: on
                # re-admission the Evicted condition turns False, "Previously: <message>"
                _set_condition(obj, condition("Evicted", "False", "QuotaReserved",
                                          f"Previously: {evicted['message']}"))
        kube.mutate("workloads", NS, wl["metadata"]["name"], admitted)
    kube.mutate("jobsets", NS, name, lambda o: o["spec"].update(suspend=False))
    if _in_order(js):
        kube.mutate("jobsets", NS, name, lambda o: _set_condition(o, condition(
            "StartupPolicyInProgress", "True", "InOrderStartupPolicyInProgress",
            "in order startup policy is in progress")))
    else:
        _resumed(kube, name)
    create_children(kube, name)


def _in_order(js: Obj) -> bool:
    return ((js.get("spec") or {}).get("startupPolicy") or {}).get(
        "startupPolicyOrder") == "InOrder"


def _resumed(kube: FakeKube, name: str) -> None:
    """jobset_controller.go resumeJobsIfNecessary → setJobSetResumedCondition: Suspended
    turns False once every replicated job is resumed. With startupPolicy InOrder it returns
    early while a replicated job is not started (startup_policy.go allReplicasStarted: its
    Jobs ready), so a Pathways JobSet stays Suspended=True, spec.suspend false, until all
    its pods run: while the TPU slice scales up, for one."""
    js = kube.get("jobsets", NS, name)
    conds = (js.get("status") or {}).get("conditions") or []
    if any(c["type"] == "Suspended" and c["status"] == "True" for c in conds):
        kube.mutate("jobsets", NS, name, lambda o: _set_condition(
            o, condition("Suspended", "False", "ResumeJobs", "jobset is resumed")))
    if _in_order(js):
        def completed(obj: Obj) -> None:
            _set_condition(obj, condition("StartupPolicyInProgress", "False",
                                          "InOrderStartupPolicyInProgress",
                                          "in order startup policy is in progress"))
            _set_condition(obj, condition("StartupPolicyCompleted", "True",
                                          "InOrderStartupPolicyCompleted",
                                          "in order startup policy has completed"))
        kube.mutate("jobsets", NS, name, completed)


def create_children(kube: FakeKube, name: str) -> None:
    """The JobSet controller's Jobs of the current attempt (those missing), and their pods.
    With startupPolicy InOrder (Pathways: head, then workers) a replicated job's Jobs are
    resumed, their pods made, only once every Job before it is ready (jobset v0.10.1
    jobset_controller.go resumeJobsIfNecessary, allReplicasStarted); until then they wait
    suspended (reconcileReplicatedJobs). ``start`` calls this again for the next."""
    js = kube.get("jobsets", NS, name)
    owner = [{"kind": "JobSet", "name": name, "uid": js["metadata"]["uid"]}]
    attempt = str((js.get("status") or {}).get("restarts") or 0)
    in_order = _in_order(js) and not js["spec"].get("suspend")
    waiting = False  # InOrder: a replicated job before this one has not started yet
    live = {(p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"],
             p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"],
             p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index"))
            for p in _pods(kube, name) if not p["metadata"].get("deletionTimestamp")}
    for rjob in js["spec"]["replicatedJobs"]:
        spec = rjob["template"]["spec"]
        containers = [c["name"] for c in spec["template"]["spec"]["containers"]]
        for replica in range(rjob.get("replicas", 1)):
            job = f"{name}-{rjob['name']}-{replica}"
            # jobset_controller.go labelAndAnnotateObject labels the Job and its pod
            # template alike, with the restart attempt (status.restarts) they belong to
            labels = {"jobset.sigs.k8s.io/jobset-name": name,
                      "jobset.sigs.k8s.io/jobset-uid": js["metadata"]["uid"],
                      "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                      "jobset.sigs.k8s.io/job-index": str(replica),
                      "jobset.sigs.k8s.io/restart-attempt": attempt}
            if ("jobs", NS, job) not in kube.objects:  # kept, suspended, across an eviction
                kube.create("jobs", NS, {"metadata": {"name": job, "labels": labels,
                                                      "ownerReferences": owner},
                                         "spec": {**spec, "suspend": True} if waiting
                                         else spec})
            elif not waiting:  # resumeJob
                kube.mutate("jobs", NS, job, lambda o: o["spec"].update(suspend=False))
            if waiting:
                continue
            pool = exclusive_pool(rjob, replica)
            for index in range(spec.get("parallelism", 1)):
                if (rjob["name"], str(replica), str(index)) in live:
                    continue
                node = f"{pool}-node-{index}" if pool else f"node-{index}"  # else cpu-np
                if ("nodes", "", node) not in kube.objects:
                    kube.create("nodes", "", {"metadata": {"name": node, "labels": (
                        {NODE_POOL: pool} if pool else {})}})
                pod = kube.create("pods", NS, {
                    "metadata": {"name": f"{job}-{index}-x{kube.rv % 100000}",
                                 "labels": {**labels,
                                            "batch.kubernetes.io/job-completion-index": str(index)},
                                 "ownerReferences": owner},
                    # the Job controller's pod is its template's spec (containers with
                    # their resources: what the spend meter reads), bound by the scheduler
                    "spec": scheduler.unbound(kube, copy.deepcopy(spec["template"]["spec"]),
                                              node),
                    "status": {"phase": "Pending", "containerStatuses": [
                        {"name": c, "state": {"waiting": {"reason": "ContainerCreating"}}}
                        for c in containers]}})
                scheduler.bind_later(kube, NS, pod, node)
        waiting = waiting or (in_order and not started(kube, name, rjob["name"]))


def started(kube: FakeKube, name: str, replicated_job: str) -> bool:
    """startup_policy.go allReplicasStarted, with a Job ready when its pods run."""
    pods = [p for p in _pods(kube, name) if not p["metadata"].get("deletionTimestamp") and
            p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == replicated_job]
    return bool(pods) and all(p["status"].get("phase") == "Running" for p in pods)


def _containers(kube: FakeKube, name: str, state: Obj, phase: str, only: str | None = None,
                coordinator_only: bool = False, slices: set[int] | None = None) -> None:
    head = coordinator(kube, name)
    for pod in _pods(kube, name):
        if coordinator_only and pod["metadata"]["name"] != head:
            continue
        if slices is not None and slice_of(pod) not in (None, *slices):
            continue
        if pod["metadata"].get("deletionTimestamp"):  # being stopped: no container starts
            continue

        def change(obj: Obj) -> None:
            obj["status"]["phase"] = phase
            for status in obj["status"]["containerStatuses"]:
                if only is None or status["name"] == only:
                    status["state"] = dict(state)
        kube.mutate("pods", NS, pod["metadata"]["name"], change)


def start(kube: FakeKube, name: str) -> None:
    """The pods' containers start; with InOrder the next replicated job is then resumed
    and its pods start too, or, under the TPU-pool fake (``kube.action_gate``), when
    nodepools.py binds them."""
    _containers(kube, name, {"running": {"startedAt": now_iso()}}, "Running")
    js = kube.get("jobsets", NS, name)
    if not _in_order(js) or js["spec"].get("suspend"):
        return
    while True:
        before = len(_pods(kube, name))
        create_children(kube, name)
        if len(_pods(kube, name)) == before or kube.action_gate is not None:
            break
        _containers(kube, name, {"running": {"startedAt": now_iso()}}, "Running")
    if all(started(kube, name, r["name"]) for r in js["spec"]["replicatedJobs"]):
        _resumed(kube, name)  # every pod runs: all started


def say(*lines: str) -> Action:
    def log(kube: FakeKube, name: str) -> None:
        kube.append_log(NS, coordinator(kube, name), "workload-container", list(lines))
    return log


def succeed(kube: FakeKube, name: str) -> None:
    """The program exits 0; the JobSet completes (successPolicy on the head); Kueue finishes."""
    _containers(kube, name, terminated(0, "Completed"), "Succeeded",
                only="workload-container", coordinator_only=True)
    kube.mutate("jobsets", NS, name, lambda o: _set_condition(
        o, condition("Completed", "True", "AllJobsCompleted", "jobset completed successfully")))
    if wl := _workload(kube, name):
        kube.mutate("workloads", NS, wl["metadata"]["name"], lambda o: _set_condition(
            o, condition("Finished", "True", "Succeeded")))


def exit_with(code: int, reason: str = "Error") -> Action:
    def fail(kube: FakeKube, name: str) -> None:
        _containers(kube, name, terminated(code, reason), "Failed",
                    only="workload-container", coordinator_only=True)
        head = _job_of(kube, coordinator(kube, name))
        kube.mutate("jobsets", NS, name, lambda o: _fail(
            o, jobset_failed("FailJobSetFailurePolicyAction", head)))
    fail.__name__ = f"exit_{code}"
    return fail


def evict(kube: FakeKube, name: str) -> None:
    """Kueue preempts, in the order of kueue pkg/controller/jobframework/reconciler.go
    ("handle eviction"): the Workload gets Evicted=True while it still holds its quota
    (QuotaReserved and Admitted stay True), the job is stopped (JobSet suspended, its pods
    deleted), and only once the job is no longer active is the reservation unset
    (UnsetQuotaReservationWithCondition: QuotaReserved=False Pending, Admitted=False) and
    Requeued=True set (pkg/workload/workload.go). The quota is released ``release_s``
    after the stop (when its terminating pods are gone); the same JobSet is admitted again later by
    ``admit``."""
    evict_releasing(0.1)(kube, name)


# kueue v0.15.2 pkg/scheduler/preemption/preemption.go preemptionMessage (reason InClusterQueue)
PREEMPTED = ("Preempted to accommodate a workload (UID: 5f0c6b1e, JobUID: 9a2d7c44) due to "
             "prioritization in the ClusterQueue; preemptor path: /tpu-cq; preemptee path: "
             "/tpu-cq")


def stop_pods(kube: FakeKube, name: str, exit_code: int = 143) -> list[str]:
    """What a suspended JobSet does to its pods. The JobSet controller suspends its child
    Jobs and sets Suspended=True (jobset v0.10.1 pkg/controllers/jobset_controller.go
    suspendJobs, setJobSetSuspendedCondition: reason SuspendedJobs); the Job controller
    deletes their active pods, removing the tracking finalizer first so they do not count
    as failures (kubernetes pkg/controller/job/job_controller.go manageJob, deleteJobPods);
    the kubelet stops each container with SIGTERM (143; 137 once the grace period ran out)
    and posts the terminal phase before it lets the pod go (pkg/kubelet/status/
    status_manager.go canBeDeleted: "Delay deletion of pods until the phase is terminal").
    So a watch sees every stopped pod Failed, with its container's exit code and a
    deletionTimestamp, before the pod is deleted. Returns the pods' names."""
    kube.mutate("jobsets", NS, name, lambda o: _set_condition(
        o, condition("Suspended", "True", "SuspendedJobs", "jobset is suspended")))
    for job in kube.find("jobs", NS, f"jobset.sigs.k8s.io/jobset-name={name}"):
        kube.mutate("jobs", NS, job["metadata"]["name"], lambda o: o["spec"].update(suspend=True))
    return stop_pods_of(kube, name, lambda _pod: True, exit_code)


def stop_pods_of(kube: FakeKube, name: str, which: Callable[[Obj], bool],
                 exit_code: int = 143) -> list[str]:
    """Deleted pods as the kubelet ends them (see stop_pods); not yet deleted."""
    pods = [p["metadata"]["name"] for p in _pods(kube, name) if which(p)]
    for pod in pods:
        kube.mutate("pods", NS, pod, lambda o: o["metadata"].update(deletionTimestamp=now_iso()))

    def killed(obj: Obj) -> None:
        obj["status"]["phase"] = "Failed"
        for status in obj["status"].get("containerStatuses") or []:
            if "running" in (status.get("state") or {}):
                status["state"] = terminated(exit_code, "Error", status["state"])
    for pod in pods:
        kube.mutate("pods", NS, pod, killed)
    return pods


def evict_releasing(release_s: float, exit_code: int = 143) -> Action:
    """A preemption, as kueue_evictions.kueue_evicts plays every eviction reason."""
    from tests.fakes.kube_api.kueue_evictions import kueue_evicts  # it builds on this module

    return kueue_evicts("Preempted", PREEMPTED, release_s, exit_code)


def reserve_quota(kube: FakeKube, name: str) -> None:
    """Kueue reserves quota and admits the Workload; the JobSet is unsuspended later (``admit``
    does both; this leaves the window the status line must get right)."""
    if wl := _workload(kube, name):
        def reserved(obj: Obj) -> None:
            _set_condition(obj, condition("QuotaReserved", "True", "QuotaReserved",
                                      "Quota reserved in ClusterQueue tpu-cq"))
            _set_condition(obj, condition("Admitted", "True", "Admitted",
                                      "The workload is admitted"))
        kube.mutate("workloads", NS, wl["metadata"]["name"], reserved)


def api_down(kube: FakeKube, name: str) -> None:
    """From now on every request fails with 503 (a control plane that stays down)."""
    kube.fail_next(10**9)


def pending(message: str, reason: str = "Pending") -> Action:
    """Kueue cannot admit the Workload: QuotaReserved=False with Kueue's own message (see
    flows/backends/gke/watch/kueue.py for the source of each text)."""
    def stuck(kube: FakeKube, name: str) -> None:
        if wl := _workload(kube, name):
            kube.mutate("workloads", NS, wl["metadata"]["name"], lambda o: _set_condition(
                o, condition("QuotaReserved", "False", reason, message)))
    stuck.__name__ = "pending"
    return stuck


def pull_fails(message: str, backoff_s: float = 10.0, cap_s: float = 300.0) -> Action:
    """kubelet's pull failure (kubernetes pkg/kubelet/images/image_manager.go,
    EnsureImageExists): one pull attempt reports ErrImagePull with the runtime's error text;
    then, while the image back-off for that pod and image runs, every sync reports
    ImagePullBackOff with only 'Back-off pulling image "<img>"'. The cause is posted once
    per attempt, and attempts are the back-off apart: 10 s, doubling to 300 s (pkg/kubelet/
    kubelet.go: flowcontrol.NewBackOff(backOffPeriod, MaxContainerBackOff)). So a watcher
    that only looks at the newest state sees the cause once, for an instant."""
    def attempt(kube: FakeKube, name: str) -> None:
        _containers(kube, name, {"waiting": {"reason": "ErrImagePull", "message": message}},
                    "Pending")
        _containers(kube, name, {"waiting": {"reason": "ImagePullBackOff",
                                             "message": 'Back-off pulling image "img:1"'}},
                    "Pending")

    def fail(kube: FakeKube, name: str) -> None:
        attempt(kube, name)

        def retry() -> None:
            wait = backoff_s
            while not kube.closed:
                time.sleep(wait)
                if not _pods(kube, name):
                    return
                attempt(kube, name)
                wait = min(wait * 2, cap_s)
        threading.Thread(target=retry, daemon=True, name=f"kubelet-pull-{name}").start()
    fail.__name__ = "pull_fails"
    return fail


def once_its_pods_are_watched(action: Action, timeout_s: float = 60.0) -> Action:
    """``action`` once a client has listed this JobSet's pods (a list, or a watch from now).
    On a cluster, kubelet's first pull comes seconds after the JobSet's create (the JobSet
    and Job controllers, the scheduler, the node's sync), long after the monitor lists the
    pods; the fake's scripts come 0.1 s apart, which a loaded machine can outrun. Runs
    under the store's lock, which ``cond.wait`` releases while it waits."""
    def gated(kube: FakeKube, name: str) -> None:
        selector = f"jobset.sigs.k8s.io/jobset-name={name}"
        deadline = time.monotonic() + timeout_s
        while not any(plural == "pods" and selector in labels
                      for plural, labels in kube.listed):
            if kube.closed or time.monotonic() >= deadline:
                return
            kube.cond.wait(timeout=0.05)
        action(kube, name)
    gated.__name__ = getattr(action, "__name__", "action")
    return gated


def disrupt_and_fail(kube: FakeKube, name: str) -> None:
    """A host is preempted: its pod gets DisruptionTarget (kubelet/taint manager), the Job
    fails and the JobSet, its restarts spent, is Failed (jobset controller)."""
    for pod in _pods(kube, name):
        kube.mutate("pods", NS, pod["metadata"]["name"], lambda o: _set_condition(
            o, condition("DisruptionTarget", "True", "TerminationByKubelet",
                     "Pod was terminated in response to imminent node shutdown.")))
    first = _job_of(kube, _pods(kube, name)[0]["metadata"]["name"])
    kube.mutate("jobsets", NS, name, lambda o: _fail(o, jobset_failed("ReachedMaxRestarts", first)))


def image_pull_backoff(kube: FakeKube, name: str) -> None:
    _containers(kube, name, {"waiting": {"reason": "ImagePullBackOff",
                                         "message": 'Back-off pulling image "example/img:1"'}},
                "Pending")


def scenario(kube: FakeKube, *scripts: Script) -> FakeKube:
    kube.scripts = list(scripts)
    return kube


def operator_deletes(kube: FakeKube, name: str) -> None:
    """`kubectl delete jobset <name>`: kubectl's default cascade is background, so the API
    server removes the JobSet at once (no finalizer) and the garbage collector its Jobs and
    pods (kubernetes staging/src/k8s.io/kubectl/pkg/cmd/delete/delete.go,
    --cascade=background)."""
    kube.delete("jobsets", NS, name, "Background")


def worker_crashes(kube: FakeKube, name: str) -> None:
    """A Pathways worker container exits 1 and its Job fails (backoffLimit spent): the
    JobSet fails while the head's program is still running (it is deleted afterwards)."""
    for pod in _pods(kube, name):
        if pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] != "worker":
            continue

        def crashed(obj: Obj) -> None:
            obj["status"]["phase"] = "Failed"
            for status in obj["status"]["containerStatuses"]:
                status["state"] = {"terminated": {"exitCode": 1, "reason": "Error",
                                                  "message": "pathways worker: fatal"}}
        kube.mutate("pods", NS, pod["metadata"]["name"], crashed)
        break
    worker = f"{name}-worker-0"  # backoffLimit spent, no rule matches: RestartJobSet, none left
    kube.mutate("jobsets", NS, name, lambda o: _fail(o, jobset_failed("ReachedMaxRestarts", worker)))
