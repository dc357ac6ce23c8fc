"""A run's events by category, so the pipeline's own events stay easy to find:
shared by benchmarks/run_events.py (figures) and the e2e test that holds the goal.

Every event of the API from the flow run's start to its end (plus 30 s: the server stores
events asynchronously, and the lock's release lands after the run's last state) about this
run: its flow run or task runs (as resource or related resource, artifacts included), or its
profile's lock: the holder record Variable whose value names this run, and the lock's
concurrency limit (by name: another flow's limits in the same minutes, such as an
announcement dispatcher's, are that flow's bookkeeping, not this run's).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import httpx

from flows.locking.profile_lock import lock_name

BOOKKEEPING = ("artifact", "lock", "heartbeat")
GOAL = 0.25  # bookkeeping under a quarter of a run's events


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
    lock = lock_name(str(run["parameters"].get("profile", "rehearsal")))
    start = datetime.fromisoformat(run["start_time"]) - timedelta(seconds=5)
    end = datetime.fromisoformat(run["end_time"]) + timedelta(seconds=30)
    task_ids = {t["id"] for t in httpx.post(f"{api}/task_runs/filter", json={
        "flow_runs": {"id": {"any_": [run_id]}}}, timeout=30).json()}
    mine = {f"prefect.flow-run.{run_id}", *(f"prefect.task-run.{t}" for t in task_ids)}

    def about_run(event: dict[str, Any]) -> bool:
        ids = {event["resource"]["prefect.resource.id"],
               *(r["prefect.resource.id"] for r in event.get("related", []))}
        if ids & mine:
            return True
        if event["event"].startswith("prefect.variable"):  # the holder record names its run
            return run_id in str(event.get("payload", {}).get("value", ""))
        return category(event) == "lock" and event["resource"].get(
            "prefect.resource.name") == lock

    return [e for e in _read_all(api, start, end) if about_run(e)]


def bookkeeping_share(events: list[dict[str, Any]]) -> tuple[float, Counter[str]]:
    counts = Counter(category(e) for e in events)
    noise = sum(counts[c] for c in BOOKKEEPING)
    return noise / max(len(events), 1), counts
