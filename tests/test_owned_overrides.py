"""A flow run's ``overrides={"local.venv": "~"}`` (what a deployment run's parameters carry)
is refused by the real flow on a real Prefect API before any stage, and the home directory
keeps its files."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.services


def test_a_run_overriding_the_venv_with_home_is_refused_before_any_stage(
        prefect_api: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.config.errors import ProfileError
    from flows.pipeline import rl_post_training

    home, cache = tmp_path / "home", tmp_path / "cache"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TPURL_CACHE_DIR", str(cache))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "temp"))
    state = rl_post_training(profile="rehearsal", overrides={
        "local.root": str(cache / "root"), "local.venv": "~"}, return_state=True)
    assert state.is_failed()
    error = state.result(raise_on_failure=False)
    assert isinstance(error, ProfileError)
    assert [i.field for i in error.issues] == ["local.venv"]
    assert sorted(p.name for p in home.iterdir()) == ["thesis.tex"]
    assert not (cache / "root").exists()
