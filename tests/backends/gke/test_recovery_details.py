"""flows/backends/gke/recovery.py, the details mutation testing found unchecked: the number a
refusal carries and the budget diagnosis' exact text (what the user reads to fix it)."""

from __future__ import annotations

from flows.backends.gke import next_action, recovery
from flows.backends.gke.recovery import Action, Decision
from flows.core.failures import Diagnosis, FailureCategory
from tests.backends.gke.test_recovery import BUDGET, DESIRED, NAME, NS, live


def spent(number: int, last: str = "an earlier attempt failed") -> Diagnosis:
    return Diagnosis(
        FailureCategory.STALLED,
        f"{NAME} was submitted {number} time(s), the most this stage may "
        f"(gke.preemption_budget {BUDGET} + 1)",
        f"    last failure: {last}",
        "the slice keeps being preempted or failing: check the node pool (maintenance, spot), "
        f"then delete the failed JobSet (kubectl delete jobset {NAME} -n {NS}) to start "
        "counting again, or raise gke.preemption_budget", code="gke/submission-budget")


def test_a_refused_create_keeps_the_number_reached_and_says_why_in_full():
    assert recovery.before_create(NAME, 3, BUDGET, NS) == Decision(Action.REFUSE, 3, spent(3))


def test_a_failed_jobset_past_the_bound_met_on_conflict_is_refused_in_full():
    decision = recovery.on_conflict(live(submission="3", failed=True), DESIRED, 1, BUDGET, NS)
    assert decision == Decision(Action.REFUSE, 3, spent(3))


def test_another_configuration_is_refused_with_the_number_so_far_and_the_fix():
    decision = recovery.on_conflict(live(digest="d0"), DESIRED, 2, BUDGET, NS)
    assert decision == Decision(Action.REFUSE, 2, Diagnosis(
        FailureCategory.USER_ERROR,
        f"JobSet {NAME} already exists (still running) with another configuration",
        "    its spec digest is d0, this run's is d1",
        f"it belongs to an earlier version of this profile: delete it (kubectl delete jobset "
        f"{NAME} -n {NS}) or let its TTL expire, then run again"))


def test_a_preemption_is_resubmitted_with_its_number_then_refused_naming_it():
    preempted = Diagnosis(FailureCategory.PREEMPTED, "slice preempted", "", "")
    assert next_action.after_verdict(preempted, NAME, 2, BUDGET, NS) == Decision(Action.RESUBMIT, 2)
    assert next_action.after_verdict(preempted, NAME, 3, BUDGET, NS) == Decision(
        Action.REFUSE, 3, spent(3, "slice preempted"))
