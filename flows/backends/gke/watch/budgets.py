"""The watch budgets of one GKE stage, from the profile: how long a JobSet may queue, run,
stay unschedulable, ride out API errors, and how often it is resubmitted after a preemption.

Pure and free of the Kubernetes client on purpose: the flow's task timeouts
(flows/stages/timeouts.py) and the plan read them in every run, the rehearsal's included,
and importing the watch would import the kubernetes package (1.5 s) for nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from flows.config.profile import Profile
from flows.config.spend import ON_SLICE
from flows.config.watch_budgets import GkeWatchBudgets


def _configured(field_name: str) -> float:
    """The default of a budget the profile may set (flows/config/watch_budgets.py, where
    each default has its reason): one place, so the watch and the profile cannot differ."""
    return float(GkeWatchBudgets.model_fields[field_name].default)


@dataclass(frozen=True)
class Budgets:
    """Every watch budget with its default: these fields' here, the profile-settable
    ones' in flows/config/watch_budgets.py (read through ``_configured``)."""

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
    iam_propagation_s: float = _configured("iam_propagation_s")  # a 403 on tpurl's grant


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
