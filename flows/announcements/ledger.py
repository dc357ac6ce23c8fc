"""`tpurl announcements due|drop DEPLOYMENT`: what a retrain deployment still owes, and the one
explicit way to give an announcement up.

An announcement whose run ended without training it (cancelled, crashed, failed, timed out)
stays due: the next run the dispatcher queues trains it (flows/announcements/decide.py).
`drop` is the user's decision that it never should: it tags the ended runs that hold it
``tpurl-dropped:<event id>`` (visible on their run pages), under the target's dispatch lock
so no dispatcher is deciding meanwhile. Nothing is deleted.
"""

from __future__ import annotations

import sys
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectNotFound

from flows.announcements.decide import DROPPED_TAG, due_announcements
from flows.announcements.dispatch import LOCK_WAIT_S, dispatch_lock_name, ensure_lock, read_ledger


def due_command(deployment: str) -> int:
    with get_client(sync_client=True) as client:
        try:
            target = client.read_deployment_by_name(deployment)
        except ObjectNotFound:
            return _no_deployment(deployment)
        due = due_announcements(read_ledger(client, target.id))
    for item in due:
        print(f"{item.describe()}; drop: tpurl announcements drop {deployment} "
              f"{item.announcement.event_id}")
    if not due:
        print(f"nothing is due for {deployment}")
    return 0


def drop_command(deployment: str, event_id: str) -> int:
    with get_client(sync_client=True) as client:
        try:
            target = client.read_deployment_by_name(deployment)
        except ObjectNotFound:
            return _no_deployment(deployment)
        lock = dispatch_lock_name(str(target.id))
        ensure_lock(client, lock)
        with concurrency(lock, occupy=1, strict=True, timeout_seconds=LOCK_WAIT_S):
            runs = read_ledger(client, target.id)
            due = [d for d in due_announcements(runs) if d.announcement.event_id == event_id]
            if not due:
                holder = next((r for r in runs if r.holds and event_id in {
                    a.event_id for a in r.items()}), None)
                why = (f"run {holder.name} ({holder.phase}) holds it: cancel that run to stop "
                       "it, then drop it" if holder and holder.phase != "trained" else
                       f"run {holder.name} trained it" if holder else
                       f"no run the dispatcher queued holds event {event_id}")
                print(f"error: event {event_id} is not due for {deployment}: {why}; "
                      f"`tpurl announcements due {deployment}` lists what is", file=sys.stderr)
                return 2
            [item] = due
            tag = f"{DROPPED_TAG}{event_id}"
            tagged = []
            for run in runs:
                if run.phase == "ended" and any(a.same_as(item.announcement)
                                                for a in run.items()):
                    current = client.read_flow_run(UUID(run.id))
                    client.update_flow_run(UUID(run.id), tags=sorted({*current.tags, tag}))
                    tagged.append(run.name)
    print(f"dropped {item.announcement.describe()}: tagged {tag} on {', '.join(tagged)}; no "
          "run will train it (announce it again under a new time to train it)")
    return 0


def _no_deployment(deployment: str) -> int:
    print(f"error: deployment {deployment!r} does not exist; fix: pass '<flow name>/"
          "<deployment name>' of the retrain deployment, e.g. "
          "rl-post-training/retrain-rehearsal", file=sys.stderr)
    return 2
