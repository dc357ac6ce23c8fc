"""Every time budget of a run, computed from the profile in one place: how long a GKE stage's
JobSet may queue, run, stay unschedulable or ride out API errors (the watch's budgets), how
long the plan says each stage can wait, how long each capacity mode waits before the next,
how long one stage's task may run before Prefect ends it, and the run's own bound.

Why one module: these numbers are made of one another (a task's timeout is its watch's
budgets plus slack, the run's bound the sum of its tasks' timeouts with every retry, the
plan's waits the same budgets under Prefect's retry rule), so a change to one must be read
beside the others. Pure and free of any backend's client: the flow, the plan and the watch
all read it, the rehearsal's included, and the Kubernetes package costs 1.5 s to import.

What differs per backend is asked through the backend protocol (``Timing`` in
flows/core/backend.py): a backend answers ``stage_timeout_s`` with the functions below and
its own facts (the rehearsal: programs in sequence; GKE: which stages submit JobSets and how
many each). The defaults a profile may override live with their fields and reasons in
flows/config/watch_budgets.py and flows/config/gke_jobs.py; ``Budgets`` reads them from
there, so the watch and the profile cannot differ.

A stage's task timeout is the most its own watch allows, plus slack, so a timeout only ever
ends a stage its watch failed to end (a program that hangs without failing, a JobSet that
never leaves Running): on GKE ``(queue + run) × (preemptions + 1)`` per JobSet, on the
rehearsal ``local.step_timeout_s`` per program. A timed-out task fails (TimeoutError) and is
not retried (flows/pipeline.py ``retry_if_retryable``). The run as a whole is bounded too
(enforced by flows/core/deadline.py from the moment the run holds the profile's lock): by
the profile's ``flow_timeout_s``, or else by the sum of what its stages may take, every
attempt Prefect may retry included, so the default never ends a run that its stages' bounds
would let finish; it ends what sits outside any stage's bound (a stuck API call between
stages, a hang in a stage's own code before or after its programs).

How long each GKE stage can wait on the cluster before it gives up (``stage_waits``) follows
which verdicts Prefect retries (flows/core/failures.py RETRYABLE):
- a JobSet Kueue never admits ends in queue-timeout after the queue budget: not retried;
- admitted pods that find no node end in infrastructure after the scheduling budget (the
  JobSet may first have waited up to the queue budget in Kueue): retried, so each attempt
  can cost queue + scheduling, plus the retry delays;
- flex-start waits for capacity under the queue budget and ends in queue-timeout: not
  retried, so queue (Kueue) + queue (capacity) once;
- a preempted JobSet is resubmitted up to ``preemptions`` times in all (across retries),
  each submission running at most the run budget.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from flows.config.capacity import MAX_RUN_MODES
from flows.config.profile import Profile
from flows.config.spend import ON_SLICE
from flows.config.watch_budgets import GkeWatchBudgets
from flows.core.retry import RETRY_DELAYS_S


def _configured(field_name: str) -> float:
    """The default of a budget the profile may set (flows/config/watch_budgets.py, where
    each default has its reason): one place, so the watch and the profile cannot differ."""
    return float(GkeWatchBudgets.model_fields[field_name].default)


IAM_PROPAGATION_S = _configured("iam_propagation_s")  # a 403 on tpurl's own grant, waited out


@dataclass(frozen=True)
class Budgets:
    """Every watch budget of one GKE stage with its default: these fields' here, the
    profile-settable ones' in flows/config/watch_budgets.py (read through ``_configured``)."""

    queue_s: float = 6 * 3600.0  # suspended by Kueue this long → queue-timeout
    run_s: float = 24 * 3600.0  # running this long → stalled (the TTL of a Pathways job)
    schedule_s: float = _configured("schedule_budget_s")  # unschedulable → infrastructure
    waits_for_capacity: bool = False  # flex-start's slice: unschedulable pods wait under queue_s
    preemptions: int = 3  # resubmissions after a JobSet failed of preemption, per stage, in
    # all: at most preemptions + 1 JobSets are ever created for one stage of one run
    api_s: float = _configured("api_budget_s")  # one API call rides out 5xx/429 this long
    pull_grace_s: float = _configured("pull_grace_s")  # a failing image pull → fails
    tick_s: float = 1.0  # budget checks between events; costs no API request
    log_drain_s: float = _configured("log_drain_s")  # after a verdict, for the last lines
    delete_wait_s: float = _configured("delete_wait_s")  # a Foreground delete, to be gone
    iam_propagation_s: float = IAM_PROPAGATION_S  # a 403 on tpurl's grant


