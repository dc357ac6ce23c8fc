"""The real flow on a real Prefect API writes its team's view at its end: a markdown artifact
under the team's key naming the
run and the month's spend, and on the run's own page the line with its cost and what the
team has left. Stand-in stages return at once (tests/run/test_team_ledger_flow.py's), so no
program runs; the rehearsal prices its chip-hours at $0, so the month's spend is an earlier
run's entry written here."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    ArtifactFilterKey,
)

from flows import pipeline
from flows.common.paths import file_uri
from flows.core.spend_ledger import LedgerEntry, append, month_of
from flows.core.storage import LocalStorage
from flows.operations.team_view import team_key
from flows.runpage.markdown_text import md_text
from tests.run.test_team_ledger_flow import InstantStage


def test_the_run_writes_its_teams_view_and_its_cost_line(
        prefect_api: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    teams = tmp_path / "teams.yaml"
    ledger = file_uri(tmp_path / "ledger")
    teams.write_text(f"ledger_root: {ledger}\nteams:\n  lab-a:\n    usd_per_month: 10\n"
                     "    profiles: [rehearsal]\n")
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(teams))
    root = tmp_path / "root"
    month = month_of(datetime.now(UTC))
    append(LocalStorage(), ledger, LedgerEntry.model_validate({
        "team": "lab-a", "profile": "rehearsal", "run": "earlier-run", "stage": "train",
        "capacity": "local", "usd": 7.5, "chip_hours": 1.0, "kind": "metered",
        "time": datetime.now(UTC).isoformat(), "month": month, "run_name": "rehearsal-earlier"}))
    ckpt = file_uri(tmp_path / "ckpt")
    stages = {"image": InstantStage("image", {}), "infra": InstantStage("infra", {}),
              "convert": InstantStage("convert", {"maxtext_checkpoint": ckpt}),
              "train": InstantStage("train", {"actor_checkpoint": ckpt}),
              "export": InstantStage("export", {"hf_export": ckpt})}
    monkeypatch.setattr(pipeline, "STAGE_BY_NAME", stages)
    state = pipeline.rl_post_training(
        profile="rehearsal", overrides={"local.root": str(root), "eval": "",
                                        "promotion": "", "watch": ""}, return_state=True)
    assert state.is_completed(), state
    run_id = state.state_details.flow_run_id
    key = team_key("lab-a")
    assert key == "team-lab-a"  # a Kubernetes name is its own key
    with get_client(sync_client=True) as client:
        run_name = client.read_flow_run(run_id).name
        [view] = client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=[key])))
        mine = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[run_id])))
    text = str(view.data)
    assert view.type == "markdown" and view.flow_run_id == run_id
    assert "Budget $10.00 · spent $7.50 · left $2.50" in text, text
    assert f"| {md_text(run_name)} (this run) | Completed | $0.00 |" in text, text
    assert "| rehearsal-earlier | unknown | $7.50 |" in text, text
    assert "**rehearsal**: not read (the profile has no eval section" in text
    [line] = [a for a in mine if (a.description or "").startswith("This run's cost")]
    assert str(line.data).startswith(f"This run cost $0.00; team lab-a has $2.50 left of its "
                                     f"$10.00 for {month}")


def test_a_run_that_fails_in_a_stage_still_shows_in_its_teams_view(
        prefect_api: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    teams = tmp_path / "teams.yaml"
    teams.write_text(f"ledger_root: {file_uri(tmp_path / 'ledger')}\nteams:\n  broken:\n"
                     "    usd_per_month: 5\n    profiles: [rehearsal]\n")
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(teams))
    ckpt = file_uri(tmp_path / "ckpt")
    stages = {"image": InstantStage("image", {}), "infra": InstantStage("infra", {}),
              "convert": InstantStage("convert", {"maxtext_checkpoint": ckpt}),
              "train": InstantStage("train", {}, fails=True)}
    monkeypatch.setattr(pipeline, "STAGE_BY_NAME", stages)
    state = pipeline.rl_post_training(
        profile="rehearsal", overrides={"local.root": str(tmp_path / "root"), "eval": "",
                                        "promotion": "", "watch": ""}, return_state=True)
    assert state.is_failed(), state
    with get_client(sync_client=True) as client:
        run_name = client.read_flow_run(state.state_details.flow_run_id).name
        [view] = client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=["team-broken"])))
    text = str(view.data)
    assert "Budget $5.00 · spent $0.00 · left $5.00" in text, text
    assert f"| {md_text(run_name)} (this run) | Failed | $0.00 |" in text, text
