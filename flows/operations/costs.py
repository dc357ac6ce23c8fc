"""`tpurl costs [TEAM|PROFILE] [--month YYYY-MM] [--json]`: a team's month from its spend
ledger, read-only.

The ledger is the team's ``ledger_root``; what it holds that is refused (negative or
non-finite dollars, another team's name, an entry not filed where it says) is named, never
counted, and a ledger that cannot be read is said so (exit 1), never shown as an empty month.

Spend by team, profile, stage and capacity mode, each (run, stage) counted once by the
ledger's rule (flows/core/spend_ledger.py: metered replaces the estimate; a stage still
running counts its estimate, shown as "in flight"), and dollars per promoted model
and per evaluation where the month has them: a profile's month spend divided by the models
its promotion history promoted that month, and by its runs that evaluated (a metered
evaluate stage). Why divide the profile's whole spend: the runs that were rejected paid for
the one promoted as much as it did itself.

Building the summary is pure (``summarize``); reading the ledgers and the promotion
histories is the command's.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from flows.backends import storage_for
from flows.config.errors import ProfileError
from flows.config.loading import load_profile
from flows.config.profile import Profile
from flows.config.teams import Team, Teams, load_teams
from flows.core.promotion_store import read_history
from flows.core.spend_ledger import LedgerEntry, final_spend, month_of
from flows.spending.team_spend import LedgerUnreadable, read_team

MONTH = re.compile(r"\d{4}-(0[1-9]|1[0-2])")


@dataclass
class TeamCosts:
    """One team's month, summed by the ledger's rule."""

    team: str
    month: str
    budget_usd: float
    spent_usd: float = 0.0
    in_flight_usd: float = 0.0  # of spent: stages counted at their estimate
    chip_hours: float = 0.0
    runs: int = 0
    by_profile: dict[str, float] = field(default_factory=dict)
    by_stage: dict[str, float] = field(default_factory=dict)
    by_capacity: dict[str, float] = field(default_factory=dict)
    per_promoted: dict[str, dict[str, float]] = field(default_factory=dict)
    per_evaluation: dict[str, dict[str, float]] = field(default_factory=dict)
    unread: dict[str, str] = field(default_factory=dict)  # ledger → why it was not read
    refused: dict[str, str] = field(default_factory=dict)  # ledger object → why not counted
    # per run of the shown profiles: its dollars, and (profile, run name) to name it by
    by_run: dict[str, float] = field(default_factory=dict)
    run_labels: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def left_usd(self) -> float:
        return self.budget_usd - self.spent_usd

    def as_dict(self) -> dict[str, Any]:
        return {"team": self.team, "month": self.month, "budget_usd": self.budget_usd,
                "spent_usd": round(self.spent_usd, 2), "left_usd": round(self.left_usd, 2),
                "in_flight_usd": round(self.in_flight_usd, 2),
                "chip_hours": round(self.chip_hours, 3), "runs": self.runs,
                "by_profile": _rounded(self.by_profile), "by_stage": _rounded(self.by_stage),
                "by_capacity": _rounded(self.by_capacity),
                "per_promoted_model": self.per_promoted, "per_evaluation": self.per_evaluation,
                "unread": self.unread, "refused": self.refused, "complete": not self.unread}


def _rounded(values: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 2) for k, v in sorted(values.items())}


def summarize(team: Team, month: str, entries: list[LedgerEntry], promoted: dict[str, int],
              profile: str | None = None) -> TeamCosts:
    """Pure: the team's month (or one member's, ``profile``) from its ledger entries and the
    number of models each member promoted that month."""
    costs = TeamCosts(team.name, month, team.usd_per_month)
    counted = final_spend(e for e in entries if e.team == team.name and e.month == month)
    evaluated: dict[str, set[str]] = defaultdict(set)
    runs: set[str] = set()
    for entry in counted.values():
        costs.spent_usd += entry.usd  # the team's month, whichever member is shown
        if profile is not None and entry.profile != profile:
            continue
        runs.add(entry.run)
        costs.by_run[entry.run] = costs.by_run.get(entry.run, 0.0) + entry.usd
        costs.run_labels[entry.run] = (entry.profile, entry.run_name or entry.run)
        costs.chip_hours += entry.chip_hours
        costs.in_flight_usd += entry.usd if entry.kind == "estimate" else 0.0
        for table, key in ((costs.by_profile, entry.profile), (costs.by_stage, entry.stage),
                           (costs.by_capacity, entry.capacity)):
            table[key] = table.get(key, 0.0) + entry.usd
        if entry.stage == "evaluate" and entry.kind == "metered":
            evaluated[entry.profile].add(entry.run)
    costs.runs = len(runs)
    for name, usd in costs.by_profile.items():
        if count := promoted.get(name, 0):
            costs.per_promoted[name] = {"models": count, "usd_each": round(usd / count, 2)}
        if count := len(evaluated.get(name, ())):
            costs.per_evaluation[name] = {"evaluations": count, "usd_each": round(usd / count, 2)}
    return costs


def render(costs: TeamCosts, profile: str | None = None) -> list[str]:
    """The month as lines: the team's total against its budget, then each breakdown."""
    lines = [f"team {costs.team} · {costs.month} · budget ${costs.budget_usd:,.2f}: "
             + _headline(costs)]
    if profile is not None:
        lines.append(f"profile {profile}: ${sum(costs.by_profile.values()):,.2f} in "
                     f"{costs.runs} run(s), {costs.chip_hours:,.1f} chip-hours")
    else:
        lines.append(f"  {costs.runs} run(s), {costs.chip_hours:,.1f} chip-hours")
    if costs.in_flight_usd:
        lines.append(f"  of it ${costs.in_flight_usd:,.2f} at the plan's estimate (stages "
                     "running, or whose run ended before their spend was written)")
    for title, table in (("profile", costs.by_profile), ("stage", costs.by_stage),
                         ("capacity", costs.by_capacity)):
        if table:
            lines.append(f"  by {title}: " + ", ".join(f"{k} ${v:,.2f}"
                                                       for k, v in sorted(table.items())))
    for name, figures in sorted(costs.per_promoted.items()):
        lines.append(f"  {name}: ${figures['usd_each']:,.2f} per promoted model "
                     f"({figures['models']:g} promoted)")
    for name, figures in sorted(costs.per_evaluation.items()):
        lines.append(f"  {name}: ${figures['usd_each']:,.2f} per evaluation "
                     f"({figures['evaluations']:g} evaluated)")
    for name, why in sorted(costs.unread.items()):
        lines.append(f"  not read: the ledger {name} ({why})")
    for name, why in sorted(costs.refused.items()):
        lines.append(f"  refused, not counted: {name} ({why})")
    return lines


