"""How long each GKE stage can wait on the cluster before it gives up, Prefect's retries
included: pure, for the plan (a stockout waited 30 min per attempt, about 90 with
two retries, and nothing said so).

Which verdicts Prefect retries decides the arithmetic (flows/core/failures.py RETRYABLE):
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

from collections.abc import Sequence
from dataclasses import dataclass

from flows.backends.gke.watch.budgets import Budgets


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
    """``jobs``: the JobSets the stage runs one after the other (evaluate: base, trained),
    each with its own preemption budget."""
    jobsets = jobs * (budgets.preemptions + 1)
    if budgets.waits_for_capacity:  # flex-start: queue-timeout, which is not retried
        return StageWaits(stage, 1, 2 * budgets.queue_s, 0.0, jobsets, budgets.run_s)
    return StageWaits(stage, 1 + len(retry_delays_s), budgets.queue_s + budgets.schedule_s,
                      float(sum(retry_delays_s)), jobsets, budgets.run_s)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def render_waits(waits: list[StageWaits]) -> list[str]:
    lines = ["Worst-case waits on the cluster (Prefect's retries included; the gke.*_budget_s "
             "fields set them):"]
    for w in waits:
        how = (f"{w.attempts} attempt(s) × {_hours(w.per_attempt_s)} queued and waiting for "
               "nodes" + (f" + {w.retry_delays_s:.0f} s between retries" if w.retry_delays_s
                          else ""))
        lines.append(f"  {w.stage}: gives up after at most {_hours(w.give_up_after_s)} if "
                     f"nothing runs ({how}); at most {w.jobsets} JobSet(s), each running "
                     f"at most {_hours(w.run_s)}")
    return lines
