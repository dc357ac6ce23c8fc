"""Events the per-profile lock puts in Prefect's feed while one run holds it.

Usage: python benchmarks/lock_events.py [HOLD_S] [--quick] [--api URL]
       (HOLD_S default 120; --quick: 3)

Starts a real `prefect server start` (or uses the API at ``--api``, as the tests' quick run
does with their session's), holds the lock in a real flow run of a separate
process (tests/support/lock_holder.py) for HOLD_S seconds, then counts the events about the
holder's Variable in /events/filter. Prints figures only; exits 1 when the feed holds no
event about the holder record (the lock was not taken, or its events are no longer found by
the name this counts).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from flows.common.paths import REPO_ROOT
from flows.locking.profile_lock import holder_variable
from tests.support.prefect_server import server_at_or_in


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hold_s", nargs="?", type=float, default=120.0)
    parser.add_argument("--quick", action="store_true", help="hold 3 s (the tests' run)")
    parser.add_argument("--api", help="a running Prefect API to use instead of a new server")
    args = parser.parse_args()
    hold_s = 3.0 if args.quick else args.hold_s
    profile = f"bench-{uuid.uuid4().hex[:8]}" if args.api else "bench"  # a shared API: its own
    with tempfile.TemporaryDirectory() as home, server_at_or_in(args.api, Path(home)) as server:
        subprocess.run([sys.executable, "-m", "tests.support.lock_holder", profile, str(hold_s)],
                       cwd=REPO_ROOT, env={**server.env, "PYTHONPATH": str(REPO_ROOT)},
                       check=True, capture_output=True)
        time.sleep(5)  # the server's event pipeline is asynchronous
        body = {"filter": {"any_resource": {"id_prefix": ["prefect.variable."]}}, "limit": 50}
        events = server.api("POST", "/events/filter", json=body).json()["events"]
        mine = [e["event"] for e in events
                if e["resource"].get("prefect.resource.name") == holder_variable(profile)]
        counts = {name: mine.count(name) for name in sorted(set(mine))}
        print(f"held {hold_s:.0f} s: {len(mine)} events about the holder record {counts}")
    return 0 if mine else 1


if __name__ == "__main__":
    raise SystemExit(main())
