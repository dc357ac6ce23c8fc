"""Attacks on what the tool may delete, against the real image stage, backend and CLI: ``local.venv``
naming a home directory (by ``--set``, by a flow run's overrides, or by a symlink), a venv
path that holds someone's files without our marker, and a leftover directory that is a link
out of the output root. Each is refused; every file survives."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from flows.backends.local.backend import LocalBackend
from flows.common.ownership import OWNER_MARKER
from flows.common.paths import REPO_ROOT
from flows.config import load_profile
from flows.config.errors import ProfileError
from flows.core.failures import StageFailed
from flows.core.layout import Layout
from flows.core.stage import StageContext
from flows.core.storage import LocalStorage, file_uri, join

TPURL = str(Path(sys.executable).with_name("tpurl"))
LOG = logging.getLogger("tpurl-test")


def _precious(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "thesis.tex").write_text("years of work")
    return directory


def _context(backend: LocalBackend) -> StageContext:
    return StageContext(profile=backend.profile, layout=Layout(backend.profile), backend=backend,
                        storage=LocalStorage(), logger=LOG)


@pytest.mark.parametrize("field", ["local.venv", "local.hf_check_venv"])
def test_the_image_stage_refuses_a_venv_path_holding_files_it_did_not_create(
        tmp_path: Path, field: str) -> None:
    """No bin/python in it and no marker of ours: the stage refuses it rather than `rmtree`
    it and build a venv in its place."""
    foreign = _precious(tmp_path / "someones-dir")
    profile = load_profile("rehearsal", {"local.root": str(tmp_path / "root"),
                                         field: str(foreign)}, environ={})
    backend = LocalBackend(profile, logger=LOG)
    with pytest.raises(StageFailed) as failed:
        backend.image.run(_context(backend))
    diagnosis = failed.value.diagnosis
    assert diagnosis.code == "image/venv-not-ours" and field in diagnosis.summary
    assert field in diagnosis.fix and OWNER_MARKER in diagnosis.detail
    assert (foreign / "thesis.tex").read_text() == "years of work"
    assert sorted(p.name for p in foreign.iterdir()) == ["thesis.tex"]  # not even a marker


def test_a_venv_of_ours_without_the_install_marker_is_judged_by_the_owner_marker(
        tmp_path: Path) -> None:
    """A venv whose creation was interrupted (marker, no python) is ours: it passes the
    refusal (and _ensure_venv may remove it); the same directory without the marker fails."""
    from flows.backends.local.image import _refuse_foreign

    half = tmp_path / "venv"
    half.mkdir()
    (half / OWNER_MARKER).write_text("")
    _refuse_foreign(half, "local.venv")  # no exception
    (half / OWNER_MARKER).unlink()
    with pytest.raises(StageFailed):
        _refuse_foreign(half, "local.venv")


def test_clearing_leftovers_through_a_link_out_of_the_root_is_refused(tmp_path: Path) -> None:
    outside = _precious(tmp_path / "outside")
    root = tmp_path / "root"
    profile = load_profile("rehearsal", {"local.root": str(root)}, environ={})
    backend = LocalBackend(profile, logger=LOG)
    (root / "model").mkdir(parents=True)
    (root / "model" / "convert").symlink_to(outside, target_is_directory=True)
    with pytest.raises(StageFailed) as failed:
        backend.clear_leftovers("convert", join(file_uri(root), "model", "convert"))
    assert failed.value.diagnosis.code == "storage/outside-root"
    assert (outside / "thesis.tex").read_text() == "years of work"
    # a directory that is really inside is still cleared
    inside = root / "model" / "train"
    inside.mkdir()
    (inside / "half-written").write_text("x")
    assert backend.clear_leftovers("train", file_uri(inside)) == 1
    assert not (inside / "half-written").exists()


def _isolated_env(tmp_path: Path) -> dict[str, str]:
    """A home outside the temporary directory and the cache, as on a real machine."""
    home = _precious(tmp_path / "home")
    (tmp_path / "temp").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(HOME=str(home), TMPDIR=str(tmp_path / "temp"),
               TPURL_CACHE_DIR=str(tmp_path / "cache"))
    return env


@pytest.mark.parametrize("value", ["~", "/", "..", "~/venv"])
def test_tpurl_refuses_a_venv_outside_its_places_before_anything(tmp_path: Path,
                                                                 value: str) -> None:
    env = _isolated_env(tmp_path)
    for command in ("validate", "run"):
        done = subprocess.run([TPURL, command, "rehearsal", "--set", f"local.venv={value}",
                               "--set", f"local.root={tmp_path}/cache/root"], cwd=REPO_ROOT,
                              env=env, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "local.venv:" in done.stderr and "not inside the repository" in done.stderr
        assert "fix: give local.venv a path inside the repository" in done.stderr
    assert sorted(p.name for p in (tmp_path / "home").iterdir()) == ["thesis.tex"]
    assert not (tmp_path / "cache" / "root").exists()


def test_a_symlink_named_as_the_venv_that_leads_home_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = _precious(tmp_path / "home")
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("TPURL_CACHE_DIR", str(cache))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "temp"))
    (cache / "venv").symlink_to(home, target_is_directory=True)
    with pytest.raises(ProfileError) as refused:
        load_profile("rehearsal", {"local.root": str(cache / "root"),
                                   "local.venv": str(cache / "venv")}, environ={})
    (issue,) = refused.value.issues
    assert issue.field == "local.venv" and f"resolves to {home}" in issue.problem
    # and the environment's override (TPURL_LOCAL__VENV) is judged the same way
    with pytest.raises(ProfileError):
        load_profile("rehearsal", {"local.root": str(cache / "root")},
                     environ={"TPURL_LOCAL__VENV": "~"})
    assert (home / "thesis.tex").exists()
