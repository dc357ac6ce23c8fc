"""Child processes that never outlive the run that owns them, and can be found if they do.

Three layers, because no single one covers every way a run dies:
- ``die_with_parent``: the kernel sends the child SIGTERM when its parent dies, even by
  SIGKILL (Linux ``PR_SET_PDEATHSIG``; a no-op elsewhere).
- ``ProcessTag``: pid + start time + host, written beside the output, so the next run can
  tell a live orphan from a recycled pid and stop it before it touches the same directory.
- ``stop_group``: SIGTERM to the whole process group, SIGKILL after a grace period.

A tag is a file, and a file can be planted: another local user (or a bucket copied onto the
output root) can write a tag naming any pid, with the start time /proc shows everyone. So a
tag is signalled only when it proves the process is one this tool started
(:meth:`ProcessTag.not_ours`): the tag file belongs to the running user, the start time was
recorded and still matches, the process belongs to the running user, leads its own process
group (what ``killpg`` reaches), and carries in its environment the random mark
(:data:`MARK_ENV`) the tool gave it at start. The environment is readable only by the
process's own user (/proc/PID/environ), survives ``exec`` (a wrapper that execs the program
keeps it, unlike the command line) and is never in a tag of another process, so a planted
tag can at worst name a program of this user's own runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass

PR_SET_PDEATHSIG = 1
MARK_ENV = "TPURL_PROCESS_MARK"  # the random mark a started program carries in its environment


def new_mark() -> str:
    return secrets.token_hex(16)


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


def process_uid(pid: int) -> int | None:
    """The process's real uid (/proc/PID/status ``Uid:``), None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def process_mark(pid: int) -> str | None:
    """The :data:`MARK_ENV` value in the environment the process was started with (None:
    gone, unreadable because it is another user's, or unmarked)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            entries = handle.read().split(b"\0")
    except OSError:
        return None
    prefix = f"{MARK_ENV}=".encode()
    found = [e[len(prefix):] for e in entries if e.startswith(prefix)]
    return found[0].decode("ascii", "replace") if found else None


def file_owner_problem(path: os.PathLike[str] | str) -> str | None:
    """Why a tag file cannot be trusted for its owner (None: it belongs to this user)."""
    uid = os.lstat(path).st_uid
    if uid != os.geteuid():
        return f"{path} belongs to uid {uid}, not to uid {os.geteuid()} that runs tpurl"
    return None


@dataclass(frozen=True)
class ProcessTag:
    pid: int
    ticks: int | None
    host: str
    started_at: float
    what: str
    uid: int | None = None  # the process's, when the tag was written
    mark: str | None = None  # the MARK_ENV value it was started with

    @classmethod
    def of(cls, pid: int, what: str, mark: str | None = None) -> ProcessTag:
        return cls(pid=pid, ticks=start_ticks(pid), host=socket.gethostname(),
                   started_at=time.time(), what=what, uid=process_uid(pid), mark=mark)

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

    def not_ours(self) -> str | None:
        """Why a signal to this tag's process group could reach a process this tool did not
        start (None: it is the program the tag was written for, of this user, marked)."""
        if self.host != socket.gethostname():
            return f"it was written on {self.host}, not this host"
        ticks = start_ticks(self.pid)
        if ticks is None:
            return f"pid {self.pid} is not running"
        if self.ticks is None or ticks != self.ticks:
            return f"pid {self.pid} started at another time than the tag records (a reused pid)"
        uid = process_uid(self.pid)
        if uid != os.geteuid() or self.uid != uid:
            return f"pid {self.pid} belongs to uid {uid}, not to uid {os.geteuid()} that runs tpurl"
        with contextlib.suppress(OSError):
            if os.getpgid(self.pid) != self.pid:
                return f"pid {self.pid} does not lead a process group of its own"
        if self.mark is None or process_mark(self.pid) != self.mark:
            return f"pid {self.pid} does not carry the mark tpurl gives the programs it starts"
        return None


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
