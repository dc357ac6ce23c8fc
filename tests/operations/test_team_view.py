"""The team view's markdown and keys (flows/operations/team_view.py), pure: built from ledger
entries through the costs module's own summary, and a promoted pointer, without Prefect."""

from __future__ import annotations

import pytest

from flows.config.teams import Team
from flows.core.promotion import PromotedModel
from flows.core.scores import ScoreSummary
from flows.core.spend_ledger import LedgerEntry
from flows.operations.costs import summarize
from flows.operations.team_view import (
    ARTIFACT_KEY,
    Champion,
    TeamView,
    run_cost_line,
    team_key,
    team_markdown,
)

MONTH = "2026-11"
TEAM = Team(name="lab", usd_per_month=100, profiles=("rehearsal", "other"))


def _entry(run: str, stage: str, kind: str, usd: float, profile: str = "rehearsal",
           ) -> LedgerEntry:
    return LedgerEntry.model_validate({
        "team": "lab", "profile": profile, "run": run, "stage": stage, "capacity": "spot",
        "usd": usd, "chip_hours": usd / 2.0, "kind": kind, "time": f"{MONTH}-20T10:00:00+00:00",
        "month": MONTH, "run_name": f"{profile}-{run}"})


def _model() -> PromotedModel:
    half = {"value": 0.5, "low": 0.4, "high": 0.6}
    scores = ScoreSummary.model_validate({
        "samples": 8, "accuracy": half, "format_accuracy": half, "mean_reward": half,
        "reward_samples": 8, "checkpoint": "file:///c"})
    return PromotedModel(model_uri="gs://b/export", trained_checkpoint="gs://b/ckpt",
                         scores=scores, base_scores=scores, run="rehearsal-a", dataset="hub:d",
                         revision="main", promoted_at=f"{MONTH}-20T11:00:00+00:00",
                         metric="accuracy", eval_key="ek1", score_key="sk1",
                         export_digest="ed1", recipe_digest="rd1",
                         reward_functions=["exact_match"])


def _view() -> TeamView:
    entries = [_entry("a", "train", "estimate", 30.0), _entry("a", "train", "metered", 24.0),
               _entry("a", "evaluate", "metered", 4.0), _entry("b", "train", "estimate", 30.0),
               _entry("c", "train", "metered", 10.0, profile="other")]
    costs = summarize(TEAM, MONTH, entries, {})
    return TeamView(costs, TEAM.profiles, {"a": "Completed", "b": "Crashed"},
                    [Champion("rehearsal", _model(), "gs://b/tpurl-results/rehearsal/p.json"),
                     Champion("other")], this_run="a")


def test_the_view_shows_the_month_by_profile_and_stage_and_its_runs() -> None:
    text = team_markdown(_view())
    assert f"### Team lab · {MONTH}" in text
    assert "Budget $100.00 · spent $68.00 · left $32.00 (of it $30.00 at the plan's estimate)" \
        in text
    assert "| rehearsal | $58.00 |" in text and "| other | $10.00 |" in text
    assert "| train | $64.00 |" in text and "| evaluate | $4.00 |" in text
    assert "| rehearsal | rehearsal-a (this run) | Completed | $28.00 |" in text
    assert "| rehearsal | rehearsal-b | Crashed | $30.00 |" in text
    assert "| other | other-c | unknown | $10.00 |" in text


def test_each_member_shows_its_champion_and_lineage_or_that_none_is_promoted() -> None:
    text = team_markdown(_view())
    assert "**rehearsal**: run rehearsal-a" in text
    # escaped as markdown text: the cells come from files a training pod can write
    assert "accuracy 0.5000 \\[0.4000, 0.6000\\]" in text
    assert "reward functions exact\\_match \\(recipe rd1\\)" in text
    assert "export: `gs://b/export`" in text
    for part in ("`gs://b/ckpt`", "`ek1`", "`sk1`", "`ed1`", "`hub:d`"):
        assert part in text
    assert "**other**: nothing promoted yet" in text
    assert "not read (the profile does not load)" in team_markdown(TeamView(
        summarize(TEAM, MONTH, [], {}), TEAM.profiles,
        champions=[Champion("x", problem="the profile does not load")]))


def test_an_empty_month_says_so() -> None:
    text = team_markdown(TeamView(summarize(TEAM, MONTH, [], {}), TEAM.profiles))
    assert "Budget $100.00 · spent $0.00 · left $100.00" in text
    assert "No run has spent this month yet." in text


def test_the_run_page_line_names_the_cost_and_what_is_left() -> None:
    line = run_cost_line(28.0, _view().costs)
    assert line.startswith("This run cost $28.00; team lab has $32.00 left of its $100.00 "
                           f"for {MONTH}")
    assert "`team-lab`" in line


@pytest.mark.parametrize("name", ["lab", "ml-infra", "team2"])
def test_a_name_that_is_a_key_already_is_kept(name: str) -> None:
    assert team_key(name) == f"team-{name}"


@pytest.mark.parametrize("name, start", [
    ("Lab A", "team-lab-a-"), ("lab_a", "team-lab-a-"), ("ML.Infra", "team-ml-infra-"),
    ("équipe", "team-quipe-"), ("研究", "team-"), ("--x--", "team-x-")])
def test_a_name_that_needs_changing_becomes_a_valid_key_of_its_own(name: str,
                                                                    start: str) -> None:
    key = team_key(name)
    assert ARTIFACT_KEY.fullmatch(key) and key.startswith(start) and key != "team-"
    assert len({team_key("Lab A"), team_key("lab_a"), team_key("lab-a")}) == 3


def test_the_key_rule_is_prefects() -> None:
    """The pattern copies prefect 3.9.1's ArtifactKey validator; its own check agrees."""
    from prefect.types.names import ArtifactKey
    from pydantic import TypeAdapter, ValidationError

    adapter = TypeAdapter(ArtifactKey)
    for name in ("Lab A", "研究", "équipe", "a/b"):
        assert adapter.validate_python(team_key(name)) == team_key(name)
    with pytest.raises(ValidationError):
        adapter.validate_python("Lab A")


def test_a_view_that_cannot_be_written_warns_and_never_raises(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from flows.operations import team_view

    def broken(*args: object) -> TeamView:
        raise OSError("the bucket refused the read")

    monkeypatch.setattr(team_view, "build_view", broken)
    team_view.publish_team_view(TEAM, MONTH, object(), "run", 1.0)  # type: ignore[arg-type]
    assert "team lab's view not published: the bucket refused the read" in caplog.text


def test_each_member_shows_its_newest_measured_throughput() -> None:
    view = _view()
    view.throughput = {"rehearsal": "v6e 2x4, 8 chips: 66.7 generated tokens/s per chip",
                       "other": "no run has measured it yet"}
    text = team_markdown(view)
    assert "#### Throughput (each member's newest measured run)" in text
    assert "- **rehearsal**: v6e 2x4, 8 chips\\: 66.7 generated tokens/s per chip" in text
    assert "- **other**: no run has measured it yet" in text
    assert text.index("#### Throughput") < text.index("#### Champions")
