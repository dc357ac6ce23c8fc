"""The verdict's boundaries and the words a user reads (flows/backends/gke/watch/verdict.py),
as pure calls to ``diagnose``: which budget an unschedulable pod waits under, which pods are
evidence (a stopped pod is not), what outranks what, and the summary, detail and fix of each
failure. The objects are shaped as the API returns them (only the fields the code reads);
the table of categories is test_verdict.py."""

from __future__ import annotations

from typing import Any

import pytest

from flows.backends.gke.fallback import NO_CAPACITY, NO_FLEX_CAPACITY
from flows.backends.gke.watch.verdict import Phase, Verdict, disruption_of
from flows.core.budgets import Budgets
from flows.core.failures import FailureCategory
from tests.support.verdict_objects import (
    FAILED,
    HEAD,
    NAME,
    NO_GROUP,
    PROGRAM,
    WORKER,
    ago,
    cond,
    ended,
    event,
    failure,
    jobset,
    judge,
    pending_workload,
    pod,
    unschedulable,
    waiting,
)


# --- finished, and what a JobSet's conditions count -----------------------------------------
def test_a_completed_jobset_succeeded_whatever_its_pods_say() -> None:
    verdict = judge(jobset(cond("Completed")), [pod(containers=[ended(PROGRAM, 1)])])
    assert verdict == Verdict(Phase.SUCCEEDED, None, f"{NAME} completed")


def test_only_a_true_condition_counts() -> None:
    verdict = judge(jobset(cond("Completed", "False"), cond("Failed", "False")))
    assert verdict == Verdict(Phase.RUNNING, None, f"{NAME} is running")


def test_a_jobset_without_a_name_is_called_jobset() -> None:
    verdict = judge({"status": {"conditions": [cond("Completed")]}})
    assert verdict.reason == "jobset completed"


def test_a_failed_jobset_no_pod_explains_is_retried_with_the_log_tail() -> None:
    tail = [f"line {i}" for i in range(35)]
    category, summary, detail, fix, _ = failure(judge(jobset(FAILED), [], tail=tail))
    assert category is FailureCategory.INFRASTRUCTURE
    assert summary == f"{NAME} failed: FailedJobs: jobset failed"
    assert detail.splitlines() == [f"    line {i}" for i in range(5, 35)]  # the last 30
    assert fix == "no pod explains it (they may be gone); it is retried with backoff"


# --- disruptions ----------------------------------------------------------------------------
def test_a_disruption_the_watch_saw_names_the_first_pod_and_why() -> None:
    seen = {"w-2": "DeletionByPodGC: node gone (node n-2)",
            "w-1": "TerminationByKubelet: shutdown (node n-1)"}
    category, summary, detail, fix, _ = failure(judge(jobset(FAILED), [], disruptions=seen))
    assert category is FailureCategory.PREEMPTED
    assert summary == f"{NAME}: pod w-1 was disrupted (TerminationByKubelet: shutdown (node n-1))"
    assert detail == "    TerminationByKubelet: shutdown (node n-1)"
    assert fix == ("host preempted or under maintenance; resubmitted with the same run name, "
                   "resuming from the newest actor checkpoint")


def test_a_disrupted_pod_in_hand_outranks_the_ones_remembered() -> None:
    disrupted = pod(WORKER, conditions=[cond("DisruptionTarget", reason="PreemptionByScheduler",
                                             message="preempted")])
    _, summary, *_ = failure(judge(jobset(FAILED), [disrupted], disruptions={"a": "older"}))
    assert summary == (f"{NAME}: pod {WORKER} was disrupted (PreemptionByScheduler: "
                       "preempted (node gke-node-1))")


def test_while_the_jobset_restarts_a_disrupted_pods_exit_is_no_evidence_but_others_are() -> None:
    disrupted = pod(WORKER, conditions=[cond("DisruptionTarget", reason="EvictionByEvictionAPI")],
                    containers=[ended(PROGRAM, 1)])
    assert judge(jobset(), [disrupted], tail=["Traceback", "ValueError: x"]).phase is \
        Phase.RUNNING
    other = pod(HEAD, containers=[ended(PROGRAM, 137, "OOMKilled")])
    category, summary, *_ = failure(judge(jobset(), [disrupted, other]))
    assert category is FailureCategory.USER_ERROR and summary == f"{NAME}: {PROGRAM} was OOMKilled"


