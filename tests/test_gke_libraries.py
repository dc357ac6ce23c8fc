"""A GKE profile in a venv set up for the rehearsal (`setup.sh --run`, no cloud libraries):
`tpurl validate` and `tpurl plan` name the one command that installs them instead of ending
in an import's traceback, and after that command both answer. The whole script for real, on
a copy of the project (the machine's installer and package index)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from flows.backends import GCP_EXTRA_MODULES, gcp_extra_missing
from flows.common.paths import REPO_ROOT
from flows.config.errors import EnvironmentNotReady
from tests.support.profiles import TUTORIAL_REQUIRED

# installs the project twice (uv's cache warm: about a minute, mostly waiting on the disk)
pytestmark = [pytest.mark.services, pytest.mark.realtime]

SMOKE = "smoke-qwen3-0.6b-v6e-8"
FIELDS = [part for field, value in TUTORIAL_REQUIRED.items() if field != "gke.reservation"
          for part in ("--set", f"{field}={value}")]


def test_only_a_missing_cloud_library_is_answered_with_the_install_command() -> None:
    for module in sorted(GCP_EXTRA_MODULES):
        error = gcp_extra_missing("p", ModuleNotFoundError(f"No module named '{module}.x'",
                                                           name=f"{module}.x"))
        assert isinstance(error, EnvironmentNotReady)
        assert "bash scripts/setup.sh --gke" in str(error) and f"`{module}.x`" in str(error)
    ours = ModuleNotFoundError("No module named 'flows.nothing'", name="flows.nothing")
    with pytest.raises(ModuleNotFoundError) as raised:  # our own bug: not an install problem
        gcp_extra_missing("p", ours)
    assert raised.value is ours


def test_a_rehearsal_venv_names_the_gke_setup_and_that_setup_validates_and_plans(
        tmp_path: Path) -> None:
    root = tmp_path / "clone"
    (root / "scripts").mkdir(parents=True)
    for name in ("scripts/setup.sh", "scripts/uv_env.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, root / name)
    for folder in ("flows", "deployments", "images"):
        shutil.copytree(REPO_ROOT / folder, root / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VIRTUAL_ENV", "TPURL_", "PREFECT_API"))}
    env["HF_TOKEN"] = "x"  # the profile's token reference: set, never used by these commands

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), cwd=root, env=env, capture_output=True, text=True,
                              timeout=900)

    setup = run("bash", "scripts/setup.sh", "--run")
    assert setup.returncode == 0, setup.stderr
    for command in ("validate", "plan"):
        done = run(".venv/bin/tpurl", command, SMOKE, *FIELDS)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        assert "bash scripts/setup.sh --gke" in done.stderr and "`kubernetes" in done.stderr

    setup = run("bash", "scripts/setup.sh", "--gke")
    assert setup.returncode == 0, setup.stderr
    done = run(".venv/bin/tpurl", "validate", SMOKE, *FIELDS)
    assert (done.returncode, done.stdout.strip()) == (
        0, f"profile {SMOKE} is valid (backend gke)"), done.stderr
    done = run(".venv/bin/tpurl", "plan", SMOKE, *FIELDS)
    assert done.returncode == 0 and "JobSet" in done.stdout, (done.stdout[-2000:], done.stderr)
    again = run("bash", "scripts/setup.sh", "--run")  # a GKE venv serves a rehearsal as it is
    assert "nothing changed since the last setup" in again.stdout, again.stdout
