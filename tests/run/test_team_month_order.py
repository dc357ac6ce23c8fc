"""Two runs of one team that start together (flows/core/team_budget.py says why the order of
their places decides): each run's steps, its start's read (``plan_start``), its estimates and
place (``reserve``), each TPU stage's check at its start (``stage_check``) and metered figure
(``record_metered``), interleaved in every order hypothesis finds. When both cannot fit, at
most one trains to the end, and one always does; when both fit, both do. A real ledger on
local files, the tutorial's profile priced by its plan."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flows.common.paths import file_uri
from flows.config.errors import ProfileError
from flows.config.spend import estimated_run_usd, stage_estimates
from flows.config.teams import Team, Teams
from flows.core.failures import StageFailed
from flows.core.spend_ledger import read_month
from flows.core.storage import LocalStorage
from flows.core.team_budget import allowance_for, team_month
from flows.run.result import StageReport
from flows.spending.team_spend import (
    RunSpend,
    plan_start,
    record_metered,
    reserve,
    stage_check,
)
from tests.support.profiles import TUTORIAL, tutorial_profile

PROFILE = tutorial_profile()
ESTIMATE = estimated_run_usd(PROFILE)
STAGES = tuple(stage_estimates(PROFILE))
STEPS = ("plan", "reserve", *(f"{kind}:{s}" for s in STAGES for kind in ("check", "meter")))


class Run:
    """One run's steps in order; ``stopped`` once the start or a stage's check refuses it."""

    def __init__(self, teams: Teams) -> None:
        self.key, self.teams = uuid.uuid4().hex, teams
        self.steps, self.spend = list(STEPS), None
        self.stopped, self.metered = False, []

    def step(self, overrun: float = 1.0) -> None:
        """The next step; a meter step spends ``overrun`` times the plan's estimate."""
        step = self.steps.pop(0)
        try:
            if step == "plan":
                self.spend = plan_start(PROFILE, self.key, self.key[:8], self.teams)
            elif step == "reserve":
                assert isinstance(self.spend, RunSpend)
                reserve(self.spend, PROFILE)
            elif step.startswith("check:"):
                stage_check(self.key, step.partition(":")[2])
            else:
                stage = step.partition(":")[2]
                assert isinstance(self.spend, RunSpend)
                usd = stage_estimates(PROFILE)[stage][0] * overrun
                record_metered(self.spend, LocalStorage(), StageReport(
                    stage=stage, status="completed", duration_s=1.0, chip_hours=1.0, uris={},
                    usd=usd))
                self.metered.append(stage)
        except (ProfileError, StageFailed):
            self.stopped, self.steps = True, []

    @property
    def trained(self) -> bool:
        return "train" in self.metered


@settings(max_examples=80, deadline=None)
@given(share=st.sampled_from([1.0, 1.5, 1.99, 2.0, 2.5]), data=st.data())
def test_two_runs_that_cannot_both_fit_never_both_train(share: float, data,
                                                         tmp_path_factory) -> None:
    """A team's budget is ``share`` times one run's estimate (1.5: a $100 team, two runs
    planned at ~$67): below 2 both cannot fit and at most one trains, always one; at 2 and
    above both train. The stopped run's estimates no longer count once it is stopped."""
    root = file_uri(tmp_path_factory.mktemp("ledger"))
    budget = round(ESTIMATE * share, 4) + (0.01 if share >= 2 else 0.0)
    teams = Teams(teams={"lab": Team(name="lab", usd_per_month=budget, profiles=(TUTORIAL,),
                                     ledger_root=root)})
    runs = [Run(teams), Run(teams)]
    while active := [r for r in runs if r.steps]:
        active[data.draw(st.integers(0, len(active) - 1))].step()
    trained = [r for r in runs if r.trained]
    if share < 2:
        assert len(trained) == 1, [(r.metered, r.stopped) for r in runs]
    else:
        assert len(trained) == 2
    spend = runs[0].spend or runs[1].spend
    assert spend is not None
    ledger = read_month(LocalStorage(), root, "lab", spend.month)
    month = team_month("lab", spend.month, budget, ledger.entries, ledger.order)
    assert month.spent_usd <= budget + 0.01  # the stopped run's estimates were settled
    assert not ledger.refused


def test_a_run_ahead_that_spent_more_than_planned_stops_the_later_at_its_next_stage(
        tmp_path: Path) -> None:
    """Both fit by their plans (2.2 runs' worth), but the run ahead trains at 1.5 times its
    estimate: the later run is stopped at its train stage's start, with the figures and the
    fix, and its stages not started are written at $0; the watch of the run ahead was granted
    the whole budget, the later one what the first left."""
    root = file_uri(tmp_path)
    budget = round(ESTIMATE * 2.2, 2)
    teams = Teams(teams={"lab": Team(name="lab", usd_per_month=budget, profiles=(TUTORIAL,),
                                     ledger_root=root)})
    ahead, later = Run(teams), Run(teams)
    for run in (ahead, later):
        run.step(), run.step()  # plan, reserve: ahead takes place 0
    assert allowance_for(ahead.key).left_usd == pytest.approx(budget)  # type: ignore[union-attr]
    assert allowance_for(later.key).left_usd == pytest.approx(  # type: ignore[union-attr]
        budget - ESTIMATE, abs=0.01)
    later.step(), later.step()  # check:convert, meter:convert
    for _ in range(3):  # check:convert, meter:convert, check:train
        ahead.step()
    ahead.step(overrun=1.5)  # train metered at 1.5 × its estimate
    with pytest.raises(StageFailed) as stop:
        stage_check(later.key, "train")
    d = stop.value.diagnosis
    assert d.code == "run/team-budget" and d.category == "budget"
    assert "stage train not started" in d.summary and f"of its ${budget:,.2f}" in d.summary
    assert "teams.lab.usd_per_month" in d.fix and "tpurl costs lab" in d.detail
    assert later.spend is not None
    ledger = read_month(LocalStorage(), root, "lab", later.spend.month)
    mine = {(e.stage, e.kind): e.usd for e in ledger.entries if e.run == later.key}
    assert mine[("export", "metered")] == 0.0 and mine[("train", "metered")] == 0.0
    # the fix applied: the budget raised, the next run starts and passes its stages' checks
    raised = Teams(teams={"lab": teams.teams["lab"].model_copy(
        update={"usd_per_month": budget + 2 * ESTIMATE})})
    again = Run(raised)
    for _ in range(4):  # plan, reserve, check:convert, meter:convert
        again.step()
    assert not again.stopped and again.metered == ["convert"]