def test_why_a_pod_was_disrupted_reads_its_condition_or_its_status() -> None:
    by_condition = pod(conditions=[cond("DisruptionTarget", reason="DeletionByTaintManager",
                                        message="Taint manager: deleting due to NoExecute")])
    assert disruption_of(by_condition) == ("DeletionByTaintManager: Taint manager: deleting "
                                           "due to NoExecute (node gke-node-1)")
    by_status = pod(node=None, reason="Terminated",
                    message="Pod was terminated in response to imminent node shutdown.")
    assert disruption_of(by_status) == ("Terminated Pod was terminated in response to imminent "
                                        "node shutdown. (node ?)")
    for words in ("maintenance", "NodeShutdown", "node shutdown", "Node is shutting down"):
        assert disruption_of(pod(message=f"x {words} y")) is not None, words
    assert disruption_of(pod(message="Pod was deleted")) is None
    assert disruption_of(pod(conditions=[cond("DisruptionTarget", "False")])) is None
    assert disruption_of({"metadata": {"name": "p"}}) is None


def test_a_pod_evicted_for_its_own_memory_is_not_a_disruption() -> None:
    message = ("The node was low on resource: memory. Threshold quantity: 100Mi, available: "
               "50Mi. Container workload-container was using 60Gi, request is 40Gi, has "
               "larger consumption of memory. ")
    evicted = pod(conditions=[cond("DisruptionTarget", reason="TerminationByKubelet")],
                  reason="Evicted", message=message)
    assert disruption_of(evicted) is None
    category, summary, *_ = failure(judge(jobset(FAILED), [evicted]))
    assert category is FailureCategory.USER_ERROR and "ran out of memory" in summary


# --- stopped pods are not evidence ----------------------------------------------------------
def test_a_pod_being_deleted_while_the_jobset_runs_explains_nothing() -> None:
    stopping = pod(containers=[ended(PROGRAM, 1)], deleting=True)
    verdict = judge(jobset(), [stopping], tail=["Traceback", "ValueError: x"])
    assert verdict.phase is Phase.RUNNING


@pytest.mark.parametrize("code", [143, 137])
def test_after_a_failure_a_deleted_pods_signal_exit_is_the_stop_not_the_cause(code: int) -> None:
    stopping = pod(containers=[ended(PROGRAM, code)], deleting=True)
    category, summary, *_ = failure(judge(jobset(FAILED), [stopping]))
    assert category is FailureCategory.INFRASTRUCTURE
    assert summary == f"{NAME} failed: FailedJobs: jobset failed"  # no pod explains it


def test_after_a_failure_a_deleted_pods_own_exit_or_oom_is_kept() -> None:
    exit_1 = pod(containers=[ended(PROGRAM, 1)], deleting=True)
    category, summary, *_ = failure(judge(jobset(FAILED), [exit_1],
                                          tail=["Traceback (most recent call last):",
                                                "ValueError: bad shape"]))
    assert category is FailureCategory.USER_ERROR and "ValueError" in summary
    oom = pod(containers=[ended(PROGRAM, 137, "OOMKilled")], deleting=True)
    _, summary, *_ = failure(judge(jobset(FAILED), [oom]))
    assert summary == f"{NAME}: {PROGRAM} was OOMKilled"


# --- the program's exit ---------------------------------------------------------------------
def test_an_oom_kill_is_the_users_with_the_fix() -> None:
    category, summary, detail, fix, _ = failure(judge(
        jobset(), [pod(containers=[ended(PROGRAM, 137, "OOMKilled")])], tail=["a", "b"]))
    assert category is FailureCategory.USER_ERROR
    assert summary == f"{NAME}: {PROGRAM} was OOMKilled" and detail == "    a\n    b"
    assert fix == ("the same configuration will be killed again: raise the memory limit or "
                   "shrink the step (batch, lengths)")


def test_a_sigkill_that_is_not_the_oom_killer_is_infrastructure() -> None:
    category, summary, _, fix, _ = failure(judge(jobset(), [pod(containers=[ended(PROGRAM, 137)])]))
    assert category is FailureCategory.INFRASTRUCTURE
    assert summary == (f"{NAME}: {PROGRAM} of pod {HEAD} was killed (SIGKILL, exit 137) from "
                       "outside, not by the out-of-memory killer (the container runtime "
                       "reports OOMKilled for that)")
    assert fix.startswith("a stop whose grace period (30 s, the pods' "
                          "terminationGracePeriodSeconds) ran out, or the node killed it")


def test_a_signal_exit_is_read_as_the_signal() -> None:
    category, summary, *_ = failure(judge(jobset(), [pod(containers=[ended(PROGRAM, 143)])]))
    assert category is FailureCategory.INFRASTRUCTURE and summary == f"{NAME} was stopped by SIGTERM"


