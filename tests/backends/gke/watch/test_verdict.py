"""Observed JobSet + Kueue Workload + pods → phase and failure category, table-driven.

The objects are shaped as the API returns them (only the fields the function reads)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from flows.backends.gke.watch.verdict import Observation, Phase, Verdict, diagnose
from flows.core.budgets import Budgets
from flows.core.failures import FailureCategory


def judge(jobset: dict[str, Any], workload: dict[str, Any] | None, pods: list[dict[str, Any]],
          tail: list[str], *, now: datetime, queue_budget_s: float, **seen: Any) -> Verdict:
    """The verdict on what a watch saw, under the default budgets but the queue budget."""
    return diagnose(Observation(jobset, workload, pods, tail, **seen),
                    Budgets(queue_s=queue_budget_s), now)

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
LONG_AGO = "2026-01-01T10:00:00Z"  # two hours before NOW
JUST_NOW = "2026-01-01T11:59:00Z"
TRACEBACK = ["step 3", "Traceback (most recent call last):", '  File "x.py", line 1',
             "ValueError: ici_fsdp_parallelism does not divide the devices"]


def cond(kind: str, status: str = "True", reason: str = "", message: str = "",
         at: str = JUST_NOW) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": at}


def jobset(*conditions: dict[str, Any], suspend: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": "train-rl-x", "creationTimestamp": LONG_AGO},
            "spec": {"suspend": suspend}, "status": {"conditions": list(conditions)}}


def workload(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"conditions": list(conditions)}}


ADMITTED = workload(cond("QuotaReserved"), cond("Admitted"))


def pod(name: str = "train-rl-x-pathways-head-0-0", conditions: list | None = None,
        containers: list | None = None, init: list | None = None, **status: Any) -> dict:
    return {"metadata": {"name": name}, "spec": {"nodeName": "gke-node-1"},
            "status": {"conditions": conditions or [], "containerStatuses": containers or [],
                       "initContainerStatuses": init or [], **status}}


def terminated(name: str, code: int, reason: str = "Error") -> dict[str, Any]:
    return {"name": name, "state": {"terminated": {"exitCode": code, "reason": reason}}}


def waiting(name: str, reason: str, message: str = "pulling") -> dict[str, Any]:
    return {"name": name, "state": {"waiting": {"reason": reason, "message": message}}}


def pending(message: str, reason: str = "Pending") -> dict[str, Any]:
    return {"spec": {"queueName": "tpu-lq"},
            "status": {"conditions": [cond("QuotaReserved", "False", reason, message)]}}


# containerd's texts as kubelet puts them in ErrImagePull's message
NOT_FOUND = ('rpc error: code = NotFound desc = failed to pull and unpack image "r/img:1": '
             'failed to resolve reference "r/img:1": r/img:1: not found')
UNAUTHORIZED = ('failed to pull and unpack image "r/img:1": failed to resolve reference '
                '"r/img:1": failed to authorize: failed to fetch oauth token: unexpected status '
                'from GET request to https://r/v2/token: 401 Unauthorized')
FORBIDDEN = ('failed to pull and unpack image "r/img:1": failed to copy: httpReadSeeker: '
             'failed open: unexpected status code https://r/v2/img/manifests/1: 403 Forbidden')
INFRASTRUCTURE_PULL = ('failed to pull and unpack image "r/img:1": failed to copy: read tcp: '
                  'connection reset by peer')


CASES: list[tuple[str, dict, dict | None, list, list[str], Phase, FailureCategory | None]] = [
    ("completed", jobset(cond("Completed")), ADMITTED, [], [], Phase.SUCCEEDED, None),
    ("running", jobset(), ADMITTED, [pod()], [], Phase.RUNNING, None),
    ("queued within budget", jobset(suspend=True),
     workload(cond("QuotaReserved", "False", "Pending", "insufficient google.com/tpu",
                   at=JUST_NOW)), [], [], Phase.QUEUED, None),
    ("queued beyond budget", jobset(suspend=True),
     workload(cond("QuotaReserved", "False", "Pending", "insufficient google.com/tpu",
                   at=LONG_AGO)), [], [], Phase.FAILED, FailureCategory.QUEUE_TIMEOUT),
    ("kueue evicted: re-queued, same JobSet", jobset(suspend=True),
     workload(cond("Evicted", reason="Preempted", message="Preempted to accommodate a higher "
                   "priority Workload")), [], [], Phase.QUEUED, None),
    ("kueue preempted condition: re-queued", jobset(),
     workload(cond("Preempted", reason="InClusterQueue")), [], [], Phase.QUEUED, None),
    ("pod disruption, the JobSet restarts it", jobset(), ADMITTED,
     [pod(conditions=[cond("DisruptionTarget", reason="PreemptionByScheduler")],
          containers=[terminated("workload-container", 143)])], [], Phase.RUNNING, None),
    ("pod disruption, the JobSet failed", jobset(cond("Failed", reason="FailedJobs")), ADMITTED,
     [pod(conditions=[cond("DisruptionTarget", reason="PreemptionByScheduler")],
          containers=[terminated("workload-container", 143)])], [], Phase.FAILED,
     FailureCategory.PREEMPTED),
    ("node maintenance, the JobSet failed", jobset(cond("Failed", reason="FailedJobs")),
     ADMITTED, [pod(reason="Terminated", message="Pod was terminated in response to imminent "
                    "node shutdown (NodeShutdown)")], [], Phase.FAILED, FailureCategory.PREEMPTED),
    ("image pull back-off within the grace period", jobset(), ADMITTED,
     [pod(containers=[waiting("workload-container", "ImagePullBackOff")])], [], Phase.RUNNING,
     None),
    ("infrastructure pull error beyond the grace period", jobset(), ADMITTED,
     [pod(containers=[waiting("workload-container", "ErrImagePull", INFRASTRUCTURE_PULL)],
          startTime=LONG_AGO)], [], Phase.FAILED, FailureCategory.INFRASTRUCTURE),
    ("image not found on a sidecar", jobset(), ADMITTED,
     [pod(init=[waiting("pathways-proxy", "ErrImagePull", NOT_FOUND)])], [], Phase.FAILED,
     FailureCategory.USER_ERROR),
    ("image manifest unknown", jobset(), ADMITTED,
     [pod(containers=[waiting("workload-container", "ErrImagePull",
                              "manifest unknown: Requested entity was not found.")])], [],
     Phase.FAILED, FailureCategory.USER_ERROR),
    ("image pull unauthorized", jobset(), ADMITTED,
     [pod(containers=[waiting("workload-container", "ErrImagePull", UNAUTHORIZED)])], [],
     Phase.FAILED, FailureCategory.USER_ERROR),
    ("image pull forbidden", jobset(), ADMITTED,
     [pod(containers=[waiting("workload-container", "ErrImagePull", FORBIDDEN)])], [],
     Phase.FAILED, FailureCategory.USER_ERROR),
    ("kueue: resource not covered", jobset(suspend=True),
     pending("couldn't assign flavors to pod set main: resource cpu unavailable in "
             "ClusterQueue"), [], [], Phase.FAILED, FailureCategory.USER_ERROR),
    ("kueue: no such LocalQueue", jobset(suspend=True),
     pending("LocalQueue tpu-lq doesn't exist", "Inadmissible"), [], [], Phase.FAILED,
     FailureCategory.USER_ERROR),
    ("kueue: ClusterQueue inactive", jobset(suspend=True),
     pending("ClusterQueue tpu-cq is inactive"), [], [], Phase.FAILED,
     FailureCategory.USER_ERROR),
    ("kueue: namespace not selected", jobset(suspend=True),
     pending("Workload namespace doesn't match ClusterQueue selector"), [], [], Phase.FAILED,
     FailureCategory.USER_ERROR),
    ("kueue: insufficient quota waits", jobset(suspend=True),
     pending("couldn't assign flavors to pod set main: insufficient unused quota for "
             "google.com/tpu in flavor tpu, 8 more needed"), [], [], Phase.QUEUED, None),
    ("unschedulable too long", jobset(), ADMITTED,
     [pod(conditions=[cond("PodScheduled", "False", "Unschedulable",
                           "0/3 nodes are available: Insufficient ephemeral-storage",
                           at=LONG_AGO)])], [], Phase.FAILED, FailureCategory.INFRASTRUCTURE),
    ("unschedulable briefly (autoscaler)", jobset(), ADMITTED,
     [pod(conditions=[cond("PodScheduled", "False", "Unschedulable", "scaling up")])], [],
     Phase.RUNNING, None),
    ("exit with traceback", jobset(cond("Failed", reason="PodFailurePolicy")), ADMITTED,
     [pod(containers=[terminated("workload-container", 1)])], TRACEBACK, Phase.FAILED,
     FailureCategory.USER_ERROR),
    ("exit with an infrastructure error", jobset(), ADMITTED,
     [pod(containers=[terminated("workload-container", 1)])],
     ["Traceback (most recent call last):", "  x",
      "google.api_core.exceptions.ServiceUnavailable: 503 GCS"], Phase.FAILED,
     FailureCategory.INFRASTRUCTURE),
    ("oom killed", jobset(), ADMITTED,
     [pod(containers=[terminated("workload-container", 137, "OOMKilled")])], [], Phase.FAILED,
     FailureCategory.USER_ERROR),
    ("disk over its request", jobset(), ADMITTED,
     [pod(reason="Evicted", message="Pod ephemeral local storage usage exceeds the total limit "
          "of containers 200Gi.")], [], Phase.FAILED, FailureCategory.USER_ERROR),
    ("pathways server crashed", jobset(), ADMITTED,
     [pod(init=[terminated("pathways-rm", 1)])], [], Phase.FAILED,
     FailureCategory.INFRASTRUCTURE),
    ("failed, no pods left", jobset(cond("Failed", reason="ReachedMaxRestarts")), ADMITTED, [],
     [], Phase.FAILED, FailureCategory.INFRASTRUCTURE),
]


@pytest.mark.parametrize(("label", "js", "wl", "pods", "tail", "phase", "category"), CASES,
                         ids=[c[0] for c in CASES])
def test_diagnose(label, js, wl, pods, tail, phase, category):
    verdict = judge(js, wl, pods, tail, now=NOW, queue_budget_s=3600)
    assert verdict.phase == phase, verdict
    assert (verdict.diagnosis.category if verdict.diagnosis else None) == category, verdict
    if verdict.diagnosis:
        assert verdict.diagnosis.summary and verdict.diagnosis.fix


def test_user_error_names_the_exception():
    verdict = judge(jobset(), ADMITTED, [pod(containers=[terminated("workload-container", 1)])],
                       TRACEBACK, now=NOW, queue_budget_s=3600)
    assert verdict.diagnosis is not None
    assert "ici_fsdp_parallelism" in verdict.diagnosis.summary


def test_queue_timeout_carries_kueues_reason():
    verdict = judge(jobset(suspend=True), workload(cond("QuotaReserved", "False", "Pending",
                       "couldn't assign flavors: insufficient quota for google.com/tpu",
                       at=LONG_AGO)), [], [], now=NOW, queue_budget_s=600)
    assert verdict.diagnosis is not None and "insufficient quota" in verdict.diagnosis.summary


def test_remembered_pull_cause_decides_the_back_off():
    """kubelet's ImagePullBackOff message drops the cause; the monitor passes the last
    ErrImagePull text it saw, so a missing image still fails at once."""
    name = "train-rl-x-pathways-head-0-0"
    verdict = judge(jobset(), ADMITTED, [pod(containers=[waiting(
        "workload-container", "ImagePullBackOff", 'Back-off pulling image "r/img:1"')])], [],
        now=NOW, queue_budget_s=3600, pull_errors={f"{name}/workload-container": NOT_FOUND})
    assert verdict.diagnosis is not None and verdict.diagnosis.code == "image/not-found"
    assert not verdict.diagnosis.retryable and "image stage" in verdict.diagnosis.fix


def test_unschedulable_names_queue_resource_and_fix():
    verdict = judge(jobset(suspend=True), pending(
        "couldn't assign flavors to pod set main: resource cpu unavailable in ClusterQueue"),
        [], [], now=NOW, queue_budget_s=3600)
    d = verdict.diagnosis
    assert d is not None and d.code == "kueue/unschedulable"
    assert "tpu-lq" in d.summary and "cpu" in d.summary and "coveredResources" in d.fix


def test_status_line_matches_the_phase():
    """Once admitted, the line says so, never "is queued: Quota reserved in ..."; with the
    quota only reserved it does not quote Kueue's reservation message either."""
    admitted = workload(cond("QuotaReserved", message="Quota reserved in ClusterQueue tpu-cq"),
                        cond("Admitted", message="The workload is admitted"))
    verdict = judge(jobset(suspend=True), admitted, [], [], now=NOW, queue_budget_s=3600)
    assert "queued" not in verdict.reason and "Quota reserved" not in verdict.reason
    assert "admitted" in verdict.reason
    reserved = workload(cond("QuotaReserved", message="Quota reserved in ClusterQueue tpu-cq"))
    verdict = judge(jobset(suspend=True), reserved, [], [], now=NOW, queue_budget_s=3600)
    assert "Quota reserved in" not in verdict.reason


