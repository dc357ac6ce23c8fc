"""A run's events by category, to keep the pipeline's own events easy to find (issue 31.8).

Usage: python -m benchmarks.run_events API_URL FLOW_RUN_ID

What counts as the run's (tests/support/run_events.py): its flow and task runs' events, its
artifacts', its lock's. Prints the count per category and the share of bookkeeping (artifact
collections, lock, heartbeats); the goal is under a quarter (held by
tests/e2e/test_prefect_deploy.py on a deployment's rehearsal run). Heartbeats (one per 180 s)
and the lock's beat (one per 600 s) grow with the run's length; the rest is per run.
Run from the repository root as `python -m benchmarks.run_events API_URL FLOW_RUN_ID`.
Prints figures only.
"""

from __future__ import annotations

import sys
from collections import Counter

from tests.support.run_events import BOOKKEEPING, bookkeeping_share, category, run_events


def main() -> None:
    api, run_id = sys.argv[1].rstrip("/"), sys.argv[2]
    events = run_events(api, run_id)
    share, counts = bookkeeping_share(events)
    noise = sum(counts[c] for c in BOOKKEEPING)
    print(f"{len(events)} events; bookkeeping {noise} ({100 * share:.0f} %)")
    for name, count in counts.most_common():
        print(f"  {name}: {count}")
    names = Counter(e["event"] for e in events if category(e) in BOOKKEEPING)
    for name, count in names.most_common():
        print(f"    {name}: {count}")


if __name__ == "__main__":
    main()
