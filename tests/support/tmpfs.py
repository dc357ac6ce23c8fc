"""A real small tmpfs for the storage tests: as root, file modes do not stop writes, so a
read-only or full file system has to be a real mount (NOTES.md, "Machine facts that bit")."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted_tmpfs(mount: Path, options: str) -> Iterator[Path]:
    """``mount`` (created if missing) as a tmpfs with ``options`` (e.g. ``size=64m`` or
    ``size=1m,ro``), unmounted afterwards; the test is skipped where mounting is refused
    (no root, no CAP_SYS_ADMIN), the one reason it cannot run; under CI=true that skip
    fails (tests/support/ci_rules.py)."""
    mount.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"needs root (CAP_SYS_ADMIN) to mount a tmpfs for its real fault; "
                    f"mount said: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)