def test_a_failure_after_disruptions_the_watch_saw_is_a_preemption():
    """PodGC deleted the disrupted workers before the head gave up; only the head's exit
    is left in the JobSet's pods, which alone would read as the user's fault: the
    disruptions the watch saw make it a preemption."""
    failed = jobset(cond("Failed", reason="FailedJobs"))
    head = pod(containers=[terminated("workload-container", 1)])
    seen = {"train-rl-x-worker-0-3": "DeletionByPodGC: PodGC: node no longer exists "
                                     "(node gke-tpu-1)"}
    verdict = judge(failed, ADMITTED, [head], TRACEBACK, now=NOW, queue_budget_s=3600,
                       disruptions=seen)
    assert verdict.diagnosis is not None
    assert verdict.diagnosis.category is FailureCategory.PREEMPTED
    assert "DeletionByPodGC" in verdict.diagnosis.summary
    alone = judge(failed, ADMITTED, [head], TRACEBACK, now=NOW, queue_budget_s=3600)
    assert alone.diagnosis is not None
    assert alone.diagnosis.category is FailureCategory.USER_ERROR
    running = judge(jobset(), ADMITTED, [pod()], [], now=NOW, queue_budget_s=3600,
                       disruptions=seen)
    assert running.phase is Phase.RUNNING  # the JobSet restarts by itself: not terminal