def test_an_exit_code_is_passed_on_as_it_is() -> None:
    _, summary, *_ = failure(judge(jobset(), [pod(containers=[ended(PROGRAM, 2)])],
                                   tail=["Traceback (most recent call last):", "KeyError: 'k'"]))
    assert "KeyError" in summary


def test_the_last_state_of_a_restarted_program_counts() -> None:
    restarted = pod(containers=[ended(PROGRAM, 137, "OOMKilled", key="lastState")])
    _, summary, *_ = failure(judge(jobset(), [restarted]))
    assert summary == f"{NAME}: {PROGRAM} was OOMKilled"


def test_a_clean_exit_or_another_containers_exit_is_not_the_programs_failure() -> None:
    assert judge(jobset(), [pod(containers=[ended(PROGRAM, 0)])]).phase is Phase.RUNNING
    sidecar = pod(init=[ended("pathways-proxy", 0)], containers=[ended(PROGRAM, 0)])
    assert judge(jobset(), [sidecar]).phase is Phase.RUNNING


def test_a_worker_out_of_host_memory_outranks_the_heads_traceback() -> None:
    worker = pod(WORKER, containers=[ended("pathways-worker", 137, "OOMKilled")])
    head = pod(HEAD, containers=[ended(PROGRAM, 1)])
    category, summary, _, _, code = failure(judge(
        jobset(FAILED), [head, worker], tail=["Traceback (most recent call last):",
                                              "RuntimeError: lost worker"]))
    assert category is FailureCategory.USER_ERROR and code == "gke/host-memory"
    assert summary.startswith(f"{NAME}: pathways-worker of pod {WORKER} was OOMKilled")


# --- containers that cannot start ---------------------------------------------------------
def test_a_bad_image_name_is_the_users_and_a_config_error_is_infrastructure() -> None:
    bad = pod(containers=[waiting(PROGRAM, "InvalidImageName", "couldn't parse image")])
    category, summary, detail, fix, _ = failure(judge(jobset(), [bad]))
    assert category is FailureCategory.USER_ERROR
    assert summary == f"{NAME}: {PROGRAM} cannot start: InvalidImageName"
    assert detail == "    couldn't parse image"
    assert fix == ("check the image exists and the node service account may pull it "
                   "(artifactregistry.reader), and that the Secret exists")
    for reason in ("CreateContainerConfigError", "CreateContainerError"):
        category, summary, *_ = failure(judge(jobset(), [pod(init=[waiting("pathways-rm",
                                                                           reason)])]))
        assert category is FailureCategory.INFRASTRUCTURE
        assert summary == f"{NAME}: pathways-rm cannot start: {reason}"


def test_a_crashed_pathways_server_is_infrastructure_with_its_exit() -> None:
    crashed = pod(init=[ended("pathways-rm", 2, "Error", "panic: lost")])
    category, summary, detail, fix, _ = failure(judge(jobset(), [crashed]))
    assert category is FailureCategory.INFRASTRUCTURE
    assert summary == f"{NAME}: pathways-rm exited with 2 (Error)"
    assert detail == "    panic: lost" and fix == "a Pathways server crashed; retried with backoff"


def test_a_pull_error_waits_its_grace_from_the_pods_start() -> None:
    flaky = "failed to pull: connection reset by peer"

    def pulling(started_s: float, stamp: str = "startTime") -> dict[str, Any]:
        p = pod(containers=[waiting(PROGRAM, "ErrImagePull", flaky)])
        if stamp == "startTime":
            p["status"]["startTime"] = ago(started_s)
        else:
            p["metadata"]["creationTimestamp"] = ago(started_s)
        return p
    grace = Budgets(pull_grace_s=600.0)
    assert judge(jobset(), [pulling(600)], budgets=grace).phase is Phase.RUNNING
    category, summary, *_ = failure(judge(jobset(), [pulling(601)], budgets=grace))
    assert category is FailureCategory.INFRASTRUCTURE
    assert summary == f"{NAME}: {PROGRAM} cannot start: ErrImagePull for 601 s"
    assert judge(jobset(), [pulling(700, "created")], budgets=grace).phase is Phase.FAILED


def test_a_pull_back_off_uses_the_error_remembered_for_that_pod_and_container() -> None:
    backoff = pod(containers=[waiting(PROGRAM, "ImagePullBackOff", "Back-off pulling image")],
                  startTime=ago(60))  # within the grace: only a known cause fails it
    missing = "rpc error: code = NotFound desc = r/img:1: not found"
    other = judge(jobset(), [backoff], pull_errors={f"{HEAD}/pathways-rm": missing})
    assert other.phase is Phase.RUNNING  # another container's error is not this one's
    _, _, _, _, code = failure(judge(jobset(), [backoff],
                                     pull_errors={f"{HEAD}/{PROGRAM}": missing}))
    assert code == "image/not-found"