def _headline(costs: TeamCosts) -> str:
    """Spent and left, when the ledger was read: an unread ledger may hold any spend, so the
    figures are then unknown, never $0.00."""
    if costs.unread:
        return "spent unknown: the team's ledger was not read (below)"
    return f"spent ${costs.spent_usd:,.2f}, left ${costs.left_usd:,.2f}"


def promoted_in(name: str, month: str, own: Profile | None = None) -> int:
    """Models the profile's promotion history promoted in ``month`` (0 when unreadable);
    ``own``: the running profile as the run loaded it (its overrides may move its root)."""
    try:
        profile = own if own is not None and own.name == name else load_profile(name)
    except ProfileError:
        return 0
    storage = storage_for(profile.section.output_root())
    try:
        history = read_history(storage, profile)
    except _storage_errors():  # no credentials or access: no promotion counted, not a traceback
        return 0
    return sum(1 for m in history if m.kind == "promotion" and m.promoted_at.startswith(month))


def team_costs(team: Team, month: str, profile: str | None = None,
               own: Profile | None = None) -> TeamCosts:
    """Read the team's ledger and its members' promotion histories (read-only) and
    summarize; ``own``: a running member's profile as its run loaded it (its promotion
    history is under its root)."""
    try:
        state = read_team(team, month)
    except LedgerUnreadable as exc:
        costs = summarize(team, month, [], {}, profile)
        costs.unread = {team.ledger_root or f"teams.{team.name}.ledger_root": str(exc)}
        return costs
    promoted = {name: promoted_in(name, month, own) for name in team.profiles}
    costs = summarize(team, month, list(state.entries), promoted, profile)
    costs.refused = dict(state.refused)
    return costs


def _storage_errors() -> tuple[type[BaseException], ...]:
    """What reading an output root raises when the storage cannot be read (a disk's OSError;
    with the cloud libraries, google.auth's missing credentials and the API's refusals)."""
    errors: tuple[type[BaseException], ...] = (OSError,)
    try:
        from google.api_core.exceptions import GoogleAPIError
        from google.auth.exceptions import GoogleAuthError
    except ImportError:
        return errors
    return (*errors, GoogleAuthError, GoogleAPIError)


def chosen(teams: Teams, target: str | None) -> tuple[list[Team], str | None] | str:
    """The teams to show and the profile to narrow to, or why ``target`` names neither."""
    if target is None:
        return list(teams.teams.values()), None
    if (team := teams.named(target)) is not None:
        return [team], None
    if (team := teams.team_of(target)) is not None:
        return [team], target
    known = ", ".join(sorted(teams.teams)) or "none"
    return (f"{target!r} is neither a team of the teams file (teams: {known}) nor a profile "
            "of one; name a team, or add the profile to a team in deployments/teams.yaml")


def costs_command(target: str | None, month: str | None, as_json: bool) -> int:
    """Print the month; 2 on a bad argument or teams file (nothing read), 1 when a team's
    ledger could not be read."""
    if month is not None and not MONTH.fullmatch(month):
        print(f"error: --month: {month!r} is not a month; give it as YYYY-MM (e.g. 2026-12)",
              file=sys.stderr)
        return 2
    try:
        teams = load_teams()
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    picked = chosen(teams, target)
    if isinstance(picked, str):
        print(f"error: {picked}", file=sys.stderr)
        return 2
    month = month or month_of(datetime.now(UTC))
    shown = [team_costs(team, month, picked[1]) for team in picked[0]]
    if as_json:
        print(json.dumps([c.as_dict() for c in shown], indent=2))
    else:
        print("\n\n".join("\n".join(render(c, picked[1])) for c in shown)
              or "no teams: the teams file (deployments/teams.yaml) declares none")
    return 1 if any(c.unread for c in shown) else 0
