"""Attacks on a team's budget as they run on the code before the ledger moved (kept to show
each succeeds there)."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime
from pathlib import Path

from flows.common.paths import file_uri
from flows.config.loading import load_profile
from flows.config.teams import Team, Teams
from flows.core.spend_ledger import LedgerEntry, append, month_of
from flows.core.storage import LocalStorage
from flows.core.team_budget import allowance_for
from flows.spending.team_spend import start_check


def _entry(run: str, usd: float, kind: str = "metered", team: str = "lab") -> LedgerEntry:
    return LedgerEntry.model_validate({
        "team": team, "profile": "rehearsal", "run": run, "stage": "train",
        "capacity": "local", "usd": usd, "chip_hours": 1.0, "kind": kind,
        "time": datetime.now(UTC).isoformat(), "month": month_of(datetime.now(UTC))})


def test_a_pod_writing_the_output_root_gives_its_team_money(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TPURL_LOCAL__ROOT", str(tmp_path / "root"))
    profile = load_profile("rehearsal")
    teams = Teams(teams={"lab": Team(name="lab", usd_per_month=100.0, profiles=("rehearsal",))})
    root = file_uri(tmp_path / "root")
    append(LocalStorage(), root, _entry("spent", 100.0))
    append(LocalStorage(), root, _entry("pod", -1e6))  # what a pod writes
    run = uuid.uuid4().hex
    start_check(profile, run, "r", teams)
    left = allowance_for(run)
    assert left is None or left.left_usd <= 0, left


def test_nan_dollars_leave_the_watch_no_limit(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TPURL_LOCAL__ROOT", str(tmp_path / "root"))
    profile = load_profile("rehearsal")
    teams = Teams(teams={"lab": Team(name="lab", usd_per_month=100.0, profiles=("rehearsal",))})
    entry = _entry("pod", 1.0)
    text = entry.model_dump_json().replace('"usd":1.0', '"usd":NaN')  # json.loads reads NaN
    LocalStorage().create_text(f"{file_uri(tmp_path / 'root')}/tpurl-spend/{entry.month}/pod/"
                               "train-00000-metered.json", text)
    run = uuid.uuid4().hex
    start_check(profile, run, "r", teams)
    left = allowance_for(run)
    assert left is not None and not math.isnan(left.left_usd), left


def test_a_metered_entry_of_another_run_replaces_its_estimate(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TPURL_LOCAL__ROOT", str(tmp_path / "root"))
    profile = load_profile("rehearsal")
    teams = Teams(teams={"lab": Team(name="lab", usd_per_month=100.0, profiles=("rehearsal",))})
    root = file_uri(tmp_path / "root")
    append(LocalStorage(), root, _entry("victim", 90.0, "estimate"))
    forged = _entry("victim", 0.0)
    # filed under the forger's own run directory, naming the victim's run
    LocalStorage().create_text(f"{root}/tpurl-spend/{forged.month}/forger/train-00000-metered.json",
                               forged.model_dump_json())
    run = uuid.uuid4().hex
    start_check(profile, run, "r", teams)
    left = allowance_for(run)
    assert left is not None and left.left_usd <= 10.0, left
