"""Retrying registry calls: which errors are worth another attempt, and how long to wait.

Registries (Artifact Registry included) answer overload and rollouts with 5xx, 429 and
dropped connections; those pass. Auth and naming errors do not, and retrying them only
hides the cause for minutes. The classification is a pure function of the message because
the daemon reports push failures as text in the progress stream, not as typed errors.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

_TRANSIENT = re.compile(
    r"\b(5\d\d|429)\b|too ?many ?requests|service unavailable|bad gateway|gateway time-?out|"
    r"internal server error|connection (refused|reset)|broken pipe|timed? ?out|timeout|"
    r"unexpected eof|\beof\b|i/o timeout|tls handshake|temporar",
    re.IGNORECASE)
_PERMANENT = re.compile(r"denied|unauthori[sz]ed|forbidden|\b40[134]\b|name unknown|"
                        r"manifest invalid|not found", re.IGNORECASE)


def is_transient(message: str) -> bool:
    """Pure: True for errors a later attempt may not see (permanent ones win on a tie)."""
    return bool(_TRANSIENT.search(message)) and not _PERMANENT.search(message)


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: ``attempts`` tries, waits first_s, first_s*factor, ... capped."""

    attempts: int = 5
    first_s: float = 2.0
    factor: float = 2.0
    max_s: float = 60.0

    def delays(self) -> list[float]:
        return [min(self.first_s * self.factor ** i, self.max_s) for i in range(self.attempts - 1)]


class TransientError(RuntimeError):
    """Raised inside a retried call to ask for another attempt."""


OnRetry = Callable[[int, str, float], None]  # (attempt that failed, message, wait seconds)


def call_with_retries[T](call: Callable[[], T], backoff: Backoff, on_retry: OnRetry | None = None,
                         sleep: Callable[[float], None] = time.sleep) -> T:
    """Run ``call``; on TransientError wait and try again, at most ``backoff.attempts`` times."""
    delays = backoff.delays()
    for attempt in range(1, backoff.attempts + 1):
        try:
            return call()
        except TransientError as exc:
            if attempt > len(delays):
                raise
            if on_retry is not None:
                on_retry(attempt, str(exc), delays[attempt - 1])
            sleep(delays[attempt - 1])
    raise AssertionError("unreachable")
