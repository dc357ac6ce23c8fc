"""The teams file (flows/config/teams.py): the shipped one puts the tutorial's profile and
the smoke profile in one team; a bad file is refused naming the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.config.errors import ProfileError
from flows.config.teams import TEAMS_FILE, load_teams
from tests.support.profiles import SMOKE, TUTORIAL


def test_the_shipped_file_puts_the_tutorial_and_smoke_profiles_in_one_team() -> None:
    teams = load_teams(TEAMS_FILE)
    team = teams.team_of(TUTORIAL)
    assert team is not None and team is teams.team_of(SMOKE)
    assert team.usd_per_month > 0
    assert teams.team_of("rehearsal") is None


def test_no_file_means_no_teams(tmp_path: Path) -> None:
    assert load_teams(tmp_path / "absent.yaml").teams == {}


def _refused(tmp_path: Path, text: str) -> list[tuple[str, str, str]]:
    path = tmp_path / "teams.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError) as exc:
        load_teams(path)
    assert f"the teams file {path} is invalid" in str(exc.value)
    return [(i.field, i.problem, i.fix) for i in exc.value.issues]


def test_a_profile_in_two_teams_is_refused_naming_both(tmp_path: Path) -> None:
    [(field, problem, fix)] = _refused(tmp_path, (
        f"teams:\n  a: {{usd_per_month: 5, profiles: [{SMOKE}]}}\n"
        f"  b: {{usd_per_month: 5, profiles: [rehearsal, {SMOKE}]}}\n"))
    assert field == "teams.b.profiles.1"
    assert "already in team a" in problem and "from team b or from team a" in fix


def test_a_budget_that_is_not_positive_names_its_field(tmp_path: Path) -> None:
    [(field, problem, fix)] = _refused(tmp_path, "teams:\n  a: {usd_per_month: 0, "
                                                 "profiles: [rehearsal]}\n")
    assert field == "teams.a.usd_per_month" and "greater than 0" in problem
    assert "a number above 0" in fix


def test_an_unknown_key_or_profile_is_refused(tmp_path: Path) -> None:
    issues = _refused(tmp_path, "teams:\n  a: {usd_per_month: 5, profiles: [rehearsal], "
                                "budget: 3}\n")
    assert [(f, fx) for f, _, fx in issues] == [("teams.a.budget", "a team has only "
                                                 "usd_per_month, profiles, tpu_chips, "
                                                 "borrowing_limit_chips, fair_weight and "
                                                 "ledger_root; remove the key or correct its spelling")]
    [(field, problem, fix)] = _refused(tmp_path, "teams:\n  a: {usd_per_month: 5, "
                                                 "profiles: [no-such-profile]}\n")
    assert field == "teams.a.profiles.0" and "no profile under deployments/profiles" in problem
    assert "rehearsal" in fix


def test_a_ledger_root_is_a_bucket_or_a_directory_and_a_team_inherits_the_files(
        tmp_path: Path) -> None:
    path = tmp_path / "teams.yaml"
    path.write_text("ledger_root: gs://corp-ledger/\nteams:\n  a: {usd_per_month: 5, "
                    "profiles: [rehearsal]}\n  b: {usd_per_month: 5, profiles: "
                    "[smoke-qwen3-0.6b-v6e-8], ledger_root: 'file:///srv/ledger'}\n")
    teams = load_teams(path)
    assert teams.teams["a"].ledger_root == "gs://corp-ledger"
    assert teams.teams["b"].ledger_root == "file:///srv/ledger"
    for good in ("gs://abc", "gs://corp.ledger_1/spend/2026-q4", "gs://c-l/A/b.c_d-e"):
        path.write_text(f"ledger_root: {good}\nteams:\n  a: {{usd_per_month: 5, profiles: "
                        "[rehearsal]}\n")
        assert load_teams(path).teams["a"].ledger_root == good
    # a bucket and prefix go into the IAM condition `tpurl flow-identity` prints for `sh`
    for bad in ("corp-ledger", "gs://", "file:///srv/../etc", "gs://Corp-Ledger",
                "gs://ab", "gs://corp-ledger/sp end", "gs://corp-ledger/x;rm -rf ~",
                'gs://corp-ledger/a"b', "gs://corp-ledger/$(id)"):
        [(field, problem, fix)] = _refused(tmp_path, "teams:\n  a: {usd_per_month: 5, "
                                           "profiles: [rehearsal], ledger_root: "
                                           f"'{bad}'}}\n")
        assert field == "teams.a.ledger_root" and "gs://BUCKET" in fix, (bad, problem)


@pytest.mark.parametrize("name", ["Lab A", "ml_infra", "-lab", "lab-", "ÉQUIPE", "a" * 59])
def test_a_team_name_that_is_no_kubernetes_name_is_refused_with_one_that_is(
        tmp_path: Path, name: str) -> None:
    [(field, problem, fix)] = _refused(tmp_path, f"teams:\n  {name!r}: {{usd_per_month: 5, "
                                                 "profiles: [rehearsal]}\n")
    assert field == f"teams.{name}"
    assert "Kubernetes name" in problem or "at most 58" in problem
    suggested = fix.split("e.g. ", 1)[1].split("'")[1]
    path = tmp_path / "teams.yaml"  # the fix applied loads
    path.write_text(f"teams:\n  {suggested}: {{usd_per_month: 5, profiles: [rehearsal]}}\n")
    assert list(load_teams(path).teams) == [suggested]


@pytest.mark.parametrize("name", ["a", "lab-a", "0team", "a" * 58])
def test_a_kubernetes_name_up_to_58_characters_loads(tmp_path: Path, name: str) -> None:
    path = tmp_path / "teams.yaml"
    path.write_text(f"teams:\n  {name}: {{usd_per_month: 5, profiles: [rehearsal]}}\n")
    assert list(load_teams(path).teams) == [name]
