"""A Ctrl-C at a chosen point of the caller's thread, for tests that interrupt code at every
point it can be interrupted (tests/backends/local/test_interrupt_anywhere.py,
test_program_group.py).

A signal's handler runs where Python checks for one: at a line of Python code, on entering
a function. ``InterruptAt`` is a trace function (``sys.settrace``) that counts those events
in the main thread, at each line of one code object and at each entry into the threading
module's code it calls, and raises KeyboardInterrupt at the ``target``-th, as the handler
of a SIGINT landing there would."""

from __future__ import annotations

import os
import threading
from types import CodeType, FrameType
from typing import Any

THREADING = threading.__file__


class InterruptAt:
    """Raises KeyboardInterrupt at the ``target``-th traced event; remembers where."""

    def __init__(self, target: int, code: CodeType) -> None:
        self.target, self.code, self.seen, self.where = target, code, 0, ("", 0)

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code is self.code:
            return self._line
        if frame.f_code.co_filename == THREADING:  # on entry, where a signal's handler runs
            self._count(frame)
        return None

    def _line(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self._count(frame)
        return self._line

    def _count(self, frame: FrameType) -> None:
        if threading.current_thread() is threading.main_thread():
            self.seen += 1
            if self.seen == self.target:
                self.where = (frame.f_code.co_filename, frame.f_lineno)
                raise KeyboardInterrupt


def caused_by_interrupt(exc: BaseException | None) -> bool:
    """Was ``exc`` the interrupt, or raised while handling it (a Ctrl-C inside threading's
    own lock juggling can surface as its RuntimeError, the interrupt as its context)?"""
    while exc is not None:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def marked(marker: str) -> list[int]:
    """The pids whose command line holds ``marker`` (a test's programs carry one)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found
