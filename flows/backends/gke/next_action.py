"""What a GKE stage does after its JobSet's verdict (pure): finish, wait for IAM propagation
and resubmit, resubmit after a preemption, fall back to the next capacity step, or fail.

The run loop (GkeBackend.run_workload) calls ``next_action(verdict, state)`` once per verdict
and carries the answer out; every decision taken after a verdict is here, in one ordered
table (``CASES``, first match wins), so no case can be consulted in the wrong order:

======================  ==========================================  =====================
case                    when                                        action
======================  ==========================================  =====================
succeeded               the JobSet completed                        Finish
iam-propagation         a GCS 403 on a role tpurl granted that      WaitForIam, or Fail
                        account (iam_propagation.py): younger than  naming the grant once
                        ``gke.iam_propagation_s``                   it is older
preempted               the slice was taken, below the submission   Resubmit (same step)
                        bound (``gke.preemption_budget`` + 1, plus
                        one per fallback and IAM wait)
no-capacity             the step has no capacity (fallback.py's     FallBack to the next
                        codes), a next step exists and the stage    step
                        waited less than its queue budget
preemptions-spent       preempted at the submission bound           Fail (submission
                                                                    budget)
failed                  anything else (a no-capacity at the last    Fail (the chain's
                        step or past the budget included)           attempts said)
======================  ==========================================  =====================

Why a preemption resubmits in the same step: the slice was there and may come back, and the
program resumes from its newest checkpoint. Why only a lack of capacity falls back: Kueue does
not fall back between flavors on a stockout (fallback.py says why), any other failure would
fail the same way in the next mode. Why the whole chain shares the stage's queue budget: the
worst case of a chain is bounded by the stage's budget, not by the sum of every step's.

The bound on submissions (recovery.py): at most ``Submissions.most`` JobSets are ever created
for one stage of one run, across Prefect's retries and flow restarts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from flows.backends.gke.fallback import NO_CAPACITY_CODES, Attempt
from flows.backends.gke.iam_propagation import BUDGET_S, CODE, Grant, denial
from flows.backends.gke.recovery import Action as SubmitAction
from flows.backends.gke.recovery import Decision, budget_spent
from flows.backends.gke.watch.verdict import Phase, Verdict
from flows.core.failures import Diagnosis, FailureCategory


@dataclass(frozen=True)
class Submissions:
    """The stage's count of what widens its bound on JobSets: the preemption budget, and the
    fallbacks and IAM waits taken so far (each a further submission). The run loop keeps one
    (its ``StageRun``) and hands it to every decision, so the bound is said once."""

    preemption_budget: int  # gke.preemption_budget
    fallbacks: int = 0  # taken in this stage (or the step a rerun resumed in)
    iam_waits: int = 0  # resubmissions that waited for IAM propagation in this stage

    @property
    def resubmissions(self) -> int:
        """Submissions after the first: one per preemption, fallback and IAM wait."""
        return self.preemption_budget + self.fallbacks + self.iam_waits

    @property
    def most(self) -> int:
        """JobSets ever created for one stage of one run."""
        return self.resubmissions + 1

    def after_fallback(self, step: int | None = None) -> Submissions:
        """One fallback more (or, resuming a rerun in ``step``, that many taken)."""
        return replace(self, fallbacks=self.fallbacks + 1 if step is None else step)

    def after_iam_wait(self) -> Submissions:
        return replace(self, iam_waits=self.iam_waits + 1)


@dataclass(frozen=True)
class RunState:
    """What the run knows when a verdict arrives."""

    name: str  # the JobSet watched
    namespace: str
    stage: str  # as the notes name it (the stage, or the workload without one)
    steps: tuple[str, ...]  # the capacity chain (capacity_run.capacity_chain)
    index: int  # the step the verdict is of
    submission: int  # the number of the JobSet watched (recovery.submission_of)
    submissions: Submissions  # the stage's bound so far
    waited_s: float  # since the stage's run began
    queue_budget_s: float  # the stage's, shared by the whole chain
    attempt: Attempt  # this step's attempt as measured, its outcome not yet set
    attempts: tuple[Attempt, ...] = ()  # the earlier attempts, outcomes set
    grants: tuple[Grant, ...] = ()  # what the infra stage granted (iam_propagation.load)
    now: float = 0.0  # epoch seconds, for the grants' age
    iam_budget_s: float = BUDGET_S  # gke.iam_propagation_s


@dataclass(frozen=True)
class Finish:
    """The JobSet completed: the stage's run is over."""

    outcome: str = "succeeded"


