"""Fixtures for the GKE backend tests: the tutorial profile."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.config import Profile
from tests.support.profiles import SMOKE, TUTORIAL, tutorial_profile


@pytest.fixture
def profile() -> Profile:
    return tutorial_profile()


@pytest.fixture
def two_teams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The tutorial's profile in team-a, the smoke profile in team-b, one teams file."""
    teams = tmp_path / "teams.yaml"
    teams.write_text(f"teams:\n  team-a:\n    usd_per_month: 1000\n    profiles: [{TUTORIAL}]\n"
                     f"  team-b:\n    usd_per_month: 1000\n    profiles: [{SMOKE}]\n")
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(teams))
    yield
