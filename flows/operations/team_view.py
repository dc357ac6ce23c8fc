"""One view per team: a markdown artifact under a key of its own (``team-<name>``), written at
the end of each run of a member profile, so the Artifacts page of the Prefect UI shows a
team's month, its runs and each member's champion in one place, with every earlier version
in the key's history.

Why a keyed artifact and not a page of its own: the UI already lists keyed artifacts across
runs and keeps each key's versions; the view needs no server of its own, and each run adds
a version as it ends. Why here and not on the run page module: the spend is the one
``tpurl costs`` computes (flows/operations/costs.py ``team_costs``), read the same way, so
the view and the command never disagree.

A run that fails in a stage writes the view too (its spend so far, as the ledger counts it);
one stopped by a signal or its time bound does not: it is ending, and the next run's view
shows it. Building the markdown is pure (``team_markdown``, ``run_cost_line``); reading the
ledgers, pointers and run states and writing the artifacts is ``publish_team_view``'s,
best-effort: a view that cannot be written logs a warning and never fails the run.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from uuid import UUID

from flows.backends import storage_for
from flows.config.errors import ProfileError
from flows.config.loading import load_profile
from flows.config.profile import Profile
from flows.config.teams import Team
from flows.core.promotion import PromotedModel
from flows.core.promotion_store import pointer_uris, read_promoted
from flows.health.holds import held_runs
from flows.operations.costs import TeamCosts, team_costs
from flows.runpage import quiet_artifacts as quiet
from flows.runpage.markdown_text import md_code, md_text
from flows.runpage.promotion import pointer_recipe
from flows.runpage.recipe import recipe_label

log = logging.getLogger(__name__)

KEY_PREFIX = "team-"
# prefect 3.9.1 types/names.py ArtifactKey: LOWERCASE_LETTERS_NUMBERS_AND_DASHES_ONLY_REGEX
ARTIFACT_KEY = re.compile(r"^[a-z0-9-]*$")


def team_key(name: str) -> str:
    """The team's artifact key: ``team-`` and the name in lowercase ASCII letters, digits
    and dashes. A name that had to change (case, spaces, ``_``, letters outside ASCII) gets
    six hex digits of its own digest, so two teams whose names change alike (``Lab A``,
    ``lab-a``) never share a key. Pure."""
    words = re.findall(r"[a-z0-9]+", name.lower())
    slug = "-".join(words)
    if slug == name:
        return KEY_PREFIX + slug
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return KEY_PREFIX + (f"{slug}-{digest}" if slug else digest)


@dataclass(frozen=True)
class Champion:
    """A member profile's promoted model as its pointer says, or why there is none shown."""

    profile: str
    model: PromotedModel | None = None
    pointer: str = ""  # where the pointer lives
    problem: str = ""  # why it was not read (the profile does not load, the pointer is damaged)
    # runs whose promotion the training sentinel holds: (run, detectors), oldest first
    held: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass
class TeamView:
    """What the view shows: the month's spend, the runs' states and each member's champion."""

    costs: TeamCosts
    profiles: tuple[str, ...]
    statuses: dict[str, str] = field(default_factory=dict)  # run id → state name
    champions: list[Champion] = field(default_factory=list)
    this_run: str = ""  # the run id that wrote this version
    # member profile → its newest measured throughput (flows/core/throughput.py), as a line
    throughput: dict[str, str] = field(default_factory=dict)


def _money(usd: float) -> str:
    return f"${usd:,.2f}"


def _cell(value: str) -> str:
    return md_text(value) or " "


def team_markdown(view: TeamView) -> str:
    """The view as markdown: spend against the budget, by profile and stage, the month's
    runs (newest first by name), then each member's champion and its lineage. Pure."""
    c = view.costs
    lines = [f"### Team {md_text(c.team)} · {c.month}", "",
             f"Budget {_money(c.budget_usd)} · spent {_money(c.spent_usd)} · "
             f"left {_money(c.left_usd)}" + (f" (of it {_money(c.in_flight_usd)} at the plan's "
                                             "estimate)" if c.in_flight_usd else ""), ""]
    for title, table in (("profile", c.by_profile), ("stage", c.by_stage)):
        if table:
            lines += [f"| {title} | spent |", "| --- | ---: |"]
            lines += [f"| {_cell(k)} | {_money(v)} |" for k, v in sorted(table.items())]
            lines.append("")
    for name, why in sorted(c.unread.items()):
        lines.append(f"- not read: the ledger {md_text(name)} ({md_text(why)}); the month "
                     "above is unknown")
    for name, why in sorted(c.refused.items()):
        lines.append(f"- refused, not counted: {md_text(name)} ({md_text(why)})")
    lines += [f"#### Runs of {c.month}", ""]
    if c.by_run:
        lines += ["| profile | run | status | cost |", "| --- | --- | --- | ---: |"]
        ordered = sorted(c.by_run, key=lambda r: c.run_labels.get(r, ("", r))[1], reverse=True)
        for run in ordered:
            profile, name = c.run_labels.get(run, ("", run))
            status = view.statuses.get(run, "unknown")
            mark = " (this run)" if run == view.this_run else ""
            lines.append(f"| {_cell(profile)} | {_cell(name)}{mark} | {_cell(status)} | "
                         f"{_money(c.by_run[run])} |")
    else:
        lines.append("No run has spent this month yet.")
    if view.throughput:
        lines += ["", "#### Throughput (each member's newest measured run)", ""]
        lines += [f"- **{md_text(name)}**: {md_text(line)}"
                  for name, line in sorted(view.throughput.items())]
    lines += ["", "#### Champions", ""]
    for champion in view.champions:
        lines += champion_lines(champion)
    return "\n".join(lines) + "\n"


