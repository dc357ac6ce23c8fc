"""A team's month: what its runs spent (the ledger, flows/core/spend_ledger.py), what is left,
whether a run may start, and how much the run may spend before it is stopped.

Why the allowance is fixed at the run's start: the watch that stops a stage
(flows/backends/gke/watch/spend.py) must decide on every tick without reading a bucket, so
the run is granted what was left of the month when it started, and the meter stops the
stage once the run's own spend reaches it, like ``gke.max_usd_per_run``. Runs of one team
that start together may each be granted the same remainder; their estimates are in the
ledger from before their first TPU stage, so a run starting later sees them. The allowance
lives in this process, keyed by the flow run, where the stages run.

Pure but for that registry: reading the ledger is the caller's (it knows the storage).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from flows.common.issues import Issue
from flows.core.spend_ledger import LedgerEntry, total_usd

REFUSED = "config/team-budget"
STOPPED = "gke/team-budget"


@dataclass(frozen=True)
class TeamMonth:
    """One team's month as the ledger has it when read."""

    team: str
    month: str
    budget_usd: float
    entries: tuple[LedgerEntry, ...]

    @property
    def spent_usd(self) -> float:
        return total_usd(e for e in self.entries if e.team == self.team)

    @property
    def left_usd(self) -> float:
        return self.budget_usd - self.spent_usd


def team_month(team: str, month: str, budget_usd: float,
               entries: Iterable[LedgerEntry]) -> TeamMonth:
    return TeamMonth(team, month, budget_usd, tuple(e for e in entries if e.team == team))


def refusal(month: TeamMonth, profile: str, estimate_usd: float) -> Issue | None:
    """The run may not start when its estimate exceeds what is left: the figures, and the
    three ways out. None: it may."""
    left = month.left_usd
    if estimate_usd <= left:
        return None
    return Issue(
        f"teams.{month.team}.usd_per_month",
        f"a run of {profile} is estimated at ${estimate_usd:,.2f}, and team {month.team} has "
        f"${max(left, 0.0):,.2f} left of its ${month.budget_usd:,.2f} for {month.month} "
        f"(spent ${month.spent_usd:,.2f}, in flight counted at their estimates); nothing "
        "was started",
        f"raise teams.{month.team}.usd_per_month in the teams file (deployments/teams.yaml) "
        f"to at least {month.spent_usd + estimate_usd:.2f}, or wait for the next month (UTC), "
        "or lower the run's size (train.args.num_batches, gke.estimated_hours)", REFUSED)


@dataclass(frozen=True)
class Allowance:
    """What a run may spend of its team's month: what was left when it started."""

    team: str
    month: str
    left_usd: float


_GRANTED: dict[str, Allowance] = {}
# (run, stage) → dollars its meters charged, over every attempt and resubmission: what a
# stage that fails spent, which its result never reports
_STAGE_SPENT: dict[tuple[str, str], float] = {}
_LOCK = threading.Lock()


def grant(run: str, allowance: Allowance) -> None:
    with _LOCK:
        _GRANTED[run] = allowance


def allowance_for(run: str) -> Allowance | None:
    with _LOCK:
        return _GRANTED.get(run)


def release(run: str) -> None:
    with _LOCK:
        _GRANTED.pop(run, None)


def add_stage_spend(run: str, stage: str, usd: float) -> None:
    """The spend meter's charge, kept per stage for the ledger of a stage that fails."""
    with _LOCK:
        _STAGE_SPENT[run, stage] = _STAGE_SPENT.get((run, stage), 0.0) + usd


def stage_spent(run: str, stage: str) -> float | None:
    """What the meters of the run's stage charged; None: no meter ran for it."""
    with _LOCK:
        return _STAGE_SPENT.get((run, stage))
