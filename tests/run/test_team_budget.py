"""A team's month at a run's start and during it (flows/spending/team_spend.py,
flows/core/team_budget.py, the meter of flows/backends/gke/watch/spend.py): a run whose
estimate exceeds what its team has left is refused by the flow's start path before any
side effect, with the figures and the fix; one that may start is granted what was left, and
the spend watch stops its stage once the run has spent it. A team without a ledger of the
flow's own, or whose ledger cannot be read, refuses the run. The ledgers are real files and
a real fake-gcs-server."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from flows.backends.gke.watch.spend import SpendMeter, meter_for
from flows.common.paths import file_uri
from flows.config.errors import ProfileError
from flows.config.spend import estimated_run_usd
from flows.config.teams import Team, Teams
from flows.core.failures import FailureCategory
from flows.core.spend_ledger import LedgerEntry, append, month_of, read_month, take_place
from flows.core.storage import LocalStorage, Storage
from flows.core.team_budget import RECHECK_S, Allowance, allowance_for, grant, team_month
from flows.operations.costs import team_costs
from flows.pipeline import rl_post_training
from flows.run.result import StageReport
from flows.spending.team_spend import (
    RunSpend,
    record_estimates,
    record_failed,
    record_metered,
    start_check,
)
from tests.support.fake_clock import Clock
from tests.support.gcs import GCS_BUCKET
from tests.support.profiles import TUTORIAL, tutorial_profile

HOUR = 3600.0


def _spent(storage: Storage, root: str, team: str, usd: float, run: str = "earlier-run") -> None:
    """Another run of the team, earlier this month, metered at ``usd``."""
    month = month_of(datetime.now(UTC))
    append(storage, root, LedgerEntry.model_validate({
        "team": team, "profile": "other", "run": run, "stage": "train",
        "capacity": "on-demand", "usd": usd, "chip_hours": usd / 2.7, "kind": "metered",
        "time": datetime.now(UTC).isoformat(), "month": month}))
    take_place(storage, root, team, month, run)


LEDGER_BUCKET = f"{GCS_BUCKET}-ledger"


@pytest.fixture
def ledger(store) -> str:
    """A bucket of its own for the team's ledger (the profile's is GCS_BUCKET), emptied."""
    client = store.client
    bucket = client.bucket(LEDGER_BUCKET)
    if not bucket.exists():
        client.create_bucket(LEDGER_BUCKET)
    for blob in client.list_blobs(LEDGER_BUCKET):
        blob.delete()
    return f"gs://{LEDGER_BUCKET}"


def test_the_flows_start_refuses_a_run_whose_team_has_spent_its_month(
        prefect_api: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real flow on a Prefect API, refused in ``prepare``, its start: the rehearsal's
    team spent $12 of its $10; the run fails with the figures and the three ways out, and
    nothing was written."""
    root, ledger = tmp_path / "root", tmp_path / "ledger"
    teams = tmp_path / "teams.yaml"
    teams.write_text(f"ledger_root: {file_uri(ledger)}\nteams:\n  lab:\n    usd_per_month: "
                     "10\n    profiles: [rehearsal]\n")
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(teams))
    _spent(LocalStorage(), file_uri(ledger), "lab", 12.0)
    before = sorted(p for p in tmp_path.rglob("*"))
    state = rl_post_training(profile="rehearsal", overrides={"local.root": str(root)},
                             return_state=True)
    assert state.is_failed(), state
    refused = state.result(raise_on_failure=False)
    assert isinstance(refused, ProfileError), refused
    [issue] = refused.issues
    assert issue.category == "config/team-budget"
    assert issue.field == "teams.lab.usd_per_month"
    assert "estimated at $0.00" in issue.problem and "$0.00 left of its $10.00" in issue.problem
    assert "spent $12.00" in issue.problem and "nothing was started" in issue.problem
    assert "to at least 12.00" in issue.fix and "next month" in issue.fix
    assert "lower the run's size" in issue.fix
    assert sorted(p for p in tmp_path.rglob("*")) == before  # no side effect


def _tutorial_team(root: str, budget: float) -> tuple[Teams, str]:
    teams = Teams(teams={"tutorial": Team(name="tutorial", usd_per_month=budget,
                                          profiles=(TUTORIAL,), ledger_root=root)})
    return teams, root


def test_a_gke_run_estimated_above_what_is_left_is_refused_with_the_figures(
        store, ledger: str) -> None:
    """The tutorial's run, estimated by the plan at $432, when its team has $300 left of
    $500 (another run spent $200, in the team's ledger bucket on fake-gcs-server)."""
    profile = tutorial_profile(**{"gke.bucket": GCS_BUCKET})
    teams, root = _tutorial_team(ledger, 500.0)
    _spent(store, root, "tutorial", 200.0)
    estimate = estimated_run_usd(profile)
    run = uuid.uuid4().hex
    with pytest.raises(ProfileError) as refused:
        start_check(profile, run, "run-1", teams)
    [issue] = refused.value.issues
    assert f"estimated at ${estimate:,.2f}" in issue.problem
    assert "$300.00 left of its $500.00" in issue.problem and "spent $200.00" in issue.problem
    assert f"to at least {200 + estimate:.2f}" in issue.fix
    assert allowance_for(run) is None  # nothing granted