@dataclass(frozen=True)
class WaitForIam:
    """Delete the JobSet, wait ``wait_s`` for IAM to propagate tpurl's grant, resubmit."""

    line: str
    wait_s: float
    outcome: str = "iam-propagation"


@dataclass(frozen=True)
class Resubmit:
    """Delete the preempted JobSet and submit the same step again (``note`` for the log)."""

    note: str
    line: str
    outcome: str = "preempted"


@dataclass(frozen=True)
class FallBack:
    """Delete the JobSet and submit step ``index`` of the chain; ``reason`` is the spent
    step's diagnosis."""

    index: int
    note: str
    reason: Diagnosis
    outcome: str = "no-capacity"


@dataclass(frozen=True)
class Fail:
    """The stage fails with ``diagnosis``."""

    diagnosis: Diagnosis
    outcome: str = "failed"


Action = Finish | WaitForIam | Resubmit | FallBack | Fail
Case = Callable[[Verdict, RunState], Action | None]


def next_action(verdict: Verdict, state: RunState) -> Action:
    """The first case of ``CASES`` that answers."""
    for case in CASES:
        if (action := case(verdict, state)) is not None:
            return action
    raise AssertionError("the last case answers every verdict")  # unreachable: _failed does


# --- the cases, in the table's order -------------------------------------------------------
def _succeeded(verdict: Verdict, state: RunState) -> Action | None:
    return Finish() if verdict.phase is Phase.SUCCEEDED else None


def _iam_propagation(verdict: Verdict, state: RunState) -> Action | None:
    lag = iam_lag(_diagnosis(verdict), list(state.grants), state.now, state.iam_budget_s)
    if lag is None:
        return None
    if lag.diagnosis is not None:
        return Fail(lag.diagnosis)  # the wait is over: a user error, nothing falls back
    return WaitForIam(lag.line, lag.wait_s)


def _preempted(verdict: Verdict, state: RunState) -> Action | None:
    decision = _after_verdict(verdict, state)
    if decision.action is not SubmitAction.RESUBMIT:
        return None
    following = state.submission + 1
    return Resubmit(
        note=(f"preempted; resubmitting {state.name} ({following}/{state.submissions.most}), "
              "resuming from the newest checkpoint"),
        line=(f"{state.name} preempted: resubmitting (submission {following} of at most "
              f"{state.submissions.most}); the program resumes from its newest checkpoint"))


def _no_capacity(verdict: Verdict, state: RunState) -> Action | None:
    diagnosis = _diagnosis(verdict)
    following = falls_back(diagnosis, state.steps, state.index, state.waited_s,
                           state.queue_budget_s)
    if following is None:
        return None
    return FallBack(following, fallback_note(state.stage, state.steps, state.index, diagnosis),
                    diagnosis)


def _failed(verdict: Verdict, state: RunState) -> Action:
    """Last: a preemption past the bound, a chain spent, any other failure."""
    refused = _after_verdict(verdict, state).diagnosis
    assert refused is not None  # _after_verdict refuses all but a resubmission
    attempts = [*state.attempts, replace(state.attempt, outcome="failed")]
    return Fail(chain_spent(refused, state.steps, attempts, state.queue_budget_s,
                            state.waited_s))


CASES: tuple[Case, ...] = (_succeeded, _iam_propagation, _preempted, _no_capacity, _failed)


def _diagnosis(verdict: Verdict) -> Diagnosis:
    """Every verdict but success carries its diagnosis (watch/verdict.py)."""
    if verdict.diagnosis is None:
        raise ValueError(f"a {verdict.phase} verdict without a diagnosis ({verdict.reason})")
    return verdict.diagnosis


def _after_verdict(verdict: Verdict, state: RunState) -> Decision:
    return after_verdict(_diagnosis(verdict), state.name, state.submission,
                         state.submissions.resubmissions, state.namespace)


