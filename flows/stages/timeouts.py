"""How long one stage's task may run before Prefect ends it, from the profile's budgets.

Why: a program that hangs without failing (a stuck collective, a JobSet that never leaves
Running) would hold the run, the profile's lock and on GKE the TPUs forever. Each bound is
the most the stage's own watch allows, plus slack, so a timeout only ever ends a stage its
watch failed to end: on GKE ``(queue + run) × (preemptions + 1)`` of the stage's budgets
(flows/backends/gke/watch/budgets.py ``budgets_for``), on the rehearsal
``local.step_timeout_s`` per program. A timed-out task fails (TimeoutError) and is not
retried (flows/pipeline.py ``retry_if_retryable``).

The run as a whole is bounded too (``run_timeout_s``, enforced by flows/core/deadline.py
from the moment the run holds the profile's lock): by the profile's ``flow_timeout_s``, or
else by the sum of what its stages may take, every attempt Prefect may retry included, so
the default never ends a run that its stages' bounds would let finish; it ends what sits
outside any stage's bound (a stuck API call between stages, a hang in a stage's own code
before or after its programs).
"""

from __future__ import annotations

from collections.abc import Iterable

from flows.backends.gke.jobs.manifests import GKE_STAGES, jobs_of
from flows.backends.gke.watch.budgets import budgets_for
from flows.config.profile import Profile
from flows.core.retry import RETRY_DELAYS_S

SLACK_S = 1800.0  # resubmission, log drain, verification and upload after the last program
LOCAL_PROGRAMS = 4  # the most programs one rehearsal stage runs in sequence
# Building the image (Cloud Build / docker) and `gcluster deploy` have no profile budget;
# the longest the tutorial reports for either is well under this.
UNBUDGETED_GKE_S = 4 * 3600.0


def stage_timeout_s(profile: Profile, stage: str) -> float:
    if profile.gke is None:
        assert profile.local is not None
        return LOCAL_PROGRAMS * profile.local.step_timeout_s + SLACK_S
    if stage not in GKE_STAGES:
        return UNBUDGETED_GKE_S
    budgets = budgets_for(profile, stage)
    per_job = (budgets.queue_s + budgets.run_s) * (budgets.preemptions + 1)
    return len(jobs_of(stage)) * per_job + SLACK_S  # its JobSets run one after the other



ATTEMPTS = 1 + len(RETRY_DELAYS_S)  # flows/pipeline.py's task options: one retry per delay


def run_timeout_s(profile: Profile, stages: Iterable[str]) -> float:
    if profile.flow_timeout_s is not None:
        return profile.flow_timeout_s
    names = list(stages)
    per_attempt = sum(stage_timeout_s(profile, stage) for stage in names)
    return ATTEMPTS * per_attempt + len(names) * sum(RETRY_DELAYS_S)


def budget_fields(profile: Profile) -> list[str]:
    """The profile fields the default bound is made of."""
    if profile.gke is None:
        return ["local.step_timeout_s"]
    return ["gke.queue_budget_s", "gke.run_budget_s", "gke.train_run_budget_s",
            "gke.preemption_budget"]


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds:.0f} s"


def timed_out_message(profile: Profile, bound_s: float, stage: str | None) -> str:
    """What a run that passed its bound says (pure): the bound, where it comes from, what
    was stopped and the two fixes (a longer bound, or the stuck stage's log)."""
    fields = ", ".join(budget_fields(profile))
    source = ("flow_timeout_s" if profile.flow_timeout_s is not None else
              f"flow_timeout_s unset: the sum of its stages' bounds from {fields}, retries "
              "included")
    where = f"while {stage} was running" if stage else "between stages"
    longer = ("raise flow_timeout_s in the profile (or --set flow_timeout_s=SECONDS)"
              if profile.flow_timeout_s is not None else
              f"set flow_timeout_s in the profile (or --set flow_timeout_s=SECONDS), or raise "
              f"{fields}")
    stuck = (f"if it was stuck, {stage}'s program log (tpurl-logs/ beside its output) says "
             "where" if stage else "if it was stuck, the run's log says where")
    return (f"the run of {profile.name} passed its time bound of {_hours(bound_s)} ({source}) "
            f"{where}; its programs were stopped as a cancel stops them and the profile's "
            f"lock released. If the run needs longer, {longer}; {stuck}. Finished stages are "
            "kept: the next run skips them.")
