"""A run's part in its team's budget: the check and the estimate at its start, the check again
at each TPU stage's start, each stage's metered spend once it ends (flows/core/spend_ledger.py
says the rule that makes the metered figure replace the estimate; flows/core/team_budget.py
why the checks after the start count only the runs ahead).

Where a team's spend is: its ``ledger_root`` (the teams file's), one place every member's
runs write and read, which no training pod can write (docs/decisions/
0023-ledger-only-the-flow-writes.md). A team without one, or one inside the output root of
the run's profile or of another of the teams file, refuses the run before any side effect;
so does a ledger that cannot be read, naming it: a month that cannot be read is never taken
for an empty one. A ``file://`` directory not
made yet holds no spend (the first entry makes it); a bucket that does not exist is refused.

The run writes its estimates and takes its place in the month's order in ``prepare``, before
any other side effect, so a run starting a moment later sees them. A stage that fails, is
stopped or times out writes what its spend meters charged (over every attempt); one no meter
watched keeps its estimate: the month is never told it has more left than it may. Stages the
run never started once it ends early are written at $0, so its estimates stop counting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from flows.backends import storage_for
from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.config.errors import ProfileError
from flows.config.loading import load_profile
from flows.config.profile import Profile
from flows.config.spend import stage_estimates
from flows.config.teams import Team, Teams, load_teams
from flows.core.failures import Diagnosis, FailureCategory, StageFailed
from flows.core.spend_ledger import (
    LedgerEntry,
    MonthLedger,
    append,
    month_of,
    now_iso,
    read_month,
    take_place,
)
from flows.core.storage import Storage
from flows.core.team_budget import (
    Allowance,
    TeamMonth,
    grant,
    rechecked_by,
    refusal,
    stage_refusal,
    stage_spent,
    team_month,
)
from flows.run.result import StageReport

LEDGER = Failure.CONFIG_TEAM_LEDGER


@dataclass(frozen=True)
class RunSpend:
    """Who a run's spend is charged to, and where it is written."""

    team: Team
    profile: str
    run: str
    run_name: str
    month: str
    root: str  # the team's ledger root: the run's entries go here
    estimate_mode: str  # the capacity mode estimates are priced at (the chain's priciest)
    metered_mode: str  # the mode the result's usd is priced at (the chain's first)
    key: str = ""  # the flow run's id: the spend meter's and the allowance's key
    stages: tuple[str, ...] = ()  # the stages estimated: each is checked at its start
    started: set[str] = field(default_factory=set, compare=False)


class LedgerUnreadable(RuntimeError):
    """The team's ledger could not be read: the month is unknown, never taken as empty."""


def output_root(profile: Profile) -> str:
    return profile.section.output_root()


def ledger_issue(team: Team, profile: Profile, teams: Teams | None = None) -> Issue | None:
    """The team has no ledger root, or one a training pod could write: at or inside the run's
    output root, or that of any profile of the teams file that loads here. None: as far as
    the roots tell, the ledger is the flow's alone (the grants on it are the operator's)."""
    field_name = f"teams.{team.name}.ledger_root"
    fix = ("set ledger_root in the teams file (deployments/teams.yaml) to a gs://BUCKET only "
           "the flow's identity writes (no profile's bucket), or file:///PATH for local runs")
    root = team.ledger_root
    if root is None:
        return Issue(field_name, f"team {team.name} has no ledger for its spend, so its "
                     "budget cannot be enforced; nothing was started", fix, LEDGER)
    for name, outputs in _output_roots(profile, teams):
        if root == outputs or root.startswith(outputs + "/") or outputs.startswith(root + "/"):
            return Issue(field_name, f"{root} shares {name}'s output root {outputs}, which "
                         "its training pods write; nothing was started", fix, LEDGER)
    return None


def _output_roots(profile: Profile, teams: Teams | None) -> list[tuple[str, str]]:
    """The run's output root, then those of the teams file's other profiles that load here
    (one whose project or bucket is given elsewhere cannot be told, and is left out)."""
    roots = [(profile.name, output_root(profile).rstrip("/"))]
    names = sorted({n for t in (teams.teams.values() if teams else ()) for n in t.profiles})
    for name in names:
        if name == profile.name:
            continue
        try:
            roots.append((name, output_root(load_profile(name)).rstrip("/")))
        except ProfileError:
            continue
    return roots