# --- unschedulable pods: which budget, and what the autoscaler said ------------------------
def test_an_unschedulable_pod_fails_after_the_scheduling_budget_not_at_it() -> None:
    budgets = Budgets(queue_s=36000.0, schedule_s=1800.0)
    assert judge(jobset(), [unschedulable(for_s=1800)], budgets=budgets).phase is Phase.RUNNING
    category, summary, detail, fix, code = failure(judge(jobset(), [unschedulable(for_s=1801)],
                                                         budgets=budgets))
    assert category is FailureCategory.INFRASTRUCTURE and code == ""
    assert summary == f"{NAME}: pod {WORKER} is unschedulable"
    assert detail == "    0/3 nodes are available: 3 Insufficient google.com/tpu"
    assert fix.startswith("the node pool lacks capacity")


def test_a_pod_not_scheduled_for_another_reason_is_not_unschedulable() -> None:
    gated = pod(WORKER, conditions=[cond("PodScheduled", "False", "SchedulingGated",
                                         at_s=7200)], node=None)
    assert judge(jobset(), [gated]).phase is Phase.RUNNING


def test_a_refused_scale_up_is_no_capacity_named_by_the_autoscaler() -> None:
    events = [event("FailedScaleUp", "Node scale up in zones us-east5-b associated with this "
                    "pod failed: GCE out of resources", at_s=600),
              event("TriggeredScaleUp", "pod triggered scale-up: [{tpu 0->8 (max: 8)}]")]
    category, summary, detail, fix, code = failure(judge(
        jobset(), [unschedulable()], autoscaler_events=events))
    assert category is FailureCategory.INFRASTRUCTURE and code == NO_CAPACITY
    assert summary == (f"{NAME}: no TPU capacity for pod {WORKER}: Node scale up in zones "
                       "us-east5-b associated with this pod failed: GCE out of resources")
    assert detail == "    0/3 nodes are available: 3 Insufficient google.com/tpu"
    assert fix.startswith("the zone has no free slice of this shape now")


def test_flex_start_waits_for_capacity_under_the_queue_budget() -> None:
    flex = Budgets(queue_s=7200.0, schedule_s=1800.0, waits_for_capacity=True)
    assert judge(jobset(), [unschedulable(for_s=7200)], budgets=flex).phase is Phase.RUNNING
    category, summary, _, fix, code = failure(judge(jobset(), [unschedulable(for_s=7201)],
                                                    budgets=flex))
    assert category is FailureCategory.QUEUE_TIMEOUT and code == NO_FLEX_CAPACITY
    assert summary == f"{NAME}: waited 120 min for flex-start capacity: no scale-up yet"
    assert fix.startswith("no slice was free in the zone within the queue budget")


def test_flex_start_names_the_refusal_or_else_the_autoscalers_last_word() -> None:
    flex = Budgets(queue_s=3600.0, waits_for_capacity=True)
    trying = [event("TriggeredScaleUp", "pod triggered scale-up: [{tpu 0->8 (max: 8)}]")]
    _, summary, *_ = failure(judge(jobset(), [unschedulable()], budgets=flex,
                                   autoscaler_events=trying))
    assert summary == (f"{NAME}: waited 60 min for flex-start capacity: TriggeredScaleUp: pod "
                       "triggered scale-up: [{tpu 0->8 (max: 8)}]")
    refused = [event("FailedScaleUp", "out of resources", at_s=300), *trying]
    _, summary, *_ = failure(judge(jobset(), [unschedulable()], budgets=flex,
                                   autoscaler_events=refused))
    assert summary.endswith("capacity: FailedScaleUp: out of resources")




def test_no_pool_that_can_hold_the_pod_is_the_users_even_for_flex_start() -> None:
    """After the scheduling budget, not flex-start's queue budget: waiting cannot help."""
    flex = Budgets(queue_s=36000.0, schedule_s=1800.0, waits_for_capacity=True)
    events = [event("NotTriggerScaleUp", NO_GROUP)]
    at_budget = judge(jobset(), [unschedulable(for_s=1800)], budgets=flex,
                      autoscaler_events=events)
    assert at_budget.phase is Phase.QUEUED and "is waiting for nodes" in at_budget.reason
    category, summary, detail, fix, _ = failure(judge(
        jobset(), [unschedulable(for_s=1801)], budgets=flex, autoscaler_events=events))
    assert category is FailureCategory.USER_ERROR
    assert summary == f"{NAME}: no node pool can hold pod {WORKER}: {NO_GROUP}"
    assert detail == "    0/3 nodes are available: 3 Insufficient google.com/tpu"
    assert "gke.machine_type, gke.topology and gke.cpu_pool must match" in fix