def budgets_for(profile: Profile, stage: str) -> Budgets:
    """The profile's budgets (gke.queue_budget_s, gke.run_budget_s or, for training,
    gke.train_run_budget_s, gke.preemption_budget; gke.schedule_budget_s, gke.pull_grace_s,
    gke.api_budget_s, gke.log_drain_s, gke.delete_wait_s, gke.iam_propagation_s from
    flows/config/watch_budgets.py); unset ones keep the defaults. Only the stages on the
    slice wait for flex-start capacity: convert and export run on the CPU pool
    (conversion_placement cpu-pool, which flex-start requires), where an unschedulable pod
    is no capacity queue but a pool too small or down, to be reported after the scheduling
    budget and retried like in any other mode."""
    gke, out = profile.gke, Budgets()
    if gke is None:
        return out
    run = gke.train_run_budget_s if stage == "train" else None
    return dataclasses.replace(
        out, queue_s=_set_or(gke.queue_budget_s, out.queue_s),
        run_s=_set_or(run or gke.run_budget_s, out.run_s),
        preemptions=_set_or(gke.preemption_budget, out.preemptions),
        waits_for_capacity=waits_for_capacity(
            gke.capacity_chain[0], stage, len(gke.capacity_chain) == 1) or out.waits_for_capacity,
        schedule_s=_set_or(gke.schedule_budget_s, out.schedule_s),
        pull_grace_s=_set_or(gke.pull_grace_s, out.pull_grace_s),
        api_s=_set_or(gke.api_budget_s, out.api_s),
        log_drain_s=_set_or(gke.log_drain_s, out.log_drain_s),
        delete_wait_s=_set_or(gke.delete_wait_s, out.delete_wait_s),
        iam_propagation_s=_set_or(gke.iam_propagation_s, out.iam_propagation_s))


def _set_or[T](value: T | None, default: T) -> T:
    """The profile's value where it sets one (None: unset), else the default."""
    return default if value is None else value


def waits_for_capacity(mode: str, stage: str, last: bool = True) -> bool:
    """A flex-start slice's pods wait for capacity under the queue budget (the stages on
    the slice only); the chain's fallback sets it for each mode it tries. A mode with a
    next one after it (``last`` False) waits the scheduling budget only: the queue budget
    is the whole chain's (flows/backends/gke/fallback.py)."""
    return mode == "flex-start" and stage in ON_SLICE and last


def mode_budget_h(profile: Profile, mode: str) -> float:
    """How long the train stage waits for a slice in ``mode`` before the next mode: the queue
    budget for Dynamic Workload Scheduler's modes (they wait for capacity by design), the
    scheduling budget for the others (a FailedScaleUp is a stockout); none on a reservation."""
    if mode == "reservation":
        return 0.0
    budgets = budgets_for(profile, "train")
    return (budgets.queue_s if mode in MAX_RUN_MODES else budgets.schedule_s) / 3600.0


@dataclass(frozen=True)
class StageWaits:
    stage: str
    attempts: int  # task attempts that can each wait (1 + Prefect retries, or 1)
    per_attempt_s: float  # queued in Kueue + waiting for nodes, one attempt
    retry_delays_s: float  # Prefect's delays between those attempts
    jobsets: int  # JobSets at most (submissions, across retries)
    run_s: float  # each JobSet runs at most this long

    @property
    def give_up_after_s(self) -> float:
        """Wall time before the stage fails when nothing ever runs."""
        return self.attempts * self.per_attempt_s + self.retry_delays_s


