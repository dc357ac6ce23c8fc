"""A `tpurl` command's use of its API server, alone: `private_api()` as `tpurl run` enters
it, holding the server ``argv[1]`` seconds (``stdin``: until a line, or the end, comes on its
stdin), printing the URL it was given (for tests/test_kept_api.py, which runs several at
once)."""

from __future__ import annotations

import select
import sys
import time
import urllib.request

from flows.console.interrupts import private_api


def _released(deadline: float | None) -> bool:
    """Whether the hold is over: the deadline passed, or (no deadline) stdin spoke."""
    if deadline is not None:
        return time.monotonic() >= deadline
    return bool(select.select([sys.stdin], [], [], 0)[0])


if __name__ == "__main__":
    hold = sys.argv[1] if len(sys.argv) > 1 else "0"
    with private_api(startup_timeout_s=600) as url:
        assert url is not None
        deadline = None if hold == "stdin" else time.monotonic() + float(hold)
        while True:  # in use: the server answers throughout
            with urllib.request.urlopen(f"{url}/health", timeout=10) as answer:
                assert answer.status == 200
            if _released(deadline):
                break
            time.sleep(0.5)
        print(url, flush=True)
