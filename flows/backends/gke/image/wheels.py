"""The locked wheels the post-training image installs (wandb, for W&B logging), for its context.

The build runs with no network (``docker build --network=none``, on the daemon and in Cloud
Build alike), so the files must travel in the build context. They come from, in order:

1. ``$TPURL_WHEEL_DIR`` (the folder the rehearsal's tunix wheel is read from, for a machine
   without PyPI: fill it once with the ``pip download`` line in images/post-training/wandb.lock),
2. the machine cache (``$TPURL_CACHE_DIR/wheels/post-training``), where
3. ``pip download`` puts them (the flow's own pip, with its configured indexes) when missing.

A file counts only if its sha256 is the one the lock names; none found is an error naming the
packages, the folders and the fix, before anything is built. The lock, not the wheels,
goes into the content tag (context.py): a wheel enters the context only when the lock names
its hash, so the lock's bytes decide the wheels', and the skip path (the tag already pushed)
needs no wheel on the machine.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from flows.backends.gke.image.errors import ImageError
from flows.common.failure_codes import Failure
from flows.common.hashed_lock import hashed_pins
from flows.common.paths import IMAGES_DIR, default_cache_dir

LOCK_FILE = IMAGES_DIR / "post-training" / "wandb.lock"
WHEEL_DIR_ENV = "TPURL_WHEEL_DIR"  # the same variable the rehearsal's tunix wheel is read from
CONTEXT_DIR = "wheels"
# The image's interpreter: CPython 3.12 on linux x86_64 (the tpu_post_training base).
PLATFORM_ARGS = ("--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
                 "--abi", "cp312", "--platform", "manylinux_2_28_x86_64",
                 "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64")


@dataclass(frozen=True)
class LockedWheel:
    name: str
    version: str
    sha256: str

    @property
    def file_prefix(self) -> str:
        """How the wheel's file name starts (PEP 427 escapes '-' and '.' in the name)."""
        return f"{re.sub(r'[-_.]+', '_', self.name).lower()}-{self.version}-"


class WheelsUnavailable(ImageError):
    code = Failure.IMAGE_WHEELS_UNAVAILABLE
    fix = (f"let the flow reach PyPI (pip download), or fill a folder with the files the "
           f"lock names (the pip download line in images/post-training/wandb.lock) and "
           f"export {WHEEL_DIR_ENV}=<that folder>")


def read_lock(text: str) -> list[LockedWheel]:
    """Pure: the pins of the lock, in order, each with its one hash (the image's file)."""
    pins = hashed_pins(text)
    bad = [pin.name for pin in pins if len(pin.digests) != 1]
    if bad or not pins:
        raise ValueError(f"{LOCK_FILE.name}: every pin needs exactly one --hash=sha256 line "
                         f"(the image's file); not so for {bad or 'any: no pins'}")
    return [LockedWheel(pin.name, pin.version, pin.digests[0]) for pin in pins]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def find(locked: list[LockedWheel], folders: list[Path]) -> dict[str, Path]:
    """sha256 -> file, for the locked files present in ``folders`` (only candidates by name
    are read, so a big shared folder costs a listing)."""
    wanted = {w.sha256 for w in locked}
    found: dict[str, Path] = {}
    for folder in folders:
        for path in sorted(folder.glob("*.whl")) if folder.is_dir() else []:
            if any(path.name.lower().startswith(w.file_prefix) for w in locked):
                digest = _digest(path)
                if digest in wanted:
                    found.setdefault(digest, path)
    return found


def download(wheels: list[LockedWheel], into: Path) -> str:
    """``pip download`` of exact pins for the image's platform; pip's output on failure."""
    into.mkdir(parents=True, exist_ok=True)
    # PIP_CONSTRAINT cleared: a machine-wide constraints file must not veto a locked pin.
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                           "--disable-pip-version-check", *PLATFORM_ARGS, "-d", str(into),
                           *(f"{w.name}=={w.version}" for w in wheels)],
                          capture_output=True, text=True, env={**os.environ, "PIP_CONSTRAINT": ""})
    return "" if done.returncode == 0 else (done.stderr or done.stdout)[-2000:]


def context_wheels(lock: Path = LOCK_FILE, environ: Mapping[str, str] | None = None
                   ) -> dict[str, Path]:
    """Context name (``wheels/FILE``) -> file, one per pin of ``lock``, each sha256-checked."""
    env = os.environ if environ is None else environ
    locked = read_lock(lock.read_text())
    cache = default_cache_dir(dict(env)) / "wheels" / "post-training"
    folders = [Path(env[WHEEL_DIR_ENV])] if env.get(WHEEL_DIR_ENV) else []
    found = find(locked, [*folders, cache])
    problem = ""
    if missing := [w for w in locked if w.sha256 not in found]:
        problem = download(missing, cache)
        found = find(locked, [*folders, cache])
    if missing := [w for w in locked if w.sha256 not in found]:
        names = ", ".join(f"{w.name}=={w.version}" for w in missing)
        where = ", ".join(str(f) for f in [*folders, cache])
        raise WheelsUnavailable(
            f"the post-training image's wheels for {names} (sha256 as in {lock.name}) are "
            f"in none of {where}, and pip download did not bring them"
            + (f": {problem.strip()}" if problem else " (a file with another sha256 is not "
               "the locked one)"))
    return {f"{CONTEXT_DIR}/{found[w.sha256].name}": found[w.sha256] for w in locked}
