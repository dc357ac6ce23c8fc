"""flows/backends/gke/next_action.py: every row of the table of what follows a verdict, then
hypothesis over the state space (any chain, step, submission, budget, wait and grant age) for
the rules the rows keep together: success finishes, a resubmission stays under the
submission bound, only a lack of capacity falls back and only to the next step, only a
fresh grant of tpurl's is waited for, and a run driven by any verdicts ends within its bound.

The verdicts are shaped as watch/verdict.py makes them (Phase.FAILED with a Diagnosis, the
no-capacity codes of fallback.py), the 403 as Cloud Storage's JSON API words it
(iam_propagation.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flows.backends.gke.fallback import (
    NO_CAPACITY,
    NO_CAPACITY_CODES,
    NO_FLEX_CAPACITY,
    NO_QUEUED_CAPACITY,
    Attempt,
)
from flows.backends.gke.iam_propagation import CODE as IAM_CODE
from flows.backends.gke.iam_propagation import Grant
from flows.backends.gke.next_action import (
    CASES,
    Action,
    Fail,
    FallBack,
    Finish,
    Resubmit,
    RunState,
    Submissions,
    WaitForIam,
    next_action,
)
from flows.backends.gke.watch.monitor_verdicts import DELETED_BY_OPERATOR
from flows.backends.gke.watch.verdict import Phase, Verdict
from flows.core.failures import Diagnosis, FailureCategory

NAME, NS = "tpurl-train-abc", "default"
WL = "tpurl-v6e-gke-wl-sa@my-proj-123.iam.gserviceaccount.com"
GRANT = Grant("roles/storage.objectAdmin", f"serviceAccount:{WL}", "bucket b1", 1000.0)
REFUSED = (f"403 POST https://storage.googleapis.com/upload/storage/v1/b/b1/o: {WL} does not "
           "have storage.objects.create access to the Google Cloud Storage object.")
CHAIN = ("flex-start", "on-demand", "spot")
SUCCEEDED = Verdict(Phase.SUCCEEDED, None, "completed")


def failed(category: FailureCategory, code: str = "", text: str = "the program exited 1"
           ) -> Verdict:
    return Verdict(Phase.FAILED, Diagnosis(category, f"train failed: {text}", f"    {text}",
                                           "fix the cause", code), "failed")


PREEMPTED = failed(FailureCategory.PREEMPTED, text="a TPU host was disrupted")
NO_SLICE = failed(FailureCategory.INFRASTRUCTURE, NO_CAPACITY, "no capacity for the slice")
CRASHED = failed(FailureCategory.USER_ERROR, text="Traceback: ValueError")
DENIED = failed(FailureCategory.USER_ERROR, text=f"google.api_core.exceptions.Forbidden: {REFUSED}")


def state(**changes: object) -> RunState:
    """Step 1 of 3, first submission, preemption budget 2, a minute into an hour's budget,
    tpurl's grant made 60 s ago."""
    base = RunState(name=NAME, namespace=NS, stage="train", steps=CHAIN, index=0, submission=1,
                    submissions=Submissions(2), waited_s=60.0,
                    queue_budget_s=3600.0, attempt=Attempt("flex-start", waited_s=60.0),
                    grants=(GRANT,), now=1060.0, iam_budget_s=420.0)
    return replace(base, **changes)  # type: ignore[arg-type]  # keyword names checked by replace


@dataclass(frozen=True)
class Row:
    case: str  # the table's row (next_action.py's docstring)
    verdict: Verdict
    state: RunState
    action: type[Action]  # one member of the union
    says: str = ""  # in the action's note, line or diagnosis summary
    code: str = ""  # the failure's code