# --- the rules the cases apply -------------------------------------------------------------
def after_verdict(diagnosis: Diagnosis, name: str, number: int, preemptions: int,
                  namespace: str) -> Decision:
    """The watched JobSet failed: a preemption is resubmitted while the bound allows;
    anything else (and a preemption past the bound) is refused with its diagnosis."""
    if diagnosis.category is FailureCategory.PREEMPTED:
        if number < preemptions + 1:
            return Decision(SubmitAction.RESUBMIT, number)
        return Decision(SubmitAction.REFUSE, number,
                        budget_spent(name, number, diagnosis, preemptions, namespace))
    return Decision(SubmitAction.REFUSE, number, diagnosis)


def falls_back(diagnosis: Diagnosis, chain: tuple[str, ...], index: int, waited_s: float,
               stage_budget_s: float) -> int | None:
    """The index of the step to try next, or None to keep the diagnosis: only a lack of
    capacity falls back, only while a next step exists and the stage budget is not spent."""
    if diagnosis.code not in NO_CAPACITY_CODES or index + 1 >= len(chain):
        return None
    if waited_s >= stage_budget_s:
        return None
    return index + 1


def fallback_note(stage: str, chain: tuple[str, ...], index: int, diagnosis: Diagnosis) -> str:
    """The log line (and the event's message) of one fallback."""
    return (f"{stage}: no capacity in {chain[index]} ({diagnosis.summary}); falling back to "
            f"{chain[index + 1]} ({index + 2} of {len(chain)} in gke.capacity), resuming from "
            "the newest checkpoint")


def chain_spent(diagnosis: Diagnosis, chain: tuple[str, ...], attempts: list[Attempt],
                stage_budget_s: float, waited_s: float) -> Diagnosis:
    """The last step's diagnosis, saying every step was tried (or the stage budget ran out)."""
    if len(chain) <= 1 or diagnosis.code not in NO_CAPACITY_CODES:
        return diagnosis
    tried = "; ".join(a.line() for a in attempts)
    why = (f"the stage budget of {stage_budget_s:.0f} s ran out after {waited_s:.0f} s"
           if waited_s >= stage_budget_s and len(attempts) < len(chain)
           else f"all {len(chain)} modes of gke.capacity were tried")
    return Diagnosis(diagnosis.category, f"{diagnosis.summary} ({why})",
                     f"{diagnosis.detail}\n    tried: {tried}",
                     diagnosis.fix + "; add a zone (gke.zones) or a mode (gke.capacity) to "
                     "the chain, or raise gke.queue_budget_s", diagnosis.code)


@dataclass(frozen=True)
class IamLag:
    """``iam_lag``'s answer: wait ``wait_s`` and resubmit (``line`` says why), or fail with
    ``diagnosis``."""

    line: str = ""
    wait_s: float = 0.0
    diagnosis: Diagnosis | None = None


def iam_lag(diagnosis: Diagnosis, grants: list[Grant], now: float,
            budget_s: float = BUDGET_S) -> IamLag | None:
    """None unless the failure is a 403 for a permission of a role tpurl granted that
    member (then wait and resubmit within ``budget_s`` of the grant, else fail saying so)."""
    if diagnosis.category is not FailureCategory.USER_ERROR:
        return None
    found = denial(f"{diagnosis.summary}\n{diagnosis.detail}")
    if found is None:
        return None
    member, permission = found
    grant = max((g for g in grants if g.allows(member, permission)), key=lambda g: g.at,
                default=None)
    if grant is None:
        return None  # not ours to wait for: the 403 stands
    age = now - grant.at
    if age < budget_s:
        return IamLag(line=(
            f"{permission} was refused to {member}, granted {grant.role} on "
            f"{grant.resource} {age:.0f} s ago: waiting for IAM propagation (Google: "
            f"typically 2 min, up to 7) for at most {budget_s - age:.0f} s more, then "
            "resubmitting"), wait_s=min(budget_s - age, max(budget_s / 14, 1.0)))
    scope, name = grant.resource.split(" ", 1)
    check = (f"gcloud storage buckets get-iam-policy gs://{name}" if scope == "bucket"
             else f"gcloud projects get-iam-policy {name}")
    return IamLag(diagnosis=Diagnosis(
        FailureCategory.USER_ERROR,
        f"{permission} is still refused to {member} {age:.0f} s after tpurl granted it "
        f"{grant.role} on {grant.resource} (IAM propagation takes up to 7 minutes)",
        diagnosis.detail,
        f"check that the binding is there ({check}) and that no deny policy or "
        f"organization constraint blocks {member}; re-grant {grant.role} if it is "
        "missing, then rerun", CODE))
