"""Ctrl-C as a terminal's user has it, whatever started the test run.

A shell that starts a command in its background (`cmd &`, `nohup cmd &`, as CI scripts and
supervisors do) starts it with SIGINT ignored, and an ignored signal stays ignored in every
process it starts. Two things then break that work at a terminal: a test that sends its
own process SIGINT gets no KeyboardInterrupt (the programs ran their 60 s), and a Prefect
worker never stops on SIGTERM: its handler turns the first SIGTERM into a SIGINT to itself
with the handler it found at start-up, which is "ignore" (prefect 3.9.1
utilities/processutils.py setup_signal_handlers_worker, forward_signal_handler), so every
worker stop waited out its test's grace (60 s each, twice in the deployment tests). The
test session puts Python's own handler back once, before any test, and the processes it
starts inherit the default.
"""

from __future__ import annotations

import signal


def restore_ctrl_c() -> bool:
    """Python's KeyboardInterrupt handler for SIGINT if it was ignored; True if it was."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        return False
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return True