def test_a_run_that_fits_is_granted_what_was_left_and_writes_its_spend_to_the_ledger(
        store, ledger: str) -> None:
    """Granted $800 - estimate fits; its estimates are written at its start, then a
    stage's metered figure, into the team's ledger bucket (not the profile's), and the month
    counts the metered figure instead of the estimate."""
    profile = tutorial_profile(**{"gke.bucket": GCS_BUCKET})
    teams, root = _tutorial_team(ledger, 1000.0)
    _spent(store, root, "tutorial", 200.0)
    run = uuid.uuid4().hex
    spend = start_check(profile, run, "run-2", teams)
    assert isinstance(spend, RunSpend) and spend.root == root
    assert allowance_for(run) == Allowance("tutorial", spend.month, 800.0)
    estimates = [e for e in read_month(store, root, "tutorial", spend.month).entries
                 if e.run == run]
    estimates.sort(key=lambda e: ("convert", "train", "export").index(e.stage))
    assert [e.stage for e in estimates] == ["convert", "train", "export"]
    assert not store.files_under(f"gs://{GCS_BUCKET}")  # nothing in the profile's bucket
    record_metered(spend, store, StageReport(stage="train", status="completed",
                                             duration_s=1.0, chip_hours=10.0, uris={},
                                             usd=27.0))
    month = start_check(profile, uuid.uuid4().hex, "run-3", Teams(teams={"tutorial": Team(
        name="tutorial", usd_per_month=10_000.0, profiles=(TUTORIAL,), ledger_root=root)}))
    assert month is not None
    by_stage = {e.stage: e for e in read_month(store, root, "tutorial", spend.month).entries
                if e.run == run}
    assert by_stage.keys() == {"convert", "train", "export"}
    left = allowance_for(month.run)
    assert left is not None
    # train: metered, not estimated; run-3 counts the runs ahead of it, not itself
    spent = 200.0 + 27.0 + estimates[0].usd + estimates[2].usd
    assert left.left_usd == pytest.approx(10_000.0 - spent, abs=0.01)


# --- the stop mid-run -------------------------------------------------------------------
def test_the_spend_watch_stops_a_stage_when_the_run_spent_what_its_team_had_left() -> None:
    """Like the per-run cap: the meter charges held chip-hours and crosses once the run's
    spend reaches the allowance granted at its start; the diagnosis names the team's month
    and its fix."""
    clock, key = Clock(), uuid.uuid4().hex
    meter = SpendMeter("train", 8, 1.0, True, None, None, key, clock,
                       team=Allowance("tutorial", "2026-12", 20.0))
    assert meter.charge([]) is None
    clock.now += 2 * HOUR  # 8 chips × 2 h × $1 = $16 < $20
    assert meter.charge([]) is None
    clock.now += 0.5 * HOUR  # $20: all that was left
    stop = meter.charge([])
    assert stop is not None and stop.category == FailureCategory.BUDGET
    assert stop.code == "gke/team-budget"
    assert "this run spent $20.00" in stop.summary and "team tutorial" in stop.summary
    assert "2026-12" in stop.summary and "($20.00)" in stop.summary
    assert "teams.tutorial.usd_per_month" in stop.fix and "next month" in stop.fix


def test_a_run_with_a_team_allowance_gets_a_meter_without_any_cap() -> None:
    """The tutorial profile sets no gke.max_usd_per_run: without a team nothing is metered;
    with one, every stage's meter carries the allowance."""
    profile = tutorial_profile()
    assert profile.gke is not None and profile.gke.max_usd_per_run is None
    key = uuid.uuid4().hex
    assert meter_for(profile, "train", key=key) is None
    grant(key, Allowance("tutorial", "2026-12", 50.0))
    meter = meter_for(profile, "train", key=key)
    assert meter is not None and meter.team == Allowance("tutorial", "2026-12", 50.0)


def test_a_stage_that_fails_writes_what_its_meters_charged_over_every_attempt(
        tmp_path: Path) -> None:
    """A stage stopped mid-run reports no result: the meters of both its attempts charged
    $16 + $4, and that replaces its $345.60 estimate in the month; a stage no meter
    watched keeps its estimate."""
    profile = tutorial_profile()
    key, clock = uuid.uuid4().hex, Clock()
    spend = RunSpend(Team(name="tutorial", usd_per_month=1000.0, profiles=(TUTORIAL,)),
                     TUTORIAL, key, "run-4", "2026-12", file_uri(tmp_path), "reservation",
                     "reservation", key)
    storage = LocalStorage()
    estimates = record_estimates(spend, profile, storage)
    for hours in (2.0, 0.5):  # two attempts of train, each with its own meter
        meter = SpendMeter("train", 8, 1.0, True, None, None, key, clock)
        meter.charge([])
        clock.now += hours * HOUR
        meter.charge([])
    failed = record_failed(spend, storage, "train", 1.0)
    assert failed is not None and failed.usd == 20.0 and failed.chip_hours == 20.0
    assert record_failed(spend, storage, "export", 1.0) is None
    month = team_month("tutorial", "2026-12", 1000.0, read_month(storage, spend.root,
                                                                 "tutorial", "2026-12").entries)
    by_stage = {e.stage: e.usd for e in estimates}
    assert month.spent_usd == pytest.approx(by_stage["convert"] + 20.0 + by_stage["export"])


