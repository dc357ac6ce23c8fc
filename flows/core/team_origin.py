"""Whose a run is, decided once: the team it spends and queues as, and who started it.

The flow's ``prepare`` decides these before any side effect and hands them down to every
stage's backend, so nothing below reads the teams file again or asks Prefect who started
the run while a manifest renders: a teams file edited mid-run, or a renderer called outside
the flow's context, cannot give one stage's JobSet another queue or Secret owner than the
run's budget was checked against.
"""

from __future__ import annotations

from dataclasses import dataclass

from flows.config.loading import Origin
from flows.config.teams import Team, load_teams


@dataclass(frozen=True)
class TeamAndOrigin:
    team: Team | None  # the team whose budget and Kueue queue the run uses (None: no team)
    origin: Origin  # "deployment": a deployment's run (a schedule, an automation); "flow"

    @property
    def by_deployment(self) -> bool:
        return self.origin == "deployment"


def outside_a_run(profile: str) -> TeamAndOrigin:
    """The team and origin of a plan, a check or a test's backend (no flow run decided them): the
    profile's team in today's teams file, started in-process."""
    return TeamAndOrigin(load_teams().team_of(profile), "flow")