ROWS = [
    Row("succeeded", SUCCEEDED, state(), Finish),
    Row("succeeded, whatever the bound", SUCCEEDED, state(submission=9), Finish),
    Row("iam-propagation: a fresh grant is waited for", DENIED, state(), WaitForIam,
        "waiting for IAM propagation"),
    Row("iam-propagation: past its budget it fails naming the grant", DENIED,
        state(now=1000.0 + 421.0), Fail, "roles/storage.objectAdmin on bucket b1", IAM_CODE),
    Row("iam-propagation: a 403 tpurl did not grant stands", DENIED, state(grants=()), Fail,
        "Forbidden"),
    Row("preempted: resubmitted in the same step", PREEMPTED, state(), Resubmit,
        "resubmitting tpurl-train-abc (2/3)"),
    Row("preempted: the last submission the bound allows", PREEMPTED, state(submission=2),
        Resubmit, "(3/3)"),
    Row("preempted: fallbacks and IAM waits raise the bound", PREEMPTED,
        state(submission=4, submissions=Submissions(2, fallbacks=1, iam_waits=1)), Resubmit,
        "(5/5)"),
    Row("preemptions-spent", PREEMPTED, state(submission=3), Fail,
        "submitted 3 time(s), the most this stage may", "gke/submission-budget"),
    Row("no-capacity: the next step", NO_SLICE, state(), FallBack,
        "no capacity in flex-start (train failed: no capacity for the slice); falling back "
        "to on-demand (2 of 3 in gke.capacity)"),
    Row("no-capacity: flex-start's wait", failed(FailureCategory.STALLED, NO_FLEX_CAPACITY),
        state(index=1), FallBack, "falling back to spot (3 of 3"),
    Row("no-capacity: queued provisioning", failed(FailureCategory.INFRASTRUCTURE,
                                                   NO_QUEUED_CAPACITY), state(), FallBack),
    Row("no-capacity: a preemption at its bound still falls back",
        failed(FailureCategory.PREEMPTED, NO_CAPACITY), state(submission=3), FallBack),
    Row("failed: no capacity at the last step says the chain was tried", NO_SLICE,
        state(index=2), Fail, "all 3 modes of gke.capacity were tried", NO_CAPACITY),
    Row("failed: no capacity past the stage budget says so", NO_SLICE,
        state(waited_s=3600.0), Fail, "the stage budget of 3600 s ran out", NO_CAPACITY),
    Row("failed: no capacity, one step only", NO_SLICE, state(steps=("spot",)), Fail,
        "train failed: no capacity for the slice", NO_CAPACITY),
    Row("failed: a program error", CRASHED, state(), Fail, "Traceback: ValueError"),
    Row("failed: an infrastructure fault is Prefect's to retry",
        failed(FailureCategory.INFRASTRUCTURE, text="node pool gone"), state(), Fail,
        "node pool gone"),
    Row("failed: an operator's deletion", failed(FailureCategory.CANCELLED, DELETED_BY_OPERATOR),
        state(), Fail, code=DELETED_BY_OPERATOR),
]


def said(action: Action) -> str:
    match action:
        case WaitForIam(line=line) | Resubmit(note=line) | FallBack(note=line):
            return line
        case Fail(diagnosis=diagnosis):
            return diagnosis.summary
    return ""


@pytest.mark.parametrize("row", ROWS, ids=[r.case for r in ROWS])
def test_each_row_of_the_table(row: Row) -> None:
    action = next_action(row.verdict, row.state)
    assert type(action) is row.action, action
    assert row.says in said(action)
    if isinstance(action, Fail):
        assert action.diagnosis.code == row.code
    if isinstance(action, FallBack):
        assert action.index == row.state.index + 1 and action.reason is row.verdict.diagnosis


def test_each_case_of_the_table_is_reached_by_a_row() -> None:
    """No dead case: every function of CASES is the first to answer some row."""
    first = set()
    for row in ROWS:
        for case in CASES:
            if case(row.verdict, row.state) is not None:
                first.add(case)
                break
    assert first == set(CASES)


def test_a_failed_chain_lists_every_attempt_this_one_included() -> None:
    earlier = (Attempt("flex-start", waited_s=900, outcome="no-capacity"),
               Attempt("on-demand", waited_s=900, outcome="no-capacity"))
    action = next_action(NO_SLICE, state(index=2, attempts=earlier,
                                         attempt=Attempt("spot", waited_s=30.0)))
    assert isinstance(action, Fail)
    assert "flex-start: waited 900 s" in action.diagnosis.detail
    assert "spot: waited 30 s, held the slice 0 s (0.000 chip-h, $0.00), failed" in \
        action.diagnosis.detail


def test_the_outcome_each_action_records() -> None:
    outcomes = {type(next_action(r.verdict, r.state)).__name__: next_action(r.verdict, r.state)
                .outcome for r in ROWS}
    assert outcomes == {"Finish": "succeeded", "WaitForIam": "iam-propagation",
                        "Resubmit": "preempted", "FallBack": "no-capacity", "Fail": "failed"}