def read_ledger(root: str, team: str, month: str,
                storage: Storage | None = None) -> MonthLedger:
    """The team's month under its ledger root; LedgerUnreadable when it cannot be read (a
    bucket that does not exist, no permission, no network)."""
    storage = storage or storage_for(root)
    try:
        return read_month(storage, root, team, month)
    except Exception as exc:
        raise LedgerUnreadable(f"team {team}'s ledger {root} could not be read: "
                               f"{type(exc).__name__}: {str(exc)[:300]}") from exc


def read_team(team: Team, month: str,
              read: Callable[[str, str, str], MonthLedger] = read_ledger) -> TeamMonth:
    if team.ledger_root is None:
        raise LedgerUnreadable(f"team {team.name} has no ledger_root")
    ledger = read(team.ledger_root, team.name, month)
    return team_month(team.name, month, team.usd_per_month, ledger.entries, ledger.order,
                      ledger.refused)


_RUNS: dict[str, RunSpend] = {}  # flow run → its spend, for the checks at its stages' starts
_LOCK = threading.Lock()


def start_check(profile: Profile, run: str, run_name: str, teams: Teams | None = None,
                now: datetime | None = None) -> RunSpend | None:
    """Before any other side effect: ``plan_start``, then ``reserve``. None: the profile is
    in no team."""
    spend = plan_start(profile, run, run_name, teams, now)
    return None if spend is None else reserve(spend, profile)


def plan_start(profile: Profile, run: str, run_name: str, teams: Teams | None = None,
               now: datetime | None = None) -> RunSpend | None:
    """Reads only: refuse the run when its team has no ledger of the flow's own, the ledger
    cannot be read, or its estimate exceeds what the team has left this month (ProfileError,
    the figures and the fix); else who it charges and where. None: in no team."""
    teams = load_teams() if teams is None else teams
    team = teams.team_of(profile.name)
    if team is None:
        return None
    if (issue := ledger_issue(team, profile, teams)) is not None:
        raise ProfileError(profile.name, [issue], header=_header(profile, team))
    assert team.ledger_root is not None
    month = month_of(now or datetime.now(UTC))
    state = _read_or_refuse(team, month, profile)
    estimates = stage_estimates(profile)
    if (issue := refusal(state, profile.name, sum(u for u, _ in estimates.values()))):
        raise ProfileError(profile.name, [issue], header=f"{_header(profile, team)} for {month}")
    gke = profile.gke
    return RunSpend(team, profile.name, run or run_name, run_name, month, team.ledger_root,
                    gke.priciest_mode if gke else "local",
                    gke.capacity_chain[0] if gke else "local", run, tuple(estimates))


def reserve(spend: RunSpend, profile: Profile) -> RunSpend:
    """Write the run's estimates, take its place in the month's order, and read the month
    again: refused (its estimates then written at $0) when the runs ahead of it leave too
    little; else granted what they left (the watch stops it there)."""
    storage = storage_for(spend.root)
    record_estimates(spend, profile, storage)
    take_place(storage, spend.root, spend.team.name, spend.month, spend.run)
    state = _read_or_refuse(spend.team, spend.month, profile)
    if (issue := refusal(_ahead_view(state, spend.run), profile.name,
                         state.run_usd(spend.run))) is not None:
        settle(spend, storage)
        raise ProfileError(profile.name, [issue], header=f"{_header(profile, spend.team)} "
                           f"for {spend.month}: runs that started at the same time came first")
    with _LOCK:
        _RUNS[spend.key] = spend
    _grant(spend, state)
    return spend


def _header(profile: Profile, team: Team) -> str:
    return f"run of profile {profile.name!r} refused: team {team.name}'s budget"


def _ahead_view(state: TeamMonth, run: str) -> TeamMonth:
    """The month as the runs ahead of ``run`` left it: what the start refusal compares."""
    return team_month(state.team, state.month, state.budget_usd,
                      [e for e in state.entries if e.run != run
                       and state.order.get(e.run, state.order.get(run, 0) + 1)
                       < state.order.get(run, 0)], state.order)