def stage_waits(stage: str, budgets: Budgets, retry_delays_s: Sequence[float],
                jobs: int = 1) -> StageWaits:
    """How long a GKE stage can wait on the cluster, Prefect's retries included (the rule is
    in the module's docstring). ``jobs``: the JobSets the stage runs one after the other
    (evaluate: base, trained), each with its own preemption budget."""
    jobsets = jobs * (budgets.preemptions + 1)
    if budgets.waits_for_capacity:  # flex-start: queue-timeout, which is not retried
        return StageWaits(stage, 1, 2 * budgets.queue_s, 0.0, jobsets, budgets.run_s)
    return StageWaits(stage, 1 + len(retry_delays_s), budgets.queue_s + budgets.schedule_s,
                      float(sum(retry_delays_s)), jobsets, budgets.run_s)


def _minutes_or_hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def render_waits(waits: list[StageWaits]) -> list[str]:
    """The plan's lines for ``stage_waits``: a stockout that waited 30 min per attempt
    waited about 90 with two retries, and the plan must say so."""
    lines = ["Worst-case waits on the cluster (Prefect's retries included; the gke.*_budget_s "
             "fields set them):"]
    for w in waits:
        how = (f"{w.attempts} attempt(s) × {_minutes_or_hours(w.per_attempt_s)} queued and "
               "waiting for nodes" + (f" + {w.retry_delays_s:.0f} s between retries"
                                      if w.retry_delays_s else ""))
        lines.append(f"  {w.stage}: gives up after at most "
                     f"{_minutes_or_hours(w.give_up_after_s)} if nothing runs ({how}); at "
                     f"most {w.jobsets} JobSet(s), each running at most "
                     f"{_minutes_or_hours(w.run_s)}")
    return lines


SLACK_S = 1800.0  # resubmission, log drain, verification and upload after the last program
LOCAL_PROGRAMS = 4  # the most programs one rehearsal stage runs in sequence
# Building the image (Cloud Build / docker) and `gcluster deploy` have no profile budget;
# the longest the tutorial reports for either is well under this.
UNBUDGETED_GKE_S = 4 * 3600.0
ATTEMPTS = 1 + len(RETRY_DELAYS_S)  # flows/pipeline.py's task options: one retry per delay


def local_stage_timeout_s(profile: Profile) -> float:
    """A rehearsal stage's task timeout: its programs in sequence, each within
    ``local.step_timeout_s``, plus slack."""
    assert profile.local is not None
    return LOCAL_PROGRAMS * profile.local.step_timeout_s + SLACK_S


def gke_stage_timeout_s(profile: Profile, stage: str, jobsets: int) -> float:
    """A GKE stage's task timeout: ``jobsets`` JobSets one after the other, each within
    ``(queue + run) × (preemptions + 1)`` of the stage's budgets, plus slack; a stage that
    submits none (``jobsets`` 0: image, infra) has no profile budget and gets
    ``UNBUDGETED_GKE_S``."""
    if jobsets == 0:
        return UNBUDGETED_GKE_S
    budgets = budgets_for(profile, stage)
    per_job = (budgets.queue_s + budgets.run_s) * (budgets.preemptions + 1)
    return jobsets * per_job + SLACK_S


def run_bound_s(profile: Profile, stage_timeouts_s: Iterable[float]) -> float:
    """The run's bound from its stages' task timeouts: ``flow_timeout_s`` when the profile
    sets it, else every attempt of every stage plus Prefect's delays between them."""
    if profile.flow_timeout_s is not None:
        return profile.flow_timeout_s
    timeouts = list(stage_timeouts_s)
    return ATTEMPTS * sum(timeouts) + len(timeouts) * sum(RETRY_DELAYS_S)


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
