"""The real flow on a real Prefect API writes its team's ledger: with the rehearsal profile in
a team, each stage after infra leaves its metered entry under the team's ledger root (never
the output root), named by the flow run; a stage that fails leaves none (its estimate, if it
had one, keeps counting).
Stand-in stages return at once (as tests/runpage/test_live_page.py does), so no program
runs; the rehearsal prices its chip-hours at $0."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows import pipeline
from flows.common.paths import file_uri
from flows.core.spend_ledger import month_of, read_month
from flows.core.stage import StageOutput
from flows.core.storage import LocalStorage


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
