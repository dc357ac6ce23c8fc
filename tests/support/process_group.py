"""Stopping a long-lived helper process a test started in a session of its own (a Prefect
worker, a docs script): SIGTERM to its whole group, as a service manager stops it, then
SIGKILL once it has had its grace. Its shutdown is not what the tests assert. A worker's
stop that took over 30 s, then always the whole grace, in CI was a worker started with
SIGINT ignored (tests/support/ctrl_c.py): a few seconds since."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(process: subprocess.Popen[bytes] | subprocess.Popen[str],
               grace_s: float = 60.0) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    except ProcessLookupError:  # ended meanwhile
        process.wait(timeout=30)
