"""Code run as another local user (``nobody``), for the attacks a second account on the same
machine can make against a user's `tpurl` (tests/test_api_access.py). The code runs under
the system's Python with the standard library only (``-I``: nothing of ours or the venv's
is imported), so what it can do is what any local account can."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

NOBODY_UID = NOBODY_GID = 65534
SYSTEM_PYTHON = "/usr/bin/python3"


def become_nobody() -> None:
    """``preexec_fn``: drop every group and become uid/gid 65534 (needs root)."""
    os.setgroups([])
    os.setgid(NOBODY_GID)
    os.setuid(NOBODY_UID)


def _need_root() -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to run a process as another user (os.setuid)")


def run_as_nobody(code: str, *args: str, timeout_s: float = 120) -> Any:
    """Run ``code`` as nobody; its stdout, parsed as JSON."""
    _need_root()
    done = subprocess.run([SYSTEM_PYTHON, "-I", "-c", code, *args], preexec_fn=become_nobody,
                          capture_output=True, text=True, timeout=timeout_s, cwd="/")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def start_as_nobody(code: str, *args: str) -> subprocess.Popen[str]:
    """Start ``code`` as nobody, its stdout a pipe (for a server that says where it listens
    and what it was sent)."""
    _need_root()
    return subprocess.Popen([SYSTEM_PYTHON, "-I", "-u", "-c", code, *args],
                            preexec_fn=become_nobody, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd="/")