# --- hypothesis over the state space -------------------------------------------------------
CATEGORIES = st.sampled_from(list(FailureCategory))
CODES = st.sampled_from(["", *sorted(NO_CAPACITY_CODES), DELETED_BY_OPERATOR])
TEXTS = st.sampled_from(["the program exited 1", f"Forbidden: {REFUSED}"])
VERDICTS = st.one_of(st.just(SUCCEEDED), st.builds(failed, CATEGORIES, CODES, TEXTS))


@st.composite
def states(draw: st.DrawFn) -> RunState:
    steps = tuple(draw(st.lists(st.sampled_from(["reservation", "flex-start", "on-demand",
                                                 "spot", "spot@us-east5-a"]),
                                min_size=1, max_size=4)))
    budget = draw(st.integers(0, 4))
    fallbacks, iam_waits = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    return state(steps=steps, index=draw(st.integers(0, len(steps) - 1)),
                 submission=draw(st.integers(1, budget + 2 + fallbacks + iam_waits)),
                 submissions=Submissions(budget, fallbacks, iam_waits),
                 waited_s=draw(st.floats(0, 7200)), queue_budget_s=3600.0,
                 grants=draw(st.sampled_from([(), (GRANT,)])),
                 now=GRANT.at + draw(st.floats(0, 900)))


@settings(max_examples=400, deadline=None)
@given(VERDICTS, states())
def test_the_rules_hold_over_the_state_space(verdict: Verdict, run: RunState) -> None:
    action = next_action(verdict, run)
    diagnosis = verdict.diagnosis
    if verdict.phase is Phase.SUCCEEDED:
        assert isinstance(action, Finish)
        return
    assert diagnosis is not None and not isinstance(action, Finish)
    if isinstance(action, Resubmit):
        assert diagnosis.category is FailureCategory.PREEMPTED
        assert run.submission < run.submissions.most
    if isinstance(action, FallBack):
        assert diagnosis.code in NO_CAPACITY_CODES and action.index == run.index + 1
        assert action.index < len(run.steps) and run.waited_s < run.queue_budget_s
    if isinstance(action, WaitForIam):
        assert diagnosis.category is FailureCategory.USER_ERROR and run.grants
        assert run.now - GRANT.at < run.iam_budget_s and 0 < action.wait_s <= run.iam_budget_s
    if diagnosis.category is FailureCategory.PREEMPTED and \
            run.submission < run.submissions.most:
        assert isinstance(action, Resubmit)  # a preemption under the bound always resubmits
    if isinstance(action, Fail) and diagnosis.code not in NO_CAPACITY_CODES \
            and diagnosis.category is not FailureCategory.PREEMPTED \
            and action.diagnosis.code != IAM_CODE:
        assert action.diagnosis is diagnosis  # kept as the watch said it


@settings(max_examples=200, deadline=None)
@given(st.lists(VERDICTS.filter(lambda v: v.phase is Phase.FAILED), min_size=1, max_size=40),
       st.integers(0, 3), st.integers(1, 4))
def test_any_run_ends_within_its_submission_bound(verdicts: list[Verdict], budget: int,
                                                  length: int) -> None:
    """Carry each action out as the run loop does (a resubmission, a fallback or an IAM
    wait is the next submission; time passes): the run ends by the verdicts it is given or
    fails, and never submits more than the bound its fallbacks and waits make."""
    run = state(steps=CHAIN[:length], submissions=Submissions(budget), waited_s=0.0)
    for verdict in verdicts:
        action = next_action(verdict, run)
        if isinstance(action, Fail):
            break
        assert run.submission + 1 <= run.submissions.most + (
            1 if isinstance(action, FallBack | WaitForIam) else 0)
        run = replace(run, submission=run.submission + 1, waited_s=run.waited_s + 600.0,
                      now=run.now + 60.0,
                      index=action.index if isinstance(action, FallBack) else run.index,
                      submissions=run.submissions.after_fallback()
                      if isinstance(action, FallBack) else run.submissions.after_iam_wait()
                      if isinstance(action, WaitForIam) else run.submissions)
    assert run.submission <= run.submissions.most
    assert run.submission <= budget + 1 + (length - 1) + 7  # IAM waits end with the budget
