"""The team budget's pure rules at their edges (flows/core/team_budget.py): which runs are
ahead of a run, a stage's own spend equal to what it was admitted, the refusals' whole words,
and the watch's re-read of the ledger at exactly its period."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from flows.core.failures import FailureCategory
from flows.core.spend_ledger import LedgerEntry
from flows.core.team_budget import (
    RECHECK_S,
    Allowance,
    allowance_for,
    grant,
    recheck,
    rechecked_by,
    refusal,
    release,
    stage_refusal,
    team_month,
)


def entry(run: str, usd: float, team: str = "a", stage: str = "train") -> LedgerEntry:
    return LedgerEntry(team=team, profile="p", run=run, stage=stage, capacity="spot", usd=usd,
                       chip_hours=1.0, kind="estimate", time="2026-12-01T00:00:00Z",
                       month="2026-12")


SPENT = [entry("r1", 10.0), entry("r2", 20.0), entry("r3", 40.0), entry("rb", 80.0, team="b")]


def test_only_the_runs_placed_before_a_run_are_ahead_of_it() -> None:
    month = team_month("a", "2026-12", 100.0, SPENT, order={"r1": 1, "r2": 2, "r3": 3})
    assert [month.ahead_usd(run) for run in ("r1", "r2", "r3")] == [0.0, 10.0, 30.0]
    # a run without a place counts every other run of its team, never another team's
    assert month.ahead_usd("unplaced") == 70.0
    # a run of the month that has no place is behind every placed run
    unplaced = team_month("a", "2026-12", 100.0, SPENT, order={"r2": 2})
    assert unplaced.ahead_usd("r2") == 0.0
    assert unplaced.admitted_usd("r2") == 100.0
    # two runs of one place are not ahead of each other
    tied = team_month("a", "2026-12", 100.0, SPENT, order={"r1": 1, "r2": 1, "r3": 2})
    assert (tied.ahead_usd("r1"), tied.ahead_usd("r2"), tied.ahead_usd("r3")) == (0.0, 0.0, 30.0)
    assert month.month == "2026-12" and month.entries == tuple(SPENT[:3])


def test_a_stage_whose_run_fits_to_the_cent_starts_and_one_cent_more_does_not() -> None:
    def month(own: float):
        return team_month("a", "2026-12", 100.0, [entry("r1", 60.0), entry("r2", own)],
                          order={"r1": 1, "r2": 2})
    assert stage_refusal(month(40.0), "r2", "train") is None
    assert stage_refusal(month(40.005), "r2", "train") is None
    refused = stage_refusal(month(40.02), "r2", "train")
    assert refused is not None and refused.category is FailureCategory.BUDGET
    assert refused.summary == (
        "stage train not started: this run counts $40.02 (spent, and estimated for the stages "
        "to come) and team a's runs that started before it this month left $40.00 of its "
        "$100.00 for 2026-12")
    assert refused.fix.endswith("raise teams.a.usd_per_month in the teams file "
                                "(deployments/teams.yaml), or lower the work "
                                "(train.args.num_batches)")
    over = stage_refusal(team_month("a", "2026-12", 100.0, [entry("r1", 130.0), entry("r2", 1)],
                                    order={"r1": 1, "r2": 2}), "r2", "train")
    assert over is not None and "left $0.00 of its $100.00" in over.summary


def test_the_start_refusal_names_the_budget_that_would_let_it_run() -> None:
    month = team_month("a", "2026-12", 100.0, [entry("r1", 70.0)])
    assert refusal(month, "p", 30.0) is None
    issue = refusal(month, "p", 30.01)
    assert issue is not None
    assert issue.render() == (
        "teams.a.usd_per_month: a run of p is estimated at $30.01, and team a has $30.00 left "
        "of its $100.00 for 2026-12 (spent $70.00, in flight counted at their estimates); "
        "nothing was started\n    fix: raise teams.a.usd_per_month in the teams file "
        "(deployments/teams.yaml) to at least 100.01, or wait for the next month (UTC), or "
        "lower the run's size (train.args.num_batches, gke.estimated_hours)")
    assert issue.category == "config/team-budget"


@pytest.fixture
def runs() -> Iterator[None]:
    yield
    for run in ("r1", "r2"):
        release(run)


def test_the_watch_reads_the_ledger_again_at_its_period_and_for_its_own_run(runs) -> None:
    reads: list[str] = []

    def reader(run: str, left: float):
        def read() -> Allowance:
            reads.append(run)
            return Allowance("a", "2026-12", left)
        return read
    grant("r1", Allowance("a", "2026-12", 50.0))
    grant("r2", Allowance("a", "2026-12", 70.0))
    rechecked_by("r1", reader("r1", 10.0))
    rechecked_by("r2", reader("r2", 20.0))
    assert recheck("r1", now=1000.0) == Allowance("a", "2026-12", 50.0)  # first look: no read
    assert recheck("r1", now=1000.0 + RECHECK_S - 1) == Allowance("a", "2026-12", 50.0)
    assert reads == []
    assert recheck("r1", now=1000.0 + RECHECK_S) == Allowance("a", "2026-12", 10.0)
    assert reads == ["r1"] and allowance_for("r1") == Allowance("a", "2026-12", 10.0)
    assert allowance_for("r2") == Allowance("a", "2026-12", 70.0)  # the other run's untouched
    release("r1")
    assert allowance_for("r1") is None and allowance_for("r2") is not None
    assert recheck("r1", now=9999.0) is None and reads == ["r1"]  # released: nothing re-read


def test_a_ledger_that_cannot_be_read_keeps_the_last_allowance(runs) -> None:
    def broken() -> Allowance:
        raise OSError("ledger unreadable")
    grant("r1", Allowance("a", "2026-12", 50.0))
    rechecked_by("r1", broken)
    recheck("r1", now=0.0)
    assert recheck("r1", now=RECHECK_S) == Allowance("a", "2026-12", 50.0)
