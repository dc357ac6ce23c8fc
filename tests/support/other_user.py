"""Another local user, for real: files owned by ``nobody`` and commands run as ``nobody``.

An attack by a second account on the same machine (a planted marker, a planted pid tag) is
only proven by a second uid the kernel enforces. Making files belong to it (``chown``) and
running as it (``setuid`` in the child) need root, as this machine's tests run; elsewhere
the test is skipped saying so, and under CI=true that skip fails (tests/support/ci_rules.py).
"""

from __future__ import annotations

import os
import pwd
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

OTHER = "nobody"


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
