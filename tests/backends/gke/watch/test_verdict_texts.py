"""The verdict's texts when the API leaves a field out (it omits empty messages and reasons),
and the lookups behind them (flows/backends/gke/watch/verdict.py), as pure calls to
``diagnose``: a missing message reads as nothing, never "None"; the pod, container or event
a text names is the right one among several."""

from __future__ import annotations

from typing import Any

import pytest

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


# --- the API omits empty fields: an absent message or reason reads as nothing -----------------
def test_a_failed_condition_without_a_message_says_none() -> None:
    no_message = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
    _, summary, *_ = failure(judge(jobset(no_message)))
    assert summary == f"{NAME} failed: BackoffLimitExceeded: "


def test_kueues_verdicts_name_the_jobset() -> None:
    blocked = pending_workload(60, "LocalQueue tpu-lq doesn't exist")
    _, summary, *_ = failure(judge(jobset(suspend=True), workload=blocked))
    assert f": {NAME} cannot be admitted through LocalQueue tpu-lq" in summary
    inactive = {"spec": {"active": False}, "status": {"conditions": []}}
    _, summary, *_ = failure(judge(jobset(suspend=True), workload=inactive))
    assert summary.startswith(f"Kueue deactivated the Workload of {NAME} ")


def test_a_disruption_without_message_or_reason_reads_cleanly() -> None:
    bare = pod(conditions=[{"type": "DisruptionTarget", "status": "True",
                            "reason": "PreemptionByScheduler"}])
    assert disruption_of(bare) == "PreemptionByScheduler:  (node gke-node-1)"
    reason_only = pod(reason="NodeShutdown")
    assert disruption_of(reason_only) == "NodeShutdown (node gke-node-1)"  # the reason decides
    message_only = pod(message="Node is shutting down")
    assert disruption_of(message_only) == "Node is shutting down (node gke-node-1)"
    no_spec = {"metadata": {"name": "p"}, "status": {"reason": "NodeShutdown"}}
    assert disruption_of(no_spec) == "NodeShutdown (node ?)"


def test_a_failed_jobset_after_a_node_shutdown_reason_alone_was_preempted() -> None:
    category, summary, *_ = failure(judge(jobset(FAILED), [pod(WORKER, reason="NodeShutdown")]))
    assert category is FailureCategory.PREEMPTED and "NodeShutdown" in summary


def test_the_storage_eviction_line_and_detail_are_the_kubelets_message() -> None:
    message = "Pod ephemeral local storage usage exceeds the total limit of containers 16Gi. "
    category, summary, detail, _, code = failure(judge(jobset(), [pod(reason="Evicted",
                                                                      message=message)]))
    assert category is FailureCategory.USER_ERROR
    assert code == "storage/ephemeral-storage" and detail == f"    {message}"
    assert summary.startswith(f"{NAME}: pod {HEAD} was evicted for disk: ")


def test_a_sigkill_from_outside_keeps_the_log_tail() -> None:
    _, _, detail, *_ = failure(judge(jobset(), [pod(containers=[ended(PROGRAM, 137)])],
                                     tail=["last"]))
    assert detail == "    last"


@pytest.mark.parametrize(("code", "says"), [
    (2, f"{NAME} exited with code 2"), (128, f"{NAME} exited with code 128"),
    (129, f"{NAME} was stopped by SIGHUP")])
def test_exit_codes_above_128_are_signals(code: int, says: str) -> None:
    _, summary, *_ = failure(judge(jobset(), [pod(containers=[ended(PROGRAM, code)])]))
    assert summary == says


def test_the_programs_state_is_found_behind_its_sidecars() -> None:
    with_sidecars = pod(init=[{"name": "pathways-proxy", "state": {"running": {}}}],
                        containers=[{"name": "pathways-rm", "state": {"running": {}}},
                                    ended(PROGRAM, 137, "OOMKilled")])
    _, summary, *_ = failure(judge(jobset(), [with_sidecars]))
    assert summary == f"{NAME}: {PROGRAM} was OOMKilled"


def test_an_image_never_pulled_shows_kubelets_message_or_nothing() -> None:
    never = pod(containers=[{"name": PROGRAM, "state": {"waiting": {
        "reason": "ErrImageNeverPull"}}}])
    _, _, detail, _, code = failure(judge(jobset(), [never]))
    assert code == "image/never-pull" and detail == "    "


def test_a_container_pulling_within_its_grace_does_not_hide_the_next_ones_error() -> None:
    mixed = pod(containers=[waiting("pathways-rm", "ErrImagePull", "connection reset"),
                            {"name": PROGRAM, "state": {"waiting": {
                                "reason": "CreateContainerConfigError"}}}], startTime=ago(60))
    category, summary, detail, *_ = failure(judge(jobset(), [mixed]))
    assert category is FailureCategory.INFRASTRUCTURE and detail == "    "
    assert summary == f"{NAME}: {PROGRAM} cannot start: CreateContainerConfigError"


