"""A run's events by category, to keep the pipeline's own events easy to find (issue 31.8).

Usage: python benchmarks/run_events.py API_URL FLOW_RUN_ID

Reads every event of the API from the flow run's start to its end (plus 30 s: the server
stores events asynchronously, and the lock's release lands after the run's last state),
keeps those about this run (its flow run or task runs, its artifacts) or about its profile's
lock (the holder Variable and the concurrency limit), and prints the count per category and
the share of bookkeeping. Prints figures only.
"""

from __future__ import annotations

import sys
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import httpx

BOOKKEEPING = ("artifact", "lock", "heartbeat")


def category(event: dict[str, Any]) -> str:
    name = event["event"]
    if name.startswith("tpurl."):
        return "pipeline"
    if name.endswith(".heartbeat"):
        return "heartbeat"
    if name.startswith("prefect.artifact"):
        return "artifact"
    if name.startswith(("prefect.variable", "prefect.concurrency-limit",
                        "prefect.global-concurrency-limit")):
        return "lock"
    if name.startswith(("prefect.flow-run.", "prefect.task-run.")):
        return "run state"
    return "other"


def _read_all(api: str, since: datetime, until: datetime) -> list[dict[str, Any]]:
    body = {"limit": 50, "filter": {"occurred": {"since": since.isoformat(),
                                                 "until": until.isoformat()}}}
    page = httpx.post(f"{api}/events/filter", json=body, timeout=30).json()
    found = list(page["events"])
    while page.get("next_page"):
        page = httpx.get(page["next_page"], timeout=30).json()
        found += page["events"]
    return found


def run_events(api: str, run_id: str) -> list[dict[str, Any]]:
    run = httpx.get(f"{api}/flow_runs/{run_id}", timeout=30).json()
    start = datetime.fromisoformat(run["start_time"]) - timedelta(seconds=5)
    end = datetime.fromisoformat(run["end_time"]) + timedelta(seconds=30)
    task_ids = {t["id"] for t in httpx.post(f"{api}/task_runs/filter", json={
        "flow_runs": {"id": {"any_": [run_id]}}}, timeout=30).json()}
    mine = {f"prefect.flow-run.{run_id}", *(f"prefect.task-run.{t}" for t in task_ids)}

    def about_run(event: dict[str, Any]) -> bool:
        ids = {event["resource"]["prefect.resource.id"],
               *(r["prefect.resource.id"] for r in event.get("related", []))}
        return bool(ids & mine) or category(event) == "lock"

    return [e for e in _read_all(api, start, end) if about_run(e)]


def main() -> None:
    api, run_id = sys.argv[1].rstrip("/"), sys.argv[2]
    events = run_events(api, run_id)
    counts = Counter(category(e) for e in events)
    noise = sum(counts[c] for c in BOOKKEEPING)
    print(f"{len(events)} events; bookkeeping {noise} ({100 * noise / max(len(events), 1):.0f} %)")
    for name, count in counts.most_common():
        print(f"  {name}: {count}")
    names = Counter(e["event"] for e in events if category(e) in BOOKKEEPING)
    for name, count in names.most_common():
        print(f"    {name}: {count}")


if __name__ == "__main__":
    main()