def champion_lines(champion: Champion) -> list[str]:
    """A member's promoted model: run, scores, recipe, export and its lineage (the keys and
    records the pointer names). Pure."""
    head = f"**{md_text(champion.profile)}**"
    if champion.problem:
        return [f"{head}: not read ({md_text(champion.problem)})", ""]
    held = [f"- held promotion: run {md_text(run)} ({md_text(', '.join(found))}); clear with "
            f"{md_code(f'tpurl promote {champion.profile} --clear {run} --reason ...')}"
            for run, found in champion.held]
    model = champion.model
    if model is None:
        return [f"{head}: nothing promoted yet"
                + (f" (pointer {md_code(champion.pointer)})" if champion.pointer else ""),
                *held, ""]
    scores = "; ".join(f"{k} {v}" for k, v in model.scores.row().items())
    lines = [f"{head}: run {md_text(model.run)}, promoted {md_text(model.promoted_at)}",
             f"- scores ({model.scores.samples} held-out rows, by {md_text(model.metric)}): "
             f"{md_text(scores)}",
             f"- recipe: {md_text(recipe_label(pointer_recipe(model)))}",
             f"- export: {md_code(model.model_uri)}"]
    lineage = {"trained checkpoint": model.trained_checkpoint, "dataset": model.dataset,
               "base revision": model.revision, "evaluate key": model.eval_key,
               "score key": model.score_key, "export digest": model.export_digest,
               "pointer": champion.pointer}
    lines.append("- lineage: " + "; ".join(f"{name} {md_code(value)}"
                                            for name, value in lineage.items() if value))
    return [*lines, *held, ""]


def run_cost_line(run_usd: float, costs: TeamCosts) -> str:
    """The run page's line: what this run cost, and what its team has left. Pure."""
    return (f"This run cost {_money(run_usd)}; team {md_text(costs.team)} has "
            f"{_money(costs.left_usd)} left of its {_money(costs.budget_usd)} for "
            f"{costs.month} (the view: artifact {md_code(team_key(costs.team))}).")


def champion_of(name: str, own: Profile) -> Champion:
    """Read one member's pointer (read-only); a profile that does not load, or a damaged
    pointer, is named, never guessed at."""
    try:
        profile = own if name == own.name else load_profile(name)
    except ProfileError as exc:
        fields = ", ".join(sorted({i.field for i in exc.issues})[:3])
        return Champion(name, problem=f"the profile does not load here ({fields})")
    if profile.eval is None:
        return Champion(name, problem="the profile has no eval section: nothing is promoted")
    pointer = pointer_uris(profile)[0]
    storage = storage_for(profile.section.output_root())
    try:
        model = read_promoted(storage, profile)
    except Exception as exc:  # a damaged pointer is the evaluate stage's to refuse
        return Champion(name, pointer=pointer, problem=f"pointer {pointer} unreadable: {exc}")
    try:
        held = tuple((h.run, tuple(h.detectors)) for h in held_runs(storage, profile))
    except Exception as exc:  # a view never fails for a listing; it says so
        log.warning("could not list the held promotions of %s: %s", name, exc)
        held = ()
    return Champion(name, model, pointer, held=held)


def throughput_of(name: str, own: Profile) -> str:
    """One member's newest measured throughput, read-only from its results; what could not
    be read is said, never guessed at."""
    from flows.core.throughput import line_of
    from flows.run.result import recent_results

    try:
        profile = own if name == own.name else load_profile(name)
        results = recent_results(storage_for(profile.section.output_root()), profile)
    except ProfileError:
        return "not read: the profile does not load here"
    for result in results:
        if line := line_of(result.throughput):
            return f"{line} (run of {result.finished_at[:10]})"
    return "no run has measured it yet"


def run_statuses(runs: list[str]) -> dict[str, str]:
    """The state name of each run that is a flow run of this API (others: left out)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    ids = []
    for run in runs:
        try:
            ids.append(UUID(run))
        except ValueError:
            continue
    if not ids:
        return {}
    with get_client(sync_client=True) as client:
        found = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            id=FlowRunFilterId(any_=ids)), limit=len(ids))
    return {str(r.id): (r.state.name or r.state.type.value) if r.state else "unknown"
            for r in found}


def build_view(team: Team, month: str, own: Profile, run: str, status: str = "Completed",
               statuses: Mapping[str, str] | None = None) -> TeamView:
    """Read the team's month and champions; ``run`` (the flow run id) is shown as
    ``status``, the state the flow is about to end in (the API still says Running)."""
    costs = team_costs(team, month, own=own)
    try:
        found = dict(statuses) if statuses is not None else run_statuses(list(costs.by_run))
    except Exception as exc:  # the states are a nicety of the view
        log.warning("team view: the runs' states were not read: %s", exc)
        found = {}
    if run:
        found[run] = status
    return TeamView(costs, team.profiles, found, [champion_of(n, own) for n in team.profiles],
                    run, {n: throughput_of(n, own) for n in team.profiles})


def publish_team_view(team: Team, month: str, own: Profile, run: str, run_usd: float | None,
                      status: str = "Completed") -> None:
    """Best-effort: the team's view under its key, and the run page's cost line.
    ``run_usd``: the run result's dollars; None (a run that failed has no result): what
    the ledger counts for the run."""
    try:
        view = build_view(team, month, own, run, status)
        usd = view.costs.by_run.get(run, 0.0) if run_usd is None else run_usd
        quiet.create("markdown", run_cost_line(usd, view.costs), None,
                     f"This run's cost and team {team.name}'s month")
        quiet.create("markdown", team_markdown(view), team_key(team.name),
                     f"Team {team.name}: spend of {month}, its runs and each member's champion")
    except Exception as exc:  # a UI nicety never fails a run
        log.warning("team %s's view not published: %s", team.name, exc)