# --- the ledger is the flow's -----------------------------------------------------------
def test_a_team_without_a_ledger_of_its_own_is_refused_and_the_fix_starts_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No ledger_root, one inside the profile's bucket (which its pods write), or one inside
    another member's output root (the rehearsal's, whose training writes it): refused before
    anything is written, naming the field; the fix applied (a place of its own), the run
    starts."""
    monkeypatch.setenv("TPURL_LOCAL__ROOT", str(tmp_path / "root"))
    profile = tutorial_profile(**{"gke.bucket": GCS_BUCKET})
    for root, said in ((None, "has no ledger for its spend"),
                       (f"gs://{GCS_BUCKET}/ledger", f"shares {TUTORIAL}'s output root"),
                       (file_uri(tmp_path / "root" / "ledger"),
                        "shares rehearsal's output root")):
        teams = Teams(teams={"tutorial": Team(name="tutorial", usd_per_month=1e6,
                                              profiles=(TUTORIAL, "rehearsal"),
                                              ledger_root=root)})
        with pytest.raises(ProfileError) as refused:
            start_check(profile, uuid.uuid4().hex, "run", teams)
        [issue] = refused.value.issues
        assert issue.category == "config/team-ledger" and said in issue.problem, issue
        assert issue.field == "teams.tutorial.ledger_root" and "ledger_root" in issue.fix
        assert not (tmp_path / "root").exists()
    fixed, _ = _tutorial_team(file_uri(tmp_path / "ledger"), 1e6)
    assert start_check(profile, uuid.uuid4().hex, "run", fixed) is not None


def test_a_ledger_that_cannot_be_read_refuses_the_start_naming_it(store) -> None:
    """A ledger bucket that does not exist: the month is unknown, so the run is refused (a
    member's ledger is never skipped as empty); `tpurl costs` says it was not read."""
    profile = tutorial_profile(**{"gke.bucket": GCS_BUCKET})
    teams, root = _tutorial_team("gs://no-such-ledger-bucket", 1e6)
    with pytest.raises(ProfileError) as refused:
        start_check(profile, uuid.uuid4().hex, "run", teams)
    [issue] = refused.value.issues
    assert issue.category == "config/team-ledger" and "gs://no-such-ledger-bucket" in \
        issue.problem and "could not be read" in issue.problem
    costs = team_costs(teams.teams["tutorial"], month_of(datetime.now(UTC)))
    assert list(costs.unread) == [root]


def test_the_watch_reads_the_month_again_and_stops_when_a_run_ahead_spent_more(
        tmp_path: Path) -> None:
    """Two runs fit by their plans with $20 to spare; the later's watch was granted what the
    first left. The first's train is then metered at its estimate plus one whole run: the
    later's watch does not read the ledger on every tick, but within RECHECK_S it does, and
    stops the stage at what is now left ($20)."""
    profile = tutorial_profile()
    estimate = estimated_run_usd(profile)
    teams, root = _tutorial_team(file_uri(tmp_path), 2 * estimate + 20.0)
    ahead = start_check(profile, uuid.uuid4().hex, "ahead", teams)
    later = start_check(profile, uuid.uuid4().hex, "later", teams)
    assert ahead is not None and later is not None
    granted = allowance_for(later.key)
    assert granted is not None and granted.left_usd == pytest.approx(estimate + 20.0)
    clock = Clock()
    meter = SpendMeter("train", 8, 1.0, True, None, None, later.key, clock, team=granted)
    assert meter.charge([]) is None
    clock.now += 3 * HOUR  # $24 of the $452 granted; the ledger is read again: no change
    assert meter.charge([]) is None
    train = next(e for e in read_month(LocalStorage(), root, "tutorial", ahead.month).entries
                 if e.run == ahead.run and e.stage == "train")
    record_metered(ahead, LocalStorage(), StageReport(
        stage="train", status="completed", duration_s=1.0, chip_hours=1.0, uris={},
        usd=train.usd + estimate))
    clock.now += 60.0  # read again only every RECHECK_S
    assert meter.charge([]) is None
    clock.now += RECHECK_S
    stop = meter.charge([])
    assert stop is not None and stop.code == "gke/team-budget", stop
    assert "runs ahead of it left" in stop.summary and "($20.00)" in stop.summary