# the kubelet's eviction messages, formatted as pkg/kubelet/eviction/helpers.go writes them
@pytest.mark.parametrize(("message", "outgrew", "field"), [
    ('Usage of EmptyDir volume "scratch" exceeds the limit "64Gi". ',
     'its volume "scratch" outgrew its limit of 64Gi', "gke.conversion_scratch_memory"),
    ('Container workload-container exceeded its local ephemeral storage limit "16Gi". ',
     "container workload-container outgrew its ephemeral-storage limit of 16Gi",
     "gke.conversion_ephemeral_storage"),
    ("Pod ephemeral local storage usage exceeds the total limit of containers 16Gi. ",
     "it outgrew its ephemeral-storage limit of 16Gi", "gke.conversion_ephemeral_storage"),
    ("The node was low on resource: ephemeral-storage. Threshold quantity: 4Gi, available: "
     "1Gi. Container workload-container was using 40Gi, which exceeds its request of 16Gi. ",
     "the node ran out of disk while container workload-container used 40Gi, over its "
     "request of 16Gi", "gke.conversion_ephemeral_storage"),
])
def test_a_pod_evicted_for_its_disk_is_the_storage_error_naming_the_field(message, outgrew,
                                                                          field):
    """On GKE, a pod out of ephemeral storage (its limit, its scratch volume, or
    the node's disk it overused) is a storage error with the profile field that sizes it,
    not retried as a disruption."""
    verdict = judge(jobset(), ADMITTED, [pod(phase="Failed", reason="Evicted",
                                                message=message)], [], now=NOW,
                       queue_budget_s=3600)
    d = verdict.diagnosis
    assert verdict.phase == Phase.FAILED and d is not None, verdict
    assert d.category is FailureCategory.USER_ERROR and d.code == "storage/ephemeral-storage"
    assert d.summary.endswith(f"was evicted for disk: {outgrew}") and field in d.fix


