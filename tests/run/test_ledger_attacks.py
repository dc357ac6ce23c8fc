"""Attacks on a team's month through what its ledger holds (flows/core/spend_ledger.py,
flows/spending/team_spend.py). On the ledger as it was, kept under each profile's output root
where every training pod writes, each of these succeeded: a pod's entry of -$1,000,000 gave
its team a million dollars, a NaN figure refused every run of the team, and a metered $0 filed
under the forger's own run directory erased another run's estimate. Now the ledger is the
teams file's ledger_root, which no output root holds, and what it holds is read as untrusted."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from flows.common.paths import file_uri
from flows.config.loading import load_profile
from flows.config.teams import Team, Teams
from flows.core.spend_ledger import LedgerEntry, append, month_dir, month_of, take_place
from flows.core.storage import LocalStorage
from flows.core.team_budget import allowance_for
from flows.spending.team_spend import read_team, start_check

MONTH = month_of(datetime.now(UTC))


def _entry(run: str, usd: float, kind: str = "metered", team: str = "lab") -> LedgerEntry:
    return LedgerEntry.model_validate({
        "team": team, "profile": "rehearsal", "run": run, "stage": "train",
        "capacity": "local", "usd": usd, "chip_hours": 1.0, "kind": kind,
        "time": datetime.now(UTC).isoformat(), "month": MONTH})


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Teams, str, str]:
    """Team lab ($100) of the rehearsal profile: its ledger root, and the output root its
    training processes write. A run spent the whole month already."""
    monkeypatch.setenv("TPURL_LOCAL__ROOT", str(tmp_path / "root"))
    ledger = file_uri(tmp_path / "ledger")
    teams = Teams(teams={"lab": Team(name="lab", usd_per_month=100.0, profiles=("rehearsal",),
                                     ledger_root=ledger)})
    append(LocalStorage(), ledger, _entry("spent", 100.0))
    take_place(LocalStorage(), ledger, "lab", MONTH, "spent")
    return teams, ledger, file_uri(tmp_path / "root")


def _forge(ledger: str, run_dir: str, data: dict[str, object] | str,
           name: str = "train-00000-metered.json") -> str:
    uri = f"{month_dir(ledger, 'lab', MONTH)}/runs/{run_dir}/{name}"
    LocalStorage().create_text(uri, data if isinstance(data, str) else json.dumps(data))
    return uri


def _granted(teams: Teams) -> float:
    run = uuid.uuid4().hex
    start_check(load_profile("rehearsal"), run, "r", teams)
    allowance = allowance_for(run)
    assert allowance is not None
    return allowance.left_usd


def test_an_entry_written_where_training_writes_is_never_read(lab) -> None:
    """A pod writes -$1,000,000 under the output root, where the ledger used to be: the
    month is not moved (a pod cannot reach the ledger root: test_team_budget.py refuses a
    ledger at or inside an output root)."""
    teams, _, outputs = lab
    append(LocalStorage(), outputs, _entry("pod", 0.0))
    LocalStorage().create_text(f"{outputs}/tpurl-spend/{MONTH}/pod/train-00001-metered.json",
                               _entry("pod", 0.0).model_dump_json().replace(
                                   '"usd":0.0', '"usd":-1000000.0'))
    assert _granted(teams) == 0.0


@pytest.mark.parametrize("figure", ["-1000000.0", "NaN", "Infinity", "-Infinity"])
def test_negative_or_non_finite_dollars_are_refused_and_named(lab, figure: str) -> None:
    teams, ledger, _ = lab
    text = _entry("bad", 1.0).model_dump_json().replace('"usd":1.0', f'"usd":{figure}')
    uri = _forge(ledger, "bad", text)
    state = read_team(teams.teams["lab"], MONTH)
    assert state.spent_usd == 100.0 and uri in state.refused
    assert "usd" in state.refused[uri]
    assert _granted(teams) == 0.0  # a finite allowance: nothing left, and the run may start


def test_a_metered_entry_replaces_only_its_own_runs_estimate(lab) -> None:
    """A metered $0 naming run victim, filed under another run's directory, is refused:
    the victim's $90 estimate keeps counting."""
    teams, ledger, _ = lab
    teams = Teams(teams={"lab": teams.teams["lab"].model_copy(update={"usd_per_month": 200.0})})
    append(LocalStorage(), ledger, _entry("victim", 90.0, "estimate"))
    take_place(LocalStorage(), ledger, "lab", MONTH, "victim")
    uri = _forge(ledger, "forger", _entry("victim", 0.0).model_dump())
    state = read_team(teams.teams["lab"], MONTH)
    assert state.refused[uri] == "names run 'victim' but lies in run 'forger''s directory"
    assert state.spent_usd == 190.0 and _granted(teams) == pytest.approx(10.0)
    # filed under its own run but named for another stage, sequence or kind: refused too
    renamed = _forge(ledger, "victim", _entry("victim", 0.0).model_dump(),
                     name="export-00000-metered.json")
    assert "not its name's" in read_team(teams.teams["lab"], MONTH).refused[renamed]


def test_another_teams_name_in_a_teams_month_is_refused(lab) -> None:
    """An entry naming team other in lab's month counts for neither (other's month is read
    from its own directory) and is named."""
    teams, ledger, _ = lab
    uri = _forge(ledger, "x", _entry("x", 70.0, team="other").model_dump())
    state = read_team(teams.teams["lab"], MONTH)
    assert state.refused[uri] == "names team 'other' in team 'lab''s ledger"
    assert state.spent_usd == 100.0