def test_the_autoscalers_word_about_another_pod_decides_nothing_for_this_one() -> None:
    events = [event("NotTriggerScaleUp", NO_GROUP, pod_name="someone-else")]
    category, summary, *_ = failure(judge(jobset(), [unschedulable()], autoscaler_events=events))
    assert category is FailureCategory.INFRASTRUCTURE
    assert summary == f"{NAME}: pod {WORKER} is unschedulable"


def test_pods_waiting_for_a_scale_up_are_queued_with_the_autoscalers_line() -> None:
    events = [event("TriggeredScaleUp", "pod triggered scale-up: [{tpu 0->8 (max: 8)}]")]
    verdict = judge(jobset(), [unschedulable(for_s=60)], autoscaler_events=events)
    assert verdict == Verdict(Phase.QUEUED, None, f"{NAME} is waiting for nodes: "
                              "TriggeredScaleUp: pod triggered scale-up: [{tpu 0->8 (max: 8)}]")
    scheduled = judge(jobset(), [pod(WORKER)], autoscaler_events=events)
    assert scheduled.phase is Phase.RUNNING  # every pod has a node: running
    suspended = judge(jobset(suspend=True), [unschedulable(for_s=60)], autoscaler_events=events)
    assert "waiting for nodes" not in suspended.reason  # not started: Kueue's line


# --- queued, starting, stopping, running ----------------------------------------------------

def test_queued_fails_after_the_queue_budget_not_at_it() -> None:
    assert judge(jobset(suspend=True), workload=pending_workload(3600)).phase is Phase.QUEUED
    category, summary, detail, fix, _ = failure(judge(jobset(suspend=True),
                                                      workload=pending_workload(3661)))
    assert category is FailureCategory.QUEUE_TIMEOUT
    assert summary == f"{NAME} waited 61 min in the queue: insufficient unused quota"
    assert detail == "    queue budget 60 min"
    assert fix.startswith("free quota in the ClusterQueue")


def test_queued_within_the_budget_says_what_it_waits_for() -> None:
    verdict = judge(jobset(suspend=True), workload=pending_workload(60))
    assert verdict == Verdict(Phase.QUEUED, None, f"{NAME} is queued: insufficient unused quota")


def test_without_a_workload_the_wait_counts_from_the_jobsets_creation() -> None:
    young, old = jobset(suspend=True, created_s=3600), jobset(suspend=True, created_s=3601)
    assert judge(young, workload=None) == Verdict(
        Phase.QUEUED, None, f"{NAME} is queued: waiting for Kueue to create its Workload")
    category, *_ = failure(judge(old, workload=None))
    assert category is FailureCategory.QUEUE_TIMEOUT


def test_a_suspended_condition_or_an_unadmitted_workload_is_not_running() -> None:
    by_condition = judge(jobset(cond("Suspended"), created_s=60), workload=None)
    assert by_condition.phase is Phase.QUEUED
    unadmitted = judge(jobset(), workload=pending_workload(60))
    assert unadmitted.phase is Phase.QUEUED
    assert judge(jobset(), workload=None).phase is Phase.RUNNING  # no Kueue: runs as it is


def test_admitted_and_not_yet_started_is_starting() -> None:
    verdict = judge(jobset(suspend=True))
    assert verdict == Verdict(Phase.QUEUED, None, f"{NAME} is starting: admitted by Kueue, "
                              "waiting for the JobSet to start")


def test_suspended_after_running_or_with_pods_terminating_is_stopping() -> None:
    stopping = Verdict(Phase.QUEUED, None, f"{NAME} is stopping: the JobSet was suspended and "
                       "its pods are terminating (a Kueue eviction)")
    assert judge(jobset(suspend=True), ran_since_admitted=True) == stopping
    assert judge(jobset(suspend=True), [pod(deleting=True)]) == stopping
    assert judge(jobset(suspend=True), [pod()]).reason.startswith(f"{NAME} is starting")


def test_a_blocked_workload_fails_with_kueues_diagnosis_as_the_line() -> None:
    blocked = pending_workload(60, "LocalQueue tpu-lq doesn't exist")
    category, _, _, _, code = failure(judge(jobset(suspend=True), workload=blocked))
    assert category is FailureCategory.USER_ERROR and code == "kueue/unschedulable"
