"""The image stage's rerun over a venv whose install was stopped part-way (Ctrl-C or a
killed run during the image stage): the interpreter exists, the patched packages may not
yet. A stop-and-resume loop of the CLI met this as an internal error ("find_spec(...) is
None") in the rerun's restore of pristine files, before the install that would repair it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flows.backends.local.image import _all_package_roots, _package_roots


def _venv(tmp_path: Path, packages: tuple[str, ...]) -> Path:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    for name in packages:
        (site / name).mkdir()
        (site / name / "__init__.py").write_text("")
    return venv


def test_a_venv_stopped_before_its_packages_has_nothing_to_restore(tmp_path: Path) -> None:
    assert _package_roots(_venv(tmp_path, ())) == {}


def test_a_venv_stopped_between_its_packages_restores_the_one_it_has(tmp_path: Path) -> None:
    venv = _venv(tmp_path, ("tunix",))
    roots = _package_roots(venv)
    assert list(roots) == ["tunix"] and (roots["tunix"] / "tunix").is_dir()
    with pytest.raises(RuntimeError, match="has no maxtext after its install"):
        _all_package_roots(venv)  # after the install, a missing package is its failure