def test_a_crashed_server_without_reason_or_message() -> None:
    crashed = pod(init=[{"name": "pathways-rm", "state": {"terminated": {"exitCode": 139}}}])
    _, summary, detail, *_ = failure(judge(jobset(), [crashed]))
    assert summary == f"{NAME}: pathways-rm exited with 139 ()" and detail == "    "


def _bare_unschedulable(for_s: float = 7200.0) -> dict[str, Any]:
    return pod(WORKER, conditions=[{"type": "PodScheduled", "status": "False",
                                    "reason": "Unschedulable",
                                    "lastTransitionTime": ago(for_s)}], node=None)


def test_unschedulable_texts_without_the_schedulers_message() -> None:
    _, summary, detail, fix, _ = failure(judge(jobset(), [_bare_unschedulable()]))
    assert (summary, detail) == (f"{NAME}: pod {WORKER} is unschedulable", "    ")
    assert fix == ("the node pool lacks capacity (TPU reservation, cpu-np size or disk); check "
                   "the pools, then it is retried")
    refused = [{"reason": "FailedScaleUp", "involvedObject": {"name": WORKER},
                "lastTimestamp": ago(60)}]
    _, summary, detail, fix, _ = failure(judge(jobset(), [_bare_unschedulable()],
                                               autoscaler_events=refused))
    assert (summary, detail) == (f"{NAME}: no TPU capacity for pod {WORKER}: ", "    ")
    assert fix == ("the zone has no free slice of this shape now (the autoscaler could not "
                   "create the nodes): retried with backoff; capacity flex-start waits for "
                   "capacity instead, a reservation holds it")
    flex = Budgets(queue_s=3600.0, waits_for_capacity=True)
    _, _, detail, fix, _ = failure(judge(jobset(), [_bare_unschedulable()], budgets=flex))
    assert detail == "    "
    assert fix == ("no slice was free in the zone within the queue budget: retry later, raise "
                   "gke.queue_budget_s, or use another zone or a reservation; nothing was spent")
    _, _, detail, *_ = failure(judge(jobset(), [unschedulable()], budgets=flex))
    assert detail == "    0/3 nodes are available: 3 Insufficient google.com/tpu"


def test_no_pool_fits_texts_and_the_pod_it_names_among_others() -> None:
    bare_event = [{"reason": "NotTriggerScaleUp", "message": NO_GROUP,
                   "involvedObject": {"name": WORKER}, "lastTimestamp": ago(60)}]
    scheduled_head = pod(HEAD)
    _, summary, detail, fix, _ = failure(judge(jobset(), [scheduled_head, _bare_unschedulable()],
                                               autoscaler_events=bare_event))
    assert summary == f"{NAME}: no node pool can hold pod {WORKER}: {NO_GROUP}"
    assert detail == "    "
    assert fix == ("the pods ask for nodes no node pool of the cluster provides: "
                   "gke.machine_type, gke.topology and gke.cpu_pool must match the cluster's "
                   "pools (redeploy the cluster with them, or change the profile); the "
                   "autoscaler created no node for it")
    no_message = [{"reason": "NotTriggerScaleUp", "involvedObject": {"name": WORKER}}]
    verdict = judge(jobset(), [_bare_unschedulable()], autoscaler_events=no_message)
    assert failure(verdict)[1] == f"{NAME}: pod {WORKER} is unschedulable"  # decides nothing


def test_a_pod_scheduled_since_is_past_the_autoscalers_old_words() -> None:
    """Its PodScheduled is True now; the NotTriggerScaleUp from before it got a node stays in
    the event list."""
    placed = pod(WORKER, conditions=[cond("PodScheduled", at_s=7200),
                                     cond("Ready", "False", "ContainersNotReady")])
    events = [event("NotTriggerScaleUp", NO_GROUP, at_s=7000)]
    assert judge(jobset(), [placed], autoscaler_events=events) == \
        Verdict(Phase.RUNNING, None, f"{NAME} is running")


def test_a_pod_or_jobset_without_metadata_is_named_by_a_placeholder() -> None:
    nameless = _bare_unschedulable()
    del nameless["metadata"]
    _, summary, *_ = failure(judge(jobset(), [nameless]))
    assert summary == f"{NAME}: pod ? is unschedulable"
    pulling = {"spec": {}, "status": {"containerStatuses": [
        waiting(PROGRAM, "ErrImagePull", "connection reset")]}}
    assert judge(jobset(), [pulling]).phase is Phase.RUNNING  # no start time: just began
    unnamed = {"spec": {"suspend": True}, "status": {}}
    assert judge(unnamed, workload=None, budgets=Budgets(queue_s=0.0)).reason == \
        "jobset is queued: waiting for Kueue to create its Workload"  # no stamp: no wait yet


def test_the_queue_timeouts_fix() -> None:
    *_, fix, _ = failure(judge(jobset(suspend=True), workload=pending_workload(7200)))
    assert fix == ("free quota in the ClusterQueue (another job holds the slice?) or raise the "
                   "queue budget; nothing ran, nothing was spent on this job")