def _read_or_refuse(team: Team, month: str, profile: Profile) -> TeamMonth:
    try:
        return read_team(team, month)
    except LedgerUnreadable as exc:
        raise ProfileError(profile.name, [Issue(
            f"teams.{team.name}.ledger_root", f"{exc}; nothing was started",
            "grant the flow's identity read and create on that bucket (roles/storage."
            "objectViewer and roles/storage.objectCreator), create the bucket, or correct "
            "ledger_root in the teams file (deployments/teams.yaml)", LEDGER)],
            header=_header(profile, team)) from None


def _grant(spend: RunSpend, state: TeamMonth) -> None:
    """What the runs ahead left the run, and how the watch reads it again."""
    grant(spend.key, Allowance(spend.team.name, spend.month, state.admitted_usd(spend.run)))
    rechecked_by(spend.key, lambda: Allowance(
        spend.team.name, spend.month, read_team(spend.team, spend.month).admitted_usd(
            spend.run)))


def stage_check(key: str, stage: str) -> None:
    """At a TPU stage's start: read the month again; StageFailed (and the stages not
    started written at $0) when the runs ahead of this one leave too little, or when the
    ledger cannot be read. Nothing for a run in no team or a stage not estimated."""
    with _LOCK:
        spend = _RUNS.get(key)
    if spend is None or stage not in spend.stages:
        return
    try:
        state = read_team(spend.team, spend.month)
    except LedgerUnreadable as exc:
        raise StageFailed(stage, Diagnosis(
            FailureCategory.BUDGET, f"stage {stage} not started: {exc}",
            "    the run's place in its team's month cannot be checked",
            "grant the flow's identity read on the ledger (roles/storage.objectViewer), or "
            "correct ledger_root in the teams file (deployments/teams.yaml), then run again",
            code=LEDGER)) from None
    if (stop := stage_refusal(state, spend.run, stage)) is not None:
        settle(spend, storage_for(spend.root))
        raise StageFailed(stage, stop)
    spend.started.add(stage)
    _grant(spend, state)


def _entry(spend: RunSpend, stage: str, usd: float, chip_hours: float, kind: str,
           mode: str) -> LedgerEntry:
    return LedgerEntry.model_validate({
        "team": spend.team.name, "profile": spend.profile, "run": spend.run,
        "stage": stage, "capacity": mode, "usd": round(usd, 4),
        "chip_hours": round(chip_hours, 4), "kind": kind, "time": now_iso(),
        "month": spend.month, "run_name": spend.run_name})


def record_estimates(spend: RunSpend, profile: Profile, storage: Storage) -> list[LedgerEntry]:
    """The plan's estimate of each TPU stage, before the first of them runs."""
    return [append(storage, spend.root, _entry(spend, stage, usd, hours, "estimate",
                                               spend.estimate_mode))
            for stage, (usd, hours) in stage_estimates(profile).items()]


def settle(spend: RunSpend, storage: Storage) -> list[LedgerEntry]:
    """The run ends early: each estimated stage it never started spent $0."""
    written = [append(storage, spend.root, _entry(spend, stage, 0.0, 0.0, "metered",
                                                  spend.metered_mode))
               for stage in spend.stages if stage not in spend.started]
    spend.started.update(spend.stages)
    return written


def record_failed(spend: RunSpend, storage: Storage, stage: str,
                  usd_per_chip_hour: float) -> LedgerEntry | None:
    """A stage that failed, was stopped or timed out reports no result: what its spend
    meters charged (every attempt's) replaces its estimate, and the stages the run now never
    starts are written at $0. None: no meter ran for it (the rehearsal, or a stage that never
    reached the cluster), so its estimate keeps counting."""
    usd = stage_spent(spend.key, stage)
    spend.started.add(stage)  # its meters, or its estimate, say what it spent
    settle(spend, storage)
    if usd is None:
        return None
    hours = usd / usd_per_chip_hour if usd_per_chip_hour else 0.0
    return append(storage, spend.root, _entry(spend, stage, usd, hours, "metered",
                                              spend.metered_mode))


def record_metered(spend: RunSpend, storage: Storage, report: StageReport) -> LedgerEntry:
    """A stage's spend as the run result has it (held chip-hours at the mode's price): it
    replaces the stage's estimate."""
    spend.started.add(report.stage)
    return append(storage, spend.root, _entry(spend, report.stage, report.usd,
                                              report.chip_hours, "metered", spend.metered_mode))
