"""How the rehearsal venvs are installed: uv when the orchestrator has it, pip otherwise.

uv builds the 4 GB MaxText venv in about half of pip's time (1 min 45 s against 3 min 24 s
here), but it does not read pip's configuration, so it is given the package sources pip is
configured with (scripts/uv_env.py, the one translation of pip.conf that setup.sh uses too).
Its link mode is ``hardlink`` (uv's Linux default, set so a user's UV_LINK_MODE does not
change it): the venv's 3 GB share the disk with uv's cache instead of doubling it, and
installs take no copy time. The declared patches never write through a link: every write
of flows/core/patching.py replaces the file (flows/core/safe_writes.py `write_text`), so uv's
cache keeps the pristine files (tests/core/test_patching.py). Across file systems uv falls
back to copying.
Both install a lock exactly as written (``--no-deps``): each lock is complete, and the
rehearsal's names ``tensorflow-cpu`` where its dependents require ``tensorflow``
(images/rehearsal/requirements.lock's header).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

from flows.common.paths import REPO_ROOT

UV_ENV_SCRIPT = REPO_ROOT / "scripts" / "uv_env.py"


def uv_binary() -> Path | None:
    """The uv installed beside the orchestrator's Python, unless TPURL_INSTALLER=pip."""
    uv = Path(sys.executable).with_name("uv")
    return uv if uv.exists() and os.environ.get("TPURL_INSTALLER", "uv") == "uv" else None


@cache
def _uv_env_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tpurl_uv_env", UV_ENV_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def uv_sources() -> dict[str, str]:
    """UV_* variables for the sources pip is configured with (those already set win)."""
    module = _uv_env_module()
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                            text=True, check=False).stdout
    return module.uv_environment(module.pip_options(listed), os.environ)


def install_command(python: Path, lock: Path, *, hashes: bool = False,
                    find_links: Path | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, extra environment) that installs ``lock`` into the venv of ``python``.

    ``hashes``: every file must match a hash the lock lists (``--require-hashes``; both
    installers also pick, among the files of a version, only those the lock lists). uv counts
    a constraint file among the requirements there and refuses it for want of a hash, so the
    machine's pip constraints (scripts/uv_env.py, or UV_CONSTRAINT already exported by
    scripts/rehearse.sh) are emptied (uv reads an empty UV_CONSTRAINT as none): a fully
    pinned lock installed with --no-deps has nothing for them to constrain. ``find_links``: one more folder of
    wheels (the tunix wheel, flows/backends/local/tunix_source.py)."""
    extra = [*(["--require-hashes"] if hashes else []),
             *(["--find-links", str(find_links)] if find_links is not None else [])]
    uv = uv_binary()
    if uv is not None:
        sources = {**uv_sources(), **({"UV_CONSTRAINT": ""} if hashes else {})}
        return ([str(uv), "pip", "install", "--python", str(python), "--no-deps", *extra, "-r",
                 str(lock)],
                {**sources, "UV_LINK_MODE": "hardlink"})
    return ([str(python), "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
             "--no-deps", *extra, "-r", str(lock)], {})


def installer_name() -> str:
    return "uv" if uv_binary() is not None else "pip"
