"""Threads that run in a copy of their starter's context.

Why: a Python 3.12 thread starts with an empty context, and the Prefect API a `tpurl run`
uses lives in a contextvar (``temporary_settings`` in flows/console/interrupts.py), as does
a flow's run context. A thread started bare that logged to the stage logger found no API in
Prefect's root settings: Prefect's log worker started a temporary server of its own for
the rest of the run, and after a Ctrl-C held the exit 30 s (tests/test_threads_keep_the_api.py).
Each thread gets a copy of its own: one context cannot be entered by two threads at once.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any


def context_thread(target: Callable[..., object], *args: Any, name: str,
                   daemon: bool = True) -> threading.Thread:
    """A (not yet started) thread running ``target(*args)`` in a copy of this context."""
    return threading.Thread(target=contextvars.copy_context().run, args=(target, *args),
                            name=name, daemon=daemon)
