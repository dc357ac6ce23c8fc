"""Events the per-profile lock puts in Prefect's feed while one run holds it (issue 21.4).

Usage: python benchmarks/lock_events.py [HOLD_S]   (default 120)

Starts a real `prefect server start`, holds the lock in a real flow run for HOLD_S seconds,
then counts the events about the holder's Variable in /events/filter. Prints figures only.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from prefect import flow
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows.profile_lock import holder_variable, profile_lock
from tests.support.prefect_server import prefect_server_in


def main() -> None:
    hold_s = float(sys.argv[1]) if len(sys.argv) > 1 else 120.0
    with tempfile.TemporaryDirectory() as home, prefect_server_in(Path(home)) as server, \
            temporary_settings({PREFECT_API_URL: server.url}):
        os.environ["PREFECT_API_URL"] = server.url  # threads of the lock before issue 21

        @flow(name="lock-events-benchmark")
        def hold() -> None:
            with profile_lock("bench", logging.getLogger("bench")):
                time.sleep(hold_s)

        hold()
        time.sleep(5)  # the server's event pipeline is asynchronous
        body = {"filter": {"any_resource": {"id_prefix": ["prefect.variable."]}}, "limit": 50}
        events = server.api("POST", "/events/filter", json=body).json()["events"]
        mine = [e["event"] for e in events
                if e["resource"].get("prefect.resource.name") == holder_variable("bench")]
        counts = {name: mine.count(name) for name in sorted(set(mine))}
        print(f"held {hold_s:.0f} s: {len(mine)} variable events {counts}; "
              f"{len(mine) / hold_s * 1800:.0f} per 30 min at this rate")


if __name__ == "__main__":
    main()
