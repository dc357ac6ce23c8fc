"""Where the rehearsal venv's tunix comes from: the image's GitHub commit, or the wheel of it.

The tpu_post_training:0.2.4 image does not install tunix from PyPI: MaxText maxtext-v0.2.4
pins a GitHub commit (src/dependencies/extra_deps/post_train_github_deps.txt:1) and installs
it with --no-deps (src/dependencies/scripts/install_post_train_extra_deps.py:99-109). PyPI's
newest, 0.1.7, is 218 commits older, so a rehearsal on it would prove another trainer. The
rehearsal installs the same commit: from GitHub where GitHub answers (the commit names its
content, so no hash is needed), otherwise from a folder that holds the wheel built from that
commit (the ``TPURL_WHEEL_DIR`` variable names it), checked against the sha256 the lock
records before anything is installed. Neither is an error naming both ways: a silent fall
back to PyPI's tunix would hand the plan's parity record a version the image does not have.

The pin lives in two files of images/rehearsal: requirements.lock holds ``google-tunix==V``
with the wheel's hash (so the lock installs whole, hash-checked, with the folder as
find-links), tunix-from-github.txt the ``git+`` requirement of the commit.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from flows.common.hashed_lock import hashed_pins
from flows.common.paths import TUNIX_GITHUB_FILE

WHEEL_DIR_ENV = "TPURL_WHEEL_DIR"
DISTRIBUTION = "google-tunix"
GITHUB_PROBE_TIMEOUT_S = 20.0
_LOCK_LINE = re.compile(r"^google-tunix==(?P<version>\S+)\s*\\?\s*$")
_GITHUB_LINE = re.compile(r"^google-tunix @ git\+(?P<url>https://\S+?)@(?P<commit>[0-9a-f]{40})$")


@dataclass(frozen=True)
class TunixPin:
    """The one tunix the rehearsal may run: its version, its wheel's sha256, its commit."""

    version: str
    wheel_sha256: str
    repo_url: str
    commit: str

    @property
    def wheel_name(self) -> str:
        return f"google_tunix-{self.version}-py3-none-any.whl"

    def describe(self) -> str:
        return f"google-tunix {self.version} ({self.repo_url.removeprefix('https://github.com/')}"\
               f"@{self.commit})"


@dataclass(frozen=True)
class TunixSource:
    kind: Literal["github", "wheel"]
    wheel_dir: Path | None = None

    def describe(self, pin: TunixPin) -> str:
        if self.kind == "github":
            return f"{pin.describe()} from GitHub"
        return f"{pin.describe()} from {self.wheel_dir}/{pin.wheel_name} (sha256 checked)"


class NoTunixSource(RuntimeError):
    """Neither way to the image's tunix is open; the message names both and the fix."""


def read_pin(lock_text: str, github_text: str) -> TunixPin:
    """Pure: the pin from the lock's ``google-tunix==V`` block and the git requirement."""
    tunix = [pin for pin in hashed_pins(lock_text) if pin.name == DISTRIBUTION]
    version = tunix[0].version if len(tunix) == 1 else None
    digest = tunix[0].digests[0] if len(tunix) == 1 and len(tunix[0].digests) == 1 else None
    if version is None or digest is None:
        raise ValueError("images/rehearsal/requirements.lock needs a 'google-tunix==VERSION' line "
                         "followed by exactly one --hash=sha256:... (the wheel built from the "
                         "image's commit)")
    found = [m for m in map(_GITHUB_LINE.match, github_text.splitlines()) if m]
    if len(found) != 1:
        raise ValueError(f"{TUNIX_GITHUB_FILE.name} needs one 'google-tunix @ git+https://...@"
                         "<40-hex commit>' line")
    return TunixPin(version, digest, found[0]["url"], found[0]["commit"])


def load_pin(lock: Path, github_file: Path = TUNIX_GITHUB_FILE) -> TunixPin:
    return read_pin(lock.read_text(), github_file.read_text())


def choose_source(pin: TunixPin, *, github: bool, wheel_dir: str | None,
                  wheel_sha256: str | None) -> TunixSource:
    """Pure: GitHub when it answers, else the named folder's wheel if its sha256 is the
    lock's, else the error that names both ways (``wheel_sha256`` None: no such file)."""
    if github:
        return TunixSource("github")
    both = (f"install the image's tunix ({pin.describe()}) from GitHub (make "
            f"{pin.repo_url} reachable, with git installed) or from a folder holding "
            f"{pin.wheel_name} built from that commit: export {WHEEL_DIR_ENV}=<that folder>")
    if not wheel_dir:
        raise NoTunixSource(f"GitHub is not reachable and {WHEEL_DIR_ENV} is not set; {both}")
    wheel = Path(wheel_dir) / pin.wheel_name
    if wheel_sha256 is None:
        raise NoTunixSource(f"GitHub is not reachable and {wheel} does not exist "
                            f"({WHEEL_DIR_ENV}={wheel_dir}); {both}")
    if wheel_sha256 != pin.wheel_sha256:
        raise NoTunixSource(f"{wheel} has sha256 {wheel_sha256}, but "
                            f"images/rehearsal/requirements.lock records {pin.wheel_sha256} for "
                            f"it: it was not built from commit {pin.commit}; {both}")
    return TunixSource("wheel", Path(wheel_dir))


def github_reachable(repo_url: str, timeout_s: float = GITHUB_PROBE_TIMEOUT_S) -> bool:
    """Whether git can list the repository now (no git, no DNS, a proxy's refusal: no)."""
    git = shutil.which("git")
    if git is None:
        return False
    try:
        done = subprocess.run([git, "ls-remote", "--exit-code", repo_url, "HEAD"],
                              capture_output=True, timeout=timeout_s, check=False,
                              env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def sha256_of(path: Path) -> str | None:
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def resolve_source(pin: TunixPin, environ: Mapping[str, str] | None = None) -> TunixSource:
    """Probe GitHub, read the folder's wheel, then decide (choose_source)."""
    env = os.environ if environ is None else environ
    if github_reachable(pin.repo_url):
        return choose_source(pin, github=True, wheel_dir=None, wheel_sha256=None)
    wheel_dir = env.get(WHEEL_DIR_ENV) or None
    digest = sha256_of(Path(wheel_dir) / pin.wheel_name) if wheel_dir else None
    return choose_source(pin, github=False, wheel_dir=wheel_dir, wheel_sha256=digest)


def lock_without_tunix(lock_text: str) -> str:
    """Pure: the lock minus the google-tunix block, for the GitHub way (pip and uv refuse a
    git requirement in --require-hashes mode, so the commit is installed by itself)."""
    out: list[str] = []
    skipping = False
    for line in lock_text.splitlines():
        if _LOCK_LINE.match(line):
            skipping = line.rstrip().endswith("\\")
            continue
        if skipping:
            skipping = line.rstrip().endswith("\\")
            continue
        out.append(line)
    return "\n".join(out) + "\n"