def test_a_node_filled_by_someone_else_is_a_disruption_not_a_sizing_error():
    message = ("The node was low on resource: ephemeral-storage. Threshold quantity: 4Gi, "
               "available: 1Gi. ")
    verdict = judge(jobset(cond("Failed", reason="PodFailurePolicy")), ADMITTED,
                       [pod(phase="Failed", reason="Evicted", message=message,
                            conditions=[cond("DisruptionTarget", reason="TerminationByKubelet",
                                             message=message)])], [], now=NOW,
                       queue_budget_s=3600)
    assert verdict.diagnosis is not None
    assert verdict.diagnosis.code != "storage/ephemeral-storage"
    assert verdict.diagnosis.category is FailureCategory.PREEMPTED


# kubernetes pkg/kubelet/eviction/helpers.go containerMessageFmt since 1.26 (kubernetes#111597)
NODE_LOW_DISK = ("The node was low on resource: ephemeral-storage. Threshold quantity: 4Gi, "
                 "available: 1Gi. Container workload-container was using 40Gi, request is 16Gi, "
                 "has larger consumption of ephemeral-storage. ")


def test_the_current_kubelets_disk_eviction_text_is_the_storage_error():
    """The kubelet has written "request is %s, has larger consumption of %v" since 1.26;
    only the older "which exceeds its request of" was read, so on any current cluster a
    pod that filled the node's disk carried DisruptionTarget and was resubmitted as
    preempted, to fill it again."""
    evicted = pod(phase="Failed", reason="Evicted", message=NODE_LOW_DISK,
                  conditions=[cond("DisruptionTarget", reason="TerminationByKubelet",
                                   message=NODE_LOW_DISK)])
    verdict = judge(jobset(cond("Failed", reason="ReachedMaxRestarts")), ADMITTED, [evicted],
                       [], now=NOW, queue_budget_s=3600)
    d = verdict.diagnosis
    assert d is not None and d.category is FailureCategory.USER_ERROR, verdict
    assert d.code == "storage/ephemeral-storage" and "gke.conversion_ephemeral_storage" in d.fix
    assert "container workload-container used 40Gi, over its request of 16Gi" in d.summary
