"""The CLI remembers the signal that stopped it (flows/console/interrupts.py), so an
interruption that surfaced as another exception is still reported as a stop (exit 130 or
143, "To resume"), not as a failure of the run."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import os, signal
from flows.console.interrupts import Interrupted, install_handlers, received_signal
assert received_signal() is None
install_handlers()
try:
    try:
        os.kill(os.getpid(), signal.SIGTERM)
    except Interrupted:
        raise RuntimeError("release unlocked lock")  # as threading's lock code turns it
except RuntimeError:
    pass
print(received_signal())
"""


def test_the_first_stop_signal_is_remembered_whatever_it_turned_into() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "15"
