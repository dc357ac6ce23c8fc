"""Before a stage watches its JobSet: create it, attach to it, resubmit it or refuse (pure).

Kept apart from the backend that does the calls (backend.py) the way SkyPilot keeps its
recovery strategies (sky/jobs/recovery_strategy.py) apart from the jobs controller that runs
them: the decisions are the part
that must be right in every case (a rerun after the flow died, a retry after a failure, a
preemption, a JobSet of another configuration), so each is a pure function of what the
cluster answered, tested case by case (tests/backends/gke/test_recovery.py). What follows a
verdict of the JobSet watched is next_action.py's.

The bound they keep: at most ``Submissions.most`` (``gke.preemption_budget`` + 1) JobSets are
ever created for one stage of one run, across Prefect's retries and flow restarts, because
each JobSet carries its submission number (annotation ``tpurl/submission``) and an attach
reads it back.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from flows.backends.gke.jobs.common import SPEC_DIGEST
from flows.backends.gke.watch.monitor import is_finished
from flows.common.api_objects import Obj, condition
from flows.common.failure_codes import Failure
from flows.core.failures import Diagnosis, FailureCategory

SUBMISSION = "tpurl/submission"  # annotation: which submission of this stage a JobSet is


class Action(StrEnum):
    CREATE = "create"  # (again): the one we met is gone
    WAIT_GONE = "wait-gone"  # it is being deleted: wait, then create
    ATTACH = "attach"  # ours, same spec, not failed: watch it
    RESUBMIT = "resubmit"  # delete it and create the next submission
    REFUSE = "refuse"  # raise the diagnosis


@dataclass(frozen=True)
class Decision:
    action: Action
    number: int  # the submission number reached so far (attach: the one being watched)
    diagnosis: Diagnosis | None = None  # for REFUSE


def submission_of(jobset: Obj) -> int:
    """The submission number a JobSet carries (1 for one made before the annotation)."""
    value = ((jobset.get("metadata") or {}).get("annotations") or {}).get(SUBMISSION, "1")
    try:
        return max(1, int(value))
    except ValueError:
        return 1


def numbered(desired: Obj, number: int) -> Obj:
    """The JobSet to create as submission ``number``."""
    meta = desired["metadata"]
    return {**desired, "metadata": {**meta, "annotations": {**meta["annotations"],
                                                            SUBMISSION: str(number)}}}


def budget_spent(name: str, number: int, why: Diagnosis | None, preemptions: int,
                 namespace: str) -> Diagnosis:
    """Not retryable: another attempt could only create JobSets past the bound."""
    return Diagnosis(
        FailureCategory.STALLED,
        f"{name} was submitted {number} time(s), the most this "
        f"stage may (gke.preemption_budget {preemptions} + 1)",
        f"    last failure: {why.summary if why else 'an earlier attempt failed'}",
        "the slice keeps being preempted or failing: check the node pool (maintenance, "
        f"spot), then delete the failed JobSet (kubectl delete jobset {name} -n "
        f"{namespace}) to start counting again, or raise gke.preemption_budget",
        code=Failure.GKE_SUBMISSION_BUDGET)


def before_create(name: str, previous: int, preemptions: int, namespace: str) -> Decision:
    """May submission ``previous + 1`` be created?"""
    if previous + 1 > preemptions + 1:
        return Decision(Action.REFUSE, previous,
                        budget_spent(name, previous, None, preemptions, namespace))
    return Decision(Action.CREATE, previous + 1)


def on_conflict(live: Obj | None, desired: Obj, previous: int, preemptions: int,
                namespace: str) -> Decision:
    """A create answered 409: decide from the JobSet of that name the cluster holds."""
    name = desired["metadata"]["name"]
    if live is None:
        return Decision(Action.CREATE, previous)  # gone between the 409 and the read
    meta = live["metadata"]
    if meta.get("deletionTimestamp"):
        return Decision(Action.WAIT_GONE, previous)
    digest = desired["metadata"]["annotations"][SPEC_DIGEST]
    theirs = (meta.get("annotations") or {}).get(SPEC_DIGEST)
    if theirs != digest:
        state = "finished" if is_finished(live) else "still running"
        return Decision(Action.REFUSE, previous, Diagnosis(
            FailureCategory.USER_ERROR,
            f"JobSet {name} already exists ({state}) with another configuration",
            f"    its spec digest is {theirs}, this run's is {digest}",
            f"it belongs to an earlier version of this profile: delete it (kubectl delete "
            f"jobset {name} -n {namespace}) or let its TTL expire, then run again"))
    number = max(previous, submission_of(live))
    if condition(live, "Failed"):
        if number >= preemptions + 1:
            return Decision(Action.REFUSE, number,
                            budget_spent(name, number, None, preemptions, namespace))
        return Decision(Action.RESUBMIT, number)
    return Decision(Action.ATTACH, number)
