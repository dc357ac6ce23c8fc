"""A test run started with SIGINT ignored (a shell's background job) gives its processes
Ctrl-C back (tests/support/ctrl_c.py), and why that matters: Prefect's own worker signal
handling, run in a real process, stops on SIGTERM only when SIGINT was not ignored."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from flows.common.paths import REPO_ROOT

SIGINT_BIT = 1 << (signal.SIGINT - 1)  # /proc/<pid>/status SigIgn is a mask, bit n-1


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _child(code: str, **kwargs) -> subprocess.Popen[str]:
    """A Python child started as a background job starts: SIGINT ignored."""
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=_ignore_sigint, **kwargs)


def _grandchild_ignores_sigint(restore: bool) -> bool:
    code = (
        "import subprocess\n"
        "from tests.support.ctrl_c import restore_ctrl_c\n"
        f"print(restore_ctrl_c() if {restore} else 'untouched')\n"
        "print(subprocess.run(['grep', 'SigIgn', '/proc/self/status'], text=True,\n"
        "                     capture_output=True, check=True).stdout.split()[1])\n")
    out, _ = _child(code).communicate(timeout=60)
    first, mask = out.split()
    assert first == ("True" if restore else "untouched"), out
    return bool(int(mask, 16) & SIGINT_BIT)


def test_an_ignored_sigint_is_inherited_unless_the_session_restores_it() -> None:
    assert _grandchild_ignores_sigint(restore=False)
    assert not _grandchild_ignores_sigint(restore=True)


def test_this_session_has_ctrl_c() -> None:
    assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN


WORKER = """
import os, signal, sys, time
from tests.support.ctrl_c import restore_ctrl_c
if {restore}:
    restore_ctrl_c()
from prefect.utilities.processutils import setup_signal_handlers_worker
setup_signal_handlers_worker(os.getpid(), "the test worker", print)
try:
    print("ready", flush=True)  # inside the try: a SIGTERM right after it is still caught
    time.sleep(30)
    print("slept on")
except KeyboardInterrupt:
    print("stopped")
"""


def _worker_after_sigterm(restore: bool) -> str:
    """Prefect's worker handlers (as `prefect worker start` installs them) in a process
    started with SIGINT ignored; one SIGTERM once they are in place."""
    child = _child(WORKER.format(restore=restore))
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGTERM)
    began = time.monotonic()
    try:
        out, _ = child.communicate(timeout=8)
    except subprocess.TimeoutExpired:
        child.kill()
        out = child.communicate()[0] + "\n(still running 8 s after SIGTERM)"
    assert time.monotonic() - began < 30
    return out


def test_a_prefect_worker_stops_on_sigterm_only_with_ctrl_c_restored() -> None:
    assert "stopped" in _worker_after_sigterm(restore=True)
    assert "still running" in _worker_after_sigterm(restore=False)
