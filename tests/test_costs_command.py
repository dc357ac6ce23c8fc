"""`tpurl costs` (flows/operations/costs.py) on a real ledger under the teams file's
ledger_root: the month by team, profile, stage and capacity mode, each (run, stage) counted
once, what is still at its estimate, dollars per promoted model and per evaluation, what the
ledger holds that is refused, and a ledger that cannot be read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.cli import main
from flows.common.paths import file_uri
from flows.config.loading import load_profile
from flows.core.promotion import PromotedModel
from flows.core.promotion_store import write_promoted
from flows.core.scores import ScoreSummary
from flows.core.spend_ledger import LedgerEntry, append
from flows.core.storage import LocalStorage

MONTH = "2026-11"


def _entry(run: str, stage: str, kind: str, usd: float, capacity: str = "on-demand",
           team: str = "lab") -> LedgerEntry:
    return LedgerEntry.model_validate({
        "team": team, "profile": "rehearsal", "run": run, "stage": stage, "capacity": capacity,
        "usd": usd, "chip_hours": usd / 2.0, "kind": kind, "time": f"{MONTH}-20T10:00:00+00:00",
        "month": MONTH})


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Team lab ($100 a month) of the rehearsal profile, whose output root holds a month of
    ledger: run a finished (train and evaluate metered, replacing their estimates), run b
    still training (its estimate counts), and one entry of another team."""
    teams = tmp_path / "teams.yaml"
    uri = file_uri(tmp_path / "ledger")
    teams.write_text(f"ledger_root: {uri}\nteams:\n  lab:\n    usd_per_month: 100\n"
                     "    profiles: [rehearsal]\n")
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(teams))
    root = tmp_path / "root"
    monkeypatch.setenv("TPURL_LOCAL__ROOT", str(root))
    storage = LocalStorage()
    for entry in [_entry("a", "train", "estimate", 30.0), _entry("a", "evaluate", "estimate", 6.0),
                  _entry("a", "train", "metered", 24.0), _entry("a", "evaluate", "metered", 4.0),
                  _entry("b", "train", "estimate", 30.0, capacity="spot"),
                  _entry("x", "train", "metered", 999.0, team="other")]:
        append(storage, uri, entry)
    profile = load_profile("rehearsal")
    half = {"value": 0.5, "low": 0.4, "high": 0.6}
    scores = ScoreSummary.model_validate({
        "samples": 8, "accuracy": half, "format_accuracy": half, "mean_reward": half,
        "reward_samples": 8, "checkpoint": "file:///c"})
    write_promoted(storage, profile, PromotedModel(
        model_uri="file:///m", trained_checkpoint="file:///c", scores=scores,
        base_scores=scores, run="a", dataset="d", revision="r",
        promoted_at=f"{MONTH}-20T11:00:00+00:00", metric="accuracy"))
    return root


def test_the_team_month_by_profile_stage_and_mode(lab: Path, capsys) -> None:
    assert main(["costs", "lab", "--month", MONTH]) == 0
    out = capsys.readouterr().out
    assert f"team lab · {MONTH} · budget $100.00: spent $58.00, left $42.00" in out
    assert "2 run(s), 29.0 chip-hours" in out
    assert "of it $30.00 at the plan's estimate" in out
    assert "by stage: evaluate $4.00, train $54.00" in out
    assert "by capacity: on-demand $28.00, spot $30.00" in out
    assert "rehearsal: $58.00 per promoted model (1 promoted)" in out
    assert "rehearsal: $58.00 per evaluation (1 evaluated)" in out


def test_a_profile_narrows_the_breakdown_and_json_carries_the_same(lab: Path, capsys) -> None:
    assert main(["costs", "rehearsal", "--month", MONTH, "--json"]) == 0
    [month] = json.loads(capsys.readouterr().out)
    assert month["team"] == "lab" and month["spent_usd"] == 58.0 and month["left_usd"] == 42.0
    assert month["by_profile"] == {"rehearsal": 58.0}
    assert month["per_promoted_model"] == {"rehearsal": {"models": 1, "usd_each": 58.0}}
    assert month["per_evaluation"] == {"rehearsal": {"evaluations": 1, "usd_each": 58.0}}
    assert main(["costs", "lab", "--month", "2026-10"]) == 0  # another month: nothing
    assert "spent $0.00, left $100.00" in capsys.readouterr().out


def test_bad_arguments_are_refused_naming_them(lab: Path, capsys) -> None:
    assert main(["costs", "nobody", "--month", MONTH]) == 2
    assert "'nobody' is neither a team of the teams file (teams: lab)" in capsys.readouterr().err
    assert main(["costs", "--month", "11-2026"]) == 2
    assert "--month: '11-2026' is not a month; give it as YYYY-MM" in capsys.readouterr().err


def test_a_ledger_that_cannot_be_read_makes_the_spend_unknown_never_zero(
        lab: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """The team's ledger in a bucket that cannot be read (no Google credentials: the real
    client fails as it does on a laptop without `gcloud auth`): the month is unknown and
    said so, with the reason instead of a traceback, and the JSON says it is not complete."""
    teams = tmp_path / "teams.yaml"
    teams.write_text("teams:\n  lab:\n    usd_per_month: 100\n    profiles: [rehearsal]\n"
                     "    ledger_root: gs://lab-ledger-bucket\n")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-adc.json"))
    assert main(["costs", "lab", "--month", MONTH]) == 1
    out = capsys.readouterr().out
    assert "Traceback" not in out and "spent $0.00" not in out
    assert "spent unknown: the team's ledger was not read (below)" in out
    assert "not read: the ledger gs://lab-ledger-bucket (" in out
    assert main(["costs", "lab", "--month", MONTH, "--json"]) == 1
    [month] = json.loads(capsys.readouterr().out)
    assert month["complete"] is False and list(month["unread"]) == ["gs://lab-ledger-bucket"]


def test_what_the_ledger_refuses_is_named_and_not_counted(lab: Path, capsys) -> None:
    """An entry with negative dollars, one naming another team filed in lab's month, and
    one naming run a filed in another run's directory: each named, none counted."""
    storage, month = LocalStorage(), lab.parent / "ledger" / "tpurl-spend" / "lab" / MONTH
    forged = {"negative": _entry("z", "train", "metered", 1.0).model_dump() | {"usd": -50.0},
              "other-team": _entry("y", "train", "metered", 70.0, team="other").model_dump(),
              "not-its-run": _entry("a", "train", "metered", 0.0).model_dump() | {"sequence": 7}}
    for run, data in forged.items():
        storage.create_text(file_uri(month / "runs" / run / f"train-{data['sequence']:05d}-"
                                     "metered.json"), json.dumps(data))
    assert main(["costs", "lab", "--month", MONTH]) == 0
    out = capsys.readouterr().out
    assert "spent $58.00, left $42.00" in out  # as before the forged entries
    assert "runs/negative/train-00000-metered.json (usd: Input should be greater than or " \
        "equal to 0)" in out
    assert "runs/other-team/train-00000-metered.json (names team 'other' in team 'lab'" in out
    assert "runs/not-its-run/train-00007-metered.json (names run 'a' but lies in run " \
        "'not-its-run'" in out

