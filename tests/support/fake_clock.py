"""A clock the test moves by hand (the spend meter's and the fake autoscaler's time)."""

from __future__ import annotations


class Clock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now
