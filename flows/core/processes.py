"""Child processes that never outlive the run that owns them, and can be found if they do.

Three layers, because no single one covers every way a run dies:
- ``die_with_parent``: the kernel sends the child SIGTERM when its parent dies, even by
  SIGKILL (Linux ``PR_SET_PDEATHSIG``; a no-op elsewhere).
- ``ProcessTag``: pid + start time + host, written beside the output, so the next run can
  tell a live orphan from a recycled pid and stop it before it touches the same directory.
- ``stop_group``: SIGTERM to the whole process group, SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn``: ask for SIGTERM when the parent exits (async-signal-safe enough: one
    syscall, no allocation beyond ctypes' own)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat):
    with the pid it names one process for the machine's uptime, pid reuse or not."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ")"
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class ProcessTag:
    pid: int
    ticks: int | None
    host: str
    started_at: float
    what: str

    @classmethod
    def of(cls, pid: int, what: str) -> ProcessTag:
        return cls(pid=pid, ticks=start_ticks(pid), host=socket.gethostname(),
                   started_at=time.time(), what=what)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ProcessTag | None:
        try:
            return cls(**json.loads(text))
        except (ValueError, TypeError):
            return None

    def alive(self) -> bool:
        """Still the same process on this machine (False for another host: unknowable)."""
        if self.host != socket.gethostname():
            return False
        ticks = start_ticks(self.pid)
        return ticks is not None and (self.ticks is None or ticks == self.ticks)


def stop_group(pid: int, grace_s: float = 10.0) -> None:
    """SIGTERM the process group led by ``pid``, then SIGKILL what is left after ``grace_s``."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
