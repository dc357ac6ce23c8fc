"""Events the per-profile lock puts in Prefect's feed while one run holds it.

Usage: python benchmarks/lock_events.py [HOLD_S]   (default 120)

Starts a real `prefect server start`, holds the lock in a real flow run of a separate
process (tests/support/lock_holder.py) for HOLD_S seconds, then counts the events about the
holder's Variable in /events/filter. Prints figures only.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flows.common.paths import REPO_ROOT
from flows.locking.profile_lock import holder_variable
from tests.support.prefect_server import prefect_server_in


def main() -> None:
    hold_s = float(sys.argv[1]) if len(sys.argv) > 1 else 120.0
    with tempfile.TemporaryDirectory() as home, prefect_server_in(Path(home)) as server:
        subprocess.run([sys.executable, "-m", "tests.support.lock_holder", "bench", str(hold_s)],
                       cwd=REPO_ROOT, env={**server.env, "PYTHONPATH": str(REPO_ROOT)},
                       check=True, capture_output=True)
        time.sleep(5)  # the server's event pipeline is asynchronous
        body = {"filter": {"any_resource": {"id_prefix": ["prefect.variable."]}}, "limit": 50}
        events = server.api("POST", "/events/filter", json=body).json()["events"]
        mine = [e["event"] for e in events
                if e["resource"].get("prefect.resource.name") == holder_variable("bench")]
        counts = {name: mine.count(name) for name in sorted(set(mine))}
        print(f"held {hold_s:.0f} s: {len(mine)} events about the holder record {counts}")


if __name__ == "__main__":
    main()
