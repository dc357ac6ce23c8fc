"""Another local user, for real: files owned by ``nobody`` and code run as ``nobody``.

An attack by a second account on the same machine (a planted marker, a planted pid tag, a
read of the CLI's API server or its state, an impostor on its port) is only proven by a
second uid the kernel enforces. Making files belong to it (``chown``) and running as it
(``setuid`` in the child) need root, as this machine's tests run; elsewhere the test is
skipped saying so, and under CI=true that skip fails (tests/support/ci_rules.py).

Python code run as the other user runs under the system's Python with the standard library
only (``-I``: nothing of ours or the venv's is imported), so what it can do is what any
local account can.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

OTHER = "nobody"
SYSTEM_PYTHON = "/usr/bin/python3"


@dataclass(frozen=True)
class OtherUser:
    uid: int
    gid: int

    def own(self, *paths: Path) -> None:
        """Make ``paths`` (not followed) belong to the other user."""
        for path in paths:
            os.chown(path, self.uid, self.gid, follow_symlinks=False)

    def run(self, argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` as the other user (the child drops to its uid before exec)."""
        return subprocess.run(argv, cwd=cwd, user=self.uid, group=self.gid, extra_groups=[],
                              check=True, capture_output=True, text=True)

    def popen(self, argv: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(argv, user=self.uid, group=self.gid, extra_groups=[],
                                start_new_session=True, text=True)


def other_user() -> OtherUser:
    if os.geteuid() != 0:
        pytest.skip(f"needs root to chown files to, and run processes as, {OTHER!r}")
    entry = pwd.getpwnam(OTHER)
    return OtherUser(entry.pw_uid, entry.pw_gid)


def run_as_nobody(code: str, *args: str, timeout_s: float = 120) -> Any:
    """Run Python ``code`` as the other user; its stdout, parsed as JSON."""
    user = other_user()
    done = subprocess.run([SYSTEM_PYTHON, "-I", "-c", code, *args], user=user.uid,
                          group=user.gid, extra_groups=[], capture_output=True, text=True,
                          timeout=timeout_s, cwd="/")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def start_as_nobody(code: str, *args: str) -> subprocess.Popen[str]:
    """Start Python ``code`` as the other user, its stdout a pipe (for a server that says
    where it listens and what it was sent)."""
    user = other_user()
    return subprocess.Popen([SYSTEM_PYTHON, "-I", "-u", "-c", code, *args], user=user.uid,
                            group=user.gid, extra_groups=[], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd="/")
