"""Best-effort reporting with retries: a tracker or registry that does not answer is a
warning, never a failed stage. The pipeline's outputs are already kept when a report is
made, so giving up loses nothing but the copy in the team's tool."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from flows.core.redaction import redact

log = logging.getLogger(__name__)
DELAYS_S: tuple[float, ...] = (2.0, 10.0, 30.0, 60.0, 120.0)


def report[T](what: str, attempt: Callable[[], T], attempts: int,
              delays_s: Sequence[float] = DELAYS_S,
              warn: Callable[[str], None] | None = None) -> T | None:
    """``attempt()``'s result, tried up to ``attempts`` times; None (after one warning per
    failed try, redacted) when every try failed. Each attempt must be idempotent: a try
    that failed halfway is made again from the start."""
    say = warn or log.warning
    for number in range(1, attempts + 1):
        try:
            return attempt()
        except Exception as exc:  # any failure of a report: reported, never raised
            last = number == attempts
            say(redact(f"{what}: try {number} of {attempts} failed ({type(exc).__name__}: "
                       f"{str(exc)[:300]})" + ("; given up, the run goes on without it"
                                                if last else "; retrying")))
            if not last:
                time.sleep(delays_s[min(number - 1, len(delays_s) - 1)])
    return None
