"""The real flow on a real Prefect API writes its team's ledger: with the rehearsal profile in
a team, each stage after infra leaves its metered entry under the team's ledger root (never
the output root), named by the flow run; a stage that fails leaves none (its estimate, if it
had one, keeps counting).
Stand-in stages return at once (as tests/runpage/test_live_page.py does), so no program
runs; the rehearsal prices its chip-hours at $0."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from flows import pipeline
from flows.common.paths import file_uri
from flows.core.failures import StageFailed
from flows.core.spend_ledger import LedgerEntry, append, month_of, read_month, take_place
from flows.core.stage import StageOutput
from flows.core.storage import LocalStorage
from flows.spending import team_spend


class InstantStage:
    """Stands in for a Stage: its output at once, holding ``chip_hours``."""

    def __init__(self, name: str, uris: dict[str, str], fails: bool = False) -> None:
        self.name, self.uris, self.fails = name, uris, fails

    def execute(self, ctx, upstream) -> StageOutput:
        if self.fails:
            raise RuntimeError("evaluation broke")
        return StageOutput(stage=self.name, status="ran", key=f"k-{self.name}",
                           fingerprint=f"f-{self.name}", uris=self.uris, duration_s=0.1,
                           chip_hours=2.0)


def test_each_stage_after_infra_leaves_its_metered_spend_under_the_ledger_root(
        prefect_api: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    teams = tmp_path / "teams.yaml"
    ledger = file_uri(tmp_path / "ledger")
    teams.write_text(f"ledger_root: {ledger}\nteams:\n  lab:\n    usd_per_month: 10\n"
                     "    profiles: [rehearsal]\n")
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(teams))
    root = tmp_path / "root"
    ckpt = file_uri(tmp_path / "ckpt")
    stages = {"image": InstantStage("image", {}), "infra": InstantStage("infra", {}),
              "convert": InstantStage("convert", {"maxtext_checkpoint": ckpt}),
              "train": InstantStage("train", {"actor_checkpoint": ckpt}),
              "export": InstantStage("export", {"hf_export": ckpt}),
              "evaluate": InstantStage("evaluate", {}, fails=True)}
    monkeypatch.setattr(pipeline, "STAGE_BY_NAME", stages)
    state = pipeline.rl_post_training(profile="rehearsal", overrides={"local.root": str(root)},
                                      return_state=True)
    assert state.is_failed(), state  # the evaluation broke
    run = str(state.state_details.flow_run_id)
    entries = read_month(LocalStorage(), ledger, "lab", month_of(state.timestamp)).entries
    assert not (root / "tpurl-spend").exists()
    assert {(e.stage, e.kind) for e in entries} == {
        ("convert", "metered"), ("train", "metered"), ("export", "metered")}
    assert {(e.team, e.profile, e.run, e.capacity, e.chip_hours, e.usd) for e in entries} == {
        ("lab", "rehearsal", run, "local", 2.0, 0.0)}


class OverspendingNeighbour(InstantStage):
    """The image stage, while which a run of the team ahead of this one meters its train at
    $5 against its $2 estimate."""

    def __init__(self, ledger: str, month: str) -> None:
        super().__init__("image", {})
        self.ledger, self.month = ledger, month

    def execute(self, ctx, upstream) -> StageOutput:
        append(LocalStorage(), self.ledger, _entry("ahead", "train", "metered", 5.0,
                                                   self.month))
        return super().execute(ctx, upstream)


def _entry(run: str, stage: str, kind: str, usd: float, month: str) -> LedgerEntry:
    return LedgerEntry.model_validate({
        "team": "lab", "profile": "rehearsal", "run": run, "stage": stage,
        "capacity": "local", "usd": usd, "chip_hours": 1.0, "kind": kind,
        "time": datetime.now(UTC).isoformat(), "month": month})


def test_a_tpu_stage_is_not_started_when_the_runs_ahead_left_too_little(
        prefect_api: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flow's own wiring: the run's estimates ($8) are written and its place taken in
    prepare, behind a run estimated at $2 of the $10; that run then meters $5 while this one
    builds its image, so convert's start finds $13 against $10: the stage is not started
    (`run/team-budget`), the flow fails, and this run's three estimates are written at $0.
    The rehearsal prices nothing, so its plan's estimates are stood in for."""
    month = month_of(datetime.now(UTC))
    ledger = file_uri(tmp_path / "ledger")
    teams = tmp_path / "teams.yaml"
    teams.write_text(f"ledger_root: {ledger}\nteams:\n  lab:\n    usd_per_month: 10\n"
                     "    profiles: [rehearsal]\n")
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(teams))
    append(LocalStorage(), ledger, _entry("ahead", "train", "estimate", 2.0, month))
    take_place(LocalStorage(), ledger, "lab", month, "ahead")
    monkeypatch.setattr(team_spend, "stage_estimates", lambda profile: {
        "convert": (2.0, 1.0), "train": (5.0, 1.0), "export": (1.0, 1.0)})
    ckpt = file_uri(tmp_path / "ckpt")
    monkeypatch.setattr(pipeline, "STAGE_BY_NAME", {
        "image": OverspendingNeighbour(ledger, month), "infra": InstantStage("infra", {}),
        "convert": InstantStage("convert", {"maxtext_checkpoint": ckpt}),
        "train": InstantStage("train", {"actor_checkpoint": ckpt}),
        "export": InstantStage("export", {"hf_export": ckpt})})
    state = pipeline.rl_post_training(
        profile="rehearsal", overrides={"local.root": str(tmp_path / "root"), "eval": "",
                                        "promotion": "", "watch": ""}, return_state=True)
    assert state.is_failed(), state
    failure = state.result(raise_on_failure=False)
    assert isinstance(failure, StageFailed), failure
    assert failure.diagnosis.code == "run/team-budget"
    assert "stage convert not started" in failure.diagnosis.summary
    run = str(state.state_details.flow_run_id)
    read = read_month(LocalStorage(), ledger, "lab", month)
    assert read.order[run] == 1 and not read.refused
    mine = {(e.stage, e.kind): e.usd for e in read.entries if e.run == run}
    assert mine == {("convert", "estimate"): 2.0, ("train", "estimate"): 5.0,
                    ("export", "estimate"): 1.0, ("convert", "metered"): 0.0,
                    ("train", "metered"): 0.0, ("export", "metered"): 0.0}
