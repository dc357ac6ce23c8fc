"""flows/backends/gke/recovery.py: every create/attach/resubmit/refuse decision, case by case.

The JobSet shapes are the ones the JobSet controller writes: conditions of type Completed /
Failed with status "True" (kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go,
JobSetCompleted / JobSetFailed), and metadata.deletionTimestamp while a foreground delete
waits for its children (the API server's graceful deletion).
"""

from __future__ import annotations

import pytest

from flows.backends.gke import next_action, recovery
from flows.backends.gke.jobs.common import SPEC_DIGEST
from flows.backends.gke.recovery import SUBMISSION, Action
from flows.core.failures import Diagnosis, FailureCategory

NS, NAME, BUDGET = "default", "tpurl-train-abc", 2  # budget 2: at most 3 submissions
DESIRED = {"metadata": {"name": NAME, "annotations": {SPEC_DIGEST: "d1"}}, "spec": {}}


def live(digest: str = "d1", submission: str | None = "1", failed: bool = False,
         completed: bool = False, deleting: bool = False) -> dict:
    annotations = {SPEC_DIGEST: digest, **({SUBMISSION: submission} if submission else {})}
    meta: dict = {"name": NAME, "annotations": annotations}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    conditions = [{"type": t, "status": "True"} for t, on in
                  (("Failed", failed), ("Completed", completed)) if on]
    return {"metadata": meta, "status": {"conditions": conditions}}


def test_creates_the_next_submission_until_the_bound():
    assert recovery.before_create(NAME, 0, BUDGET, NS) == recovery.Decision(Action.CREATE, 1)
    assert recovery.before_create(NAME, 2, BUDGET, NS).number == 3
    refused = recovery.before_create(NAME, 3, BUDGET, NS)
    assert refused.action is Action.REFUSE and refused.diagnosis is not None
    assert refused.diagnosis.code == "gke/submission-budget"
    assert refused.diagnosis.category is FailureCategory.STALLED  # not retryable
    assert f"kubectl delete jobset {NAME} -n {NS}" in refused.diagnosis.fix


def test_the_submission_goes_on_the_object_and_reads_back():
    body = recovery.numbered(DESIRED, 2)
    assert body["metadata"]["annotations"] == {SPEC_DIGEST: "d1", SUBMISSION: "2"}
    assert DESIRED["metadata"]["annotations"] == {SPEC_DIGEST: "d1"}  # not mutated
    assert recovery.submission_of(body) == 2
    assert recovery.submission_of(live(submission=None)) == 1  # made before the annotation
    assert recovery.submission_of(live(submission="x")) == 1
    assert recovery.submission_of(live(submission="0")) == 1


@pytest.mark.parametrize(("found", "previous", "action", "number"), [
    (None, 1, Action.CREATE, 1),  # gone between the 409 and the read
    (live(deleting=True), 1, Action.WAIT_GONE, 1),
    (live(submission="2"), 0, Action.ATTACH, 2),  # a rerun after the flow died
    (live(submission="1", completed=True), 0, Action.ATTACH, 1),  # watched: already done
    (live(submission="1", failed=True), 0, Action.RESUBMIT, 1),  # a retry after a failure
    (live(submission="2", failed=True), 1, Action.RESUBMIT, 2),
], ids=["gone", "deleting", "running", "completed", "failed", "failed-later"])
def test_a_409_is_decided_from_the_jobset_found(found, previous, action, number):
    decision = recovery.on_conflict(found, DESIRED, previous, BUDGET, NS)
    assert (decision.action, decision.number, decision.diagnosis) == (action, number, None)


@pytest.mark.parametrize("state", ["still running", "finished"])
def test_a_jobset_of_another_configuration_is_refused_not_touched(state):
    found = live(digest="d0", completed=state == "finished")
    decision = recovery.on_conflict(found, DESIRED, 0, BUDGET, NS)
    assert decision.action is Action.REFUSE and decision.diagnosis is not None
    assert decision.diagnosis.category is FailureCategory.USER_ERROR
    assert f"({state}) with another configuration" in decision.diagnosis.summary
    assert "d0" in decision.diagnosis.detail and "d1" in decision.diagnosis.detail


def test_a_failed_jobset_at_the_bound_is_not_resubmitted():
    decision = recovery.on_conflict(live(submission="3", failed=True), DESIRED, 0, BUDGET, NS)
    assert decision.action is Action.REFUSE and decision.number == 3
    assert decision.diagnosis is not None and decision.diagnosis.code == "gke/submission-budget"


PREEMPTED = Diagnosis(FailureCategory.PREEMPTED, "the slice was preempted", "", "")
CRASHED = Diagnosis(FailureCategory.USER_ERROR, "train_rl exited 1", "", "read the log")


def test_a_preemption_is_resubmitted_while_the_bound_allows():
    assert next_action.after_verdict(PREEMPTED, NAME, 1, BUDGET, NS).action is Action.RESUBMIT
    assert next_action.after_verdict(PREEMPTED, NAME, 2, BUDGET, NS).action is Action.RESUBMIT
    spent = next_action.after_verdict(PREEMPTED, NAME, 3, BUDGET, NS)
    assert spent.action is Action.REFUSE and spent.diagnosis is not None
    assert spent.diagnosis.code == "gke/submission-budget"
    assert "the slice was preempted" in spent.diagnosis.detail  # the last failure is kept


def test_any_other_failure_is_raised_as_diagnosed():
    assert next_action.after_verdict(CRASHED, NAME, 1, BUDGET, NS) == recovery.Decision(
        Action.REFUSE, 1, CRASHED)
    assert next_action.after_verdict(CRASHED, NAME, 1, 0, NS).diagnosis is CRASHED
