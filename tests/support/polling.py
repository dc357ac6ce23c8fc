"""Waiting for something another thread or process does (a watch, a fake autoscaler)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def until(check: Callable[[], Any], within_s: float = 30.0) -> bool:
    """Poll ``check`` until it is truthy or ``within_s`` passed; its last answer, as a bool
    (a bound, never a speed claim: callers assert the outcome, not how soon). The default is
    generous because a loaded CI machine can starve a watch thread for seconds; a passing
    check returns as soon as it holds."""
    deadline = time.monotonic() + within_s
    while not check() and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(check())


def bare_jobset(name: str) -> dict[str, Any]:
    """The least a JobSet object needs for a watch to list and report it."""
    return {"metadata": {"name": name, "annotations": {}}, "spec": {"replicatedJobs": []}}
