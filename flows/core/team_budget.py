"""A team's month: what its runs spent (the ledger, flows/core/spend_ledger.py), what is left,
whether a run may start, and how much the run may spend before it is stopped.

Why a run is checked again after its start: two runs of a team that start together each see
the month before the other's estimate is in it, so both may pass the start. Each then writes
its estimates and takes its place in the month's order, and at each TPU stage's start (and
from the spend watch) counts only the runs whose place is before its own (``admitted_usd``):
the run with the lower number created it before the other took its own, with its estimates
already written, so the later run always counts the earlier one, and the earlier one is never
stopped by the later. Of two runs that cannot both fit, the later is stopped before it holds
a TPU (or by the watch, once its own spend reaches what the earlier left), and the earlier
trains to the end.

The watch (flows/backends/gke/watch/spend.py) decides on every tick without reading a bucket:
the run's allowance lives in this process, keyed by the flow run, renewed at each stage's
start and by the watch's ``recheck`` at most every RECHECK_S, and the meter stops the stage
once the run's own spend reaches it, like ``gke.max_usd_per_run``.

Pure but for those registries: reading the ledger is the caller's (it knows the storage).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.core.failures import Diagnosis, FailureCategory
from flows.core.spend_ledger import LedgerEntry, final_spend, total_usd

REFUSED = Failure.CONFIG_TEAM_BUDGET
STOPPED = Failure.GKE_TEAM_BUDGET
TAKEN = Failure.RUN_TEAM_BUDGET
RECHECK_S = 300.0  # the watch reads the ledger again at most this often


@dataclass(frozen=True)
class TeamMonth:
    """One team's month as the ledger has it when read."""

    team: str
    month: str
    budget_usd: float
    entries: tuple[LedgerEntry, ...]
    order: Mapping[str, int] = field(default_factory=dict)  # run → its place in the month
    refused: Mapping[str, str] = field(default_factory=dict)  # object → why it is not counted

    @property
    def spent_usd(self) -> float:
        return total_usd(e for e in self.entries if e.team == self.team)

    @property
    def left_usd(self) -> float:
        return self.budget_usd - self.spent_usd

    def run_usd(self, run: str) -> float:
        """The run's own spend by the ledger's rule (its estimates of stages not ended)."""
        return total_usd(e for e in self.entries if e.team == self.team and e.run == run)

    def ahead_usd(self, run: str) -> float:
        """What the runs whose place is before ``run``'s spent (by the ledger's rule); a run
        without a place counts every other run."""
        mine = self.order.get(run)
        return sum(e.usd for e in final_spend(self.entries).values()
                   if e.team == self.team and e.run != run
                   and (mine is None or self.order.get(e.run, mine) < mine))

    def admitted_usd(self, run: str) -> float:
        """What ``run`` may spend in all: the budget less the runs ahead of it."""
        return self.budget_usd - self.ahead_usd(run)


def team_month(team: str, month: str, budget_usd: float, entries: Iterable[LedgerEntry],
               order: Mapping[str, int] | None = None,
               refused: Mapping[str, str] | None = None) -> TeamMonth:
    return TeamMonth(team, month, budget_usd, tuple(e for e in entries if e.team == team),
                     dict(order or {}), dict(refused or {}))


def stage_refusal(month: TeamMonth, run: str, stage: str) -> Diagnosis | None:
    """At a TPU stage's start: the run's own spend (its estimates of the stages to come
    included) does not fit in what the runs ahead of it left. None: it does."""
    own, admitted = month.run_usd(run), month.admitted_usd(run)
    if own <= admitted + 0.005:
        return None
    team = month.team
    return Diagnosis(
        FailureCategory.BUDGET,
        f"stage {stage} not started: this run counts ${own:,.2f} (spent, and estimated for "
        f"the stages to come) and team {team}'s runs that started before it this month left "
        f"${max(admitted, 0.0):,.2f} of its ${month.budget_usd:,.2f} for {month.month}",
        f"    the team's month is in the spend ledger: tpurl costs {team}",
        f"nothing of this stage was started; checkpoints already written are kept and the "
        f"next run resumes from the newest. Wait for the runs before it to end (their spent "
        f"figure replaces their estimate) or for the next month (UTC), raise "
        f"teams.{team}.usd_per_month in the teams file (deployments/teams.yaml), or lower the "
        "work (train.args.num_batches)", code=TAKEN)


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
# run → how its allowance is read again from the ledger, and when it last was (monotonic)
_RECHECK: dict[str, tuple[Callable[[], Allowance], float | None]] = {}
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
        _RECHECK.pop(run, None)


def rechecked_by(run: str, read: Callable[[], Allowance]) -> None:
    """How the watch renews the run's allowance from the ledger (``recheck``)."""
    with _LOCK:
        _RECHECK[run] = (read, None)  # the watch's first look sets the time on its clock


def recheck(run: str, now: float) -> Allowance | None:
    """The run's allowance, read again from the ledger when RECHECK_S have passed since the
    last read; a ledger that cannot be read keeps the last allowance (the stage's start read
    it, and the next stage's start reads it again, refusing if it cannot)."""
    with _LOCK:
        read, last = _RECHECK.get(run, (None, now))
        if read is None or last is None or now - last < RECHECK_S:
            if read is not None and last is None:
                _RECHECK[run] = (read, now)
            return _GRANTED.get(run)
        _RECHECK[run] = (read, now)
    try:
        fresh = read()
    except Exception:
        return allowance_for(run)
    grant(run, fresh)
    return fresh


def add_stage_spend(run: str, stage: str, usd: float) -> None:
    """The spend meter's charge, kept per stage for the ledger of a stage that fails."""
    with _LOCK:
        _STAGE_SPENT[run, stage] = _STAGE_SPENT.get((run, stage), 0.0) + usd


def stage_spent(run: str, stage: str) -> float | None:
    """What the meters of the run's stage charged; None: no meter ran for it."""
    with _LOCK:
        return _STAGE_SPENT.get((run, stage))
