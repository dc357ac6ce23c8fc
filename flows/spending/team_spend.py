"""A run's part in its team's budget: the check at its start, the estimate before its first
TPU stage, each stage's metered spend once it ends (flows/core/spend_ledger.py says the
rule that makes the metered figure replace the estimate).

Where a team's spend is read: the ledger under the output root of each of its profiles (the
run's own, and each other member's that loads here; a member that does not load, e.g. a
GKE profile whose project is filled in elsewhere, is named as unread rather than guessed).
A bucket that does not exist yet holds no spend.

The run writes only to its own root, and only after its infra stage (on GKE the bucket may
not exist before it); infra and image hold no TPU, so nothing they spend goes unrecorded.
A stage that fails, is stopped or times out writes what its spend meters charged (over every
attempt); one no meter watched keeps its estimate: the month is never told it has more left
than it may.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from flows.backends import storage_for
from flows.config.errors import ProfileError
from flows.config.loading import load_profile
from flows.config.profile import Profile
from flows.config.spend import stage_estimates
from flows.config.teams import Team, Teams, load_teams
from flows.core.spend_ledger import LedgerEntry, append, month_of, now_iso, read_month
from flows.core.storage import Storage
from flows.core.team_budget import (
    Allowance,
    TeamMonth,
    grant,
    refusal,
    stage_spent,
    team_month,
)
from flows.run.result import StageReport


@dataclass(frozen=True)
class RunSpend:
    """Who a run's spend is charged to, and where it is written."""

    team: Team
    profile: str
    run: str
    run_name: str
    month: str
    root: str  # the run's own output root: its ledger entries go here
    estimate_mode: str  # the capacity mode estimates are priced at (the chain's priciest)
    metered_mode: str  # the mode the result's usd is priced at (the chain's first)
    key: str = ""  # the flow run's id: the spend meter's and the allowance's key


def output_root(profile: Profile) -> str:
    return profile.section.output_root()


def member_roots(team: Team, own: Profile | None = None) -> tuple[list[str], dict[str, str]]:
    """The distinct output roots of the team's profiles, and the members that did not load
    (name → why)."""
    roots = [output_root(own)] if own is not None else []
    unread: dict[str, str] = {}
    for name in team.profiles:
        if own is not None and name == own.name:
            continue
        try:
            roots.append(output_root(load_profile(name)))
        except ProfileError as exc:
            fields = ", ".join(sorted({i.field for i in exc.issues})[:3])
            unread[name] = (f"it does not load here ({fields}): set those fields in its file, "
                            "or in the environment as TPURL_SECTION__FIELD")
    return sorted(set(roots)), unread


def read_root(root: str, month: str, storage: Storage | None = None) -> list[LedgerEntry]:
    """The month's entries under one root; a bucket not created yet holds none."""
    storage = storage or storage_for(root)
    if not root.startswith("gs://"):
        return read_month(storage, root, month)
    from google.api_core.exceptions import NotFound

    try:
        return read_month(storage, root, month)
    except NotFound:
        return []


def read_team(team: Team, month: str, roots: list[str],
              read: Callable[[str, str], list[LedgerEntry]] = read_root) -> TeamMonth:
    return team_month(team.name, month, team.usd_per_month,
                      [e for root in roots for e in read(root, month)])


def start_check(profile: Profile, run: str, run_name: str, teams: Teams | None = None,
                now: datetime | None = None) -> RunSpend | None:
    """Before any side effect: refuse the run when its estimate exceeds what its team has
    left this month (ProfileError, the figures and the fix); else grant the run that
    remainder (the watch stops it there) and say where its spend is written. None: the
    profile is in no team."""
    teams = load_teams() if teams is None else teams
    team = teams.team_of(profile.name)
    if team is None:
        return None
    month = month_of(now or datetime.now(UTC))
    roots, _ = member_roots(team, profile)
    state = read_team(team, month, roots)
    estimate = sum(usd for usd, _ in stage_estimates(profile).values())
    if (issue := refusal(state, profile.name, estimate)) is not None:
        raise ProfileError(profile.name, [issue], header=f"run of profile {profile.name!r} "
                           f"refused: team {team.name}'s budget for {month}")
    grant(run, Allowance(team.name, month, state.left_usd))
    gke = profile.gke
    return RunSpend(team, profile.name, run or run_name, run_name, month, output_root(profile),
                    gke.priciest_mode if gke else "local",
                    gke.capacity_chain[0] if gke else "local", run)


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


def record_failed(spend: RunSpend, storage: Storage, stage: str,
                  usd_per_chip_hour: float) -> LedgerEntry | None:
    """A stage that failed, was stopped or timed out reports no result: what its spend
    meters charged (every attempt's) replaces its estimate. None: no meter ran for it (the
    rehearsal, or a stage that never reached the cluster), so its estimate keeps counting."""
    usd = stage_spent(spend.key, stage)
    if usd is None:
        return None
    hours = usd / usd_per_chip_hour if usd_per_chip_hour else 0.0
    return append(storage, spend.root, _entry(spend, stage, usd, hours, "metered",
                                              spend.metered_mode))


def record_metered(spend: RunSpend, storage: Storage, report: StageReport) -> LedgerEntry:
    """A stage's spend as the run result has it (held chip-hours at the mode's price): it
    replaces the stage's estimate."""
    return append(storage, spend.root, _entry(spend, report.stage, report.usd,
                                              report.chip_hours, "metered", spend.metered_mode))
