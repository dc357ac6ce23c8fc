"""The image stage's choice of tunix, through LocalImage itself: neither GitHub nor a good
wheel is refused before the venv is touched (no silent fall back to PyPI's 0.1.7); a venv
already installed from this lock needs neither; the hashed lock installs the wheel way.

GitHub is made unreachable with git's own ``url.<base>.insteadOf`` (a global config file of
the test's), so the outcome does not depend on this machine's network."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from flows.backends.local.backend import LocalBackend
from flows.backends.local.image import REHEARSAL_LOCKS, LocalImage
from flows.backends.local.tunix_source import WHEEL_DIR_ENV, load_pin
from flows.common.paths import REHEARSAL_LOCK
from flows.config import load_profile
from flows.core.failures import FailureCategory, StageFailed
from flows.core.layout import Layout
from flows.core.stage import StageContext
from flows.core.storage import LocalStorage


@pytest.fixture
def no_github(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "gitconfig"
    config.write_text('[url "https://github.invalid/"]\n\tinsteadOf = https://github.com/\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.delenv(WHEEL_DIR_ENV, raising=False)


def _stage(tmp_path: Path, venv: Path) -> tuple[LocalImage, StageContext]:
    profile = load_profile("rehearsal", {"local.root": str(tmp_path / "root"),
                                         "local.venv": str(venv),
                                         "local.hf_check_venv": str(tmp_path / "check")},
                           environ={})
    backend = LocalBackend(profile, logger=logging.getLogger("tpurl-test"), stage="image")
    ctx = StageContext(profile=profile, layout=Layout(profile), backend=backend,
                       storage=LocalStorage(), logger=logging.getLogger("tpurl-test"))
    return LocalImage(backend), ctx


@pytest.mark.parametrize("wheel", [None, "missing", "other bytes"])
def test_no_way_to_the_images_tunix_fails_before_the_venv_is_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_github: None,
        wheel: str | None) -> None:
    if wheel is not None:
        folder = tmp_path / "wheels"
        folder.mkdir()
        if wheel == "other bytes":
            (folder / load_pin(REHEARSAL_LOCK).wheel_name).write_bytes(b"not the commit")
        monkeypatch.setenv(WHEEL_DIR_ENV, str(folder))
    venv = tmp_path / "venv"
    image, ctx = _stage(tmp_path, venv)
    with pytest.raises(StageFailed) as failed:
        image.run(ctx)
    diagnosis = failed.value.diagnosis
    assert diagnosis.code == "image/tunix-source"
    assert diagnosis.category is FailureCategory.USER_ERROR
    assert "GitHub" in diagnosis.detail and WHEEL_DIR_ENV in diagnosis.detail
    assert WHEEL_DIR_ENV in diagnosis.fix
    assert not venv.exists() and not (tmp_path / "check").exists()


def test_a_venv_installed_from_this_lock_needs_no_source(tmp_path: Path,
                                                         no_github: None) -> None:
    """Offline reruns: the marker says the venv holds this lock and commit, so nothing is
    installed and no source is asked for: the stage goes on to find the packages to patch,
    which this stand-in venv (the system Python) lacks, so that is where it stops."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(shutil.which("python3") or "/usr/bin/python3")
    (venv / "tpurl-installed-lock.txt").write_text(
        "".join(lock.read_text() for lock in REHEARSAL_LOCKS))
    image, ctx = _stage(tmp_path, venv)
    with pytest.raises(RuntimeError, match="has no tunix, maxtext after its install"):
        image.run(ctx)
    assert not (venv / "tpurl-lock-without-tunix.txt").exists()


@pytest.mark.parametrize("tool", ["uv", "pip"])
def test_the_github_way_installs_the_hashed_rest_then_the_commit_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: str) -> None:
    """pip and uv refuse a git requirement in --require-hashes mode, so the GitHub way is two
    installs: the lock without its google-tunix block, hash-checked, then the commit by
    itself, --no-deps as the image installs it."""
    from flows.backends.local.image import _install_steps
    from flows.backends.local.tunix_source import TUNIX_GITHUB_FILE, TunixSource

    monkeypatch.setenv("TPURL_INSTALLER", tool)
    python = tmp_path / "venv" / "bin" / "python"
    (tmp_path / "venv").mkdir()
    (rest_name, (rest, _)), (tunix_name, (tunix, _)) = _install_steps(
        python, tmp_path / "venv", REHEARSAL_LOCK, TunixSource("github"))
    assert (rest_name, tunix_name) == ("", "-tunix")
    written = Path(rest[rest.index("-r") + 1])
    assert "--require-hashes" in rest and written.parent == tmp_path / "venv"
    assert "google-tunix==" not in written.read_text()
    assert written.read_text().count("--hash=") == REHEARSAL_LOCK.read_text().count("--hash=") - 1
    assert "--no-deps" in tunix and "--require-hashes" not in tunix
    assert tunix[tunix.index("-r") + 1] == str(TUNIX_GITHUB_FILE)
    (wheel_step,) = _install_steps(python, tmp_path / "venv", REHEARSAL_LOCK,
                                   TunixSource("wheel", tmp_path / "wheels"))
    argv = wheel_step[1][0]
    assert "--require-hashes" in argv and argv[argv.index("--find-links") + 1] == \
        str(tmp_path / "wheels") and argv[argv.index("-r") + 1] == str(REHEARSAL_LOCK)
