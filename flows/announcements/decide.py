"""What the dispatcher does with one announcement, given the target deployment's runs (pure).

The rules (issue 11, item 6: no announcement is lost):
- a redelivered event (its id already served or coalesced by some run) changes nothing;
- an announcement older (by ``occurred``) than the newest of its kind that some run already
  serves is *superseded*: recorded, no run;
- otherwise one run is queued that serves the newest announcement of *each* kind known (so
  a revision arriving while a dataset waits keeps both, and a later revision does not drop
  the dataset the last run trained), and every waiting run the dispatcher made is replaced:
  its announcements are listed as coalesced into the new run, and it is cancelled.

Waiting means not started (Scheduled, AwaitingConcurrencySlot, Late). Runs nobody announced
(no ``announcement`` parameter, e.g. started by hand) are never cancelled or merged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from flows.announcements.guard import COALESCED_PREFIX
from flows.announcements.model import Announcement, RunAnnouncement

Phase = Literal["waiting", "active", "final"]
WAITING_STATE_NAMES = frozenset({"Scheduled", "AwaitingConcurrencySlot", "Late"})


def phase_of(state_type: str | None, state_name: str | None) -> Phase:
    """Only a run that has not started may be replaced; Pending is the worker's (it holds
    the deployment's slot and may be starting infrastructure), so it counts as active, as
    does any other Scheduled-type state (AwaitingRetry belongs to a run that has run)."""
    kind = (state_type or "").upper()
    if kind == "SCHEDULED" and state_name in WAITING_STATE_NAMES:
        return "waiting"
    if kind in {"COMPLETED", "FAILED", "CANCELLED", "CRASHED"}:
        return "final"
    return "active"


@dataclass(frozen=True)
class RunView:
    """What the dispatcher reads of one run of the target deployment."""

    id: str
    name: str
    phase: Phase
    announcement: RunAnnouncement | None = None


@dataclass(frozen=True)
class Duplicate:
    announcement: Announcement
    run_id: str  # the run that already holds this event


@dataclass(frozen=True)
class Superseded:
    announcement: Announcement
    by: Announcement
    run_id: str  # the run that serves the newer one


@dataclass(frozen=True)
class Queue:
    announcement: Announcement
    run: RunAnnouncement
    replaces: tuple[str, ...] = ()  # waiting runs to cancel once the new one exists
    carried: dict[str, str] = field(default_factory=dict)  # kind → run id it came from


Decision = Duplicate | Superseded | Queue


def newest_served(runs: list[RunView]) -> dict[str, tuple[Announcement, str]]:
    """The newest announcement of each kind that any run serves, with that run's id."""
    best: dict[str, tuple[Announcement, str]] = {}
    for run in runs:
        if run.announcement is None:
            continue
        for kind, item in run.announcement.serves.items():
            if kind not in best or item.newer_than(best[kind][0]):
                best[kind] = (item, run.id)
    return best


def decide(new: Announcement, runs: list[RunView]) -> Decision:
    for run in runs:
        if run.announcement is not None and new.event_id in run.announcement.event_ids():
            return Duplicate(new, run.id)
    known = newest_served(runs)
    if new.kind in known and not new.newer_than(known[new.kind][0]):
        newer, holder = known[new.kind]
        return Superseded(new, newer, holder)
    serves = {kind: item for kind, (item, _) in known.items()}
    serves[new.kind] = new
    carried = {kind: holder for kind, (_, holder) in known.items() if kind != new.kind}
    waiting = [r for r in runs if r.phase == "waiting" and r.announcement is not None]
    served_ids = {a.event_id for a in serves.values()}
    folded: dict[str, Announcement] = {}
    for run in waiting:
        assert run.announcement is not None
        for item in (*run.announcement.serves.values(), *run.announcement.coalesced):
            if item.event_id not in served_ids:
                folded[item.event_id] = item
    coalesced = tuple(sorted(folded.values(), key=lambda a: a.order))
    return Queue(new, RunAnnouncement(serves, coalesced), tuple(r.id for r in waiting), carried)


def coalesced_message(new: Announcement, replacement_id: str, replacement_name: str) -> str:
    """The cancelled run's state message: which announcement it was coalesced into."""
    return (f"{COALESCED_PREFIX}{replacement_name} ({replacement_id}), queued for the newer "
            f"announcement {new.describe()}; it trains this run's announcements too, or newer "
            "ones of the same kind")
