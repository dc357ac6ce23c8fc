"""What the dispatcher does with one announcement, given the target deployment's runs (pure).

An announcement is *served* only once a run of the target trained it: a run that completed.
A run that is waiting or running *holds* its announcements (it will train them); a run that
ended otherwise (cancelled while queued or while training, crashed, failed, timed out) left
them *due*: the next run the dispatcher queues trains them, and nothing supersedes an
announcement with one that never trained. Only an explicit drop (``tpurl announcements
drop``, which tags the ended runs ``tpurl-dropped:<event id>``) takes a due one off.

The rules, each named in the decision (the dispatcher logs it and puts it in its event):
- ``duplicate``: the same announcement (its event id, or the same kind, value and
  ``occurred`` under another id) is held by a waiting or running run or was trained: no run;
- ``dropped``: the same announcement was dropped by a user: no run;
- ``superseded``: a newer one of its kind is held or was trained: no run (the holder is named;
  if it is only held, it stays due should its run end without training it);
- ``queued``: one run is queued serving the newest announcement of *each* kind (the new one,
  the held or trained ones, and the due ones), every waiting run the dispatcher made is
  replaced (its announcements coalesced into the new run), and the due ones it takes up are
  listed with the run that left them (``retried``).

Waiting means not started (Scheduled, AwaitingConcurrencySlot, Late). Runs nobody announced
(no ``announcement`` parameter, e.g. started by hand) are never cancelled or merged.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from flows.announcements.guard import COALESCED_PREFIX
from flows.announcements.model import Announcement, RunAnnouncement

# waiting/active hold their announcements; trained served them; ended left them due
Phase = Literal["waiting", "active", "trained", "ended"]
WAITING_STATE_NAMES = frozenset({"Scheduled", "AwaitingConcurrencySlot", "Late"})
DROPPED_TAG = "tpurl-dropped:"


def phase_of(state_type: str | None, state_name: str | None) -> Phase:
    """Only a run that has not started may be replaced; Pending is the worker's (it holds
    the deployment's slot and may be starting infrastructure), so it counts as active, as
    does any other Scheduled-type state (AwaitingRetry belongs to a run that has run). Only
    Completed trained; Failed (TimedOut included), Crashed and Cancelled did not."""
    kind = (state_type or "").upper()
    if kind == "SCHEDULED" and state_name in WAITING_STATE_NAMES:
        return "waiting"
    if kind == "COMPLETED":
        return "trained"
    if kind in {"FAILED", "CANCELLED", "CRASHED"}:
        return "ended"
    return "active"


def dropped_ids(tags: Iterable[str]) -> frozenset[str]:
    return frozenset(t.removeprefix(DROPPED_TAG) for t in tags if t.startswith(DROPPED_TAG))


@dataclass(frozen=True)
class RunView:
    """What the dispatcher reads of one run of the target deployment."""

    id: str
    name: str
    phase: Phase
    announcement: RunAnnouncement | None = None
    state_name: str = ""  # how an ended run ended, for the log (Crashed, TimedOut, ...)
    dropped: frozenset[str] = frozenset()  # event ids a user dropped (the run's tags)

    @property
    def holds(self) -> bool:
        return self.phase != "ended" and self.announcement is not None

    def items(self) -> tuple[Announcement, ...]:
        if self.announcement is None:
            return ()
        return (*self.announcement.serves.values(), *self.announcement.coalesced)


@dataclass(frozen=True)
class Due:
    """An announcement a run took up and ended without training."""

    announcement: Announcement
    run_id: str
    run_name: str
    ended: str  # the run's final state name

    def describe(self) -> str:
        return (f"{self.announcement.describe()}, due: run {self.run_name} ended "
                f"{self.ended} without training it")


@dataclass(frozen=True)
class Duplicate:
    announcement: Announcement
    run_id: str  # the run that holds or trained the same announcement
    rule: str = "duplicate"


@dataclass(frozen=True)
class Dropped:
    announcement: Announcement
    run_id: str  # a run carrying the drop tag
    rule: str = "dropped"


@dataclass(frozen=True)
class Superseded:
    announcement: Announcement
    by: Announcement
    run_id: str  # the run that trained (or holds) the newer one
    trained: bool  # False: the newer one is only held (waiting or running)
    rule: str = "superseded"


@dataclass(frozen=True)
class Queue:
    announcement: Announcement
    run: RunAnnouncement
    replaces: tuple[str, ...] = ()  # waiting runs to cancel once the new one exists
    carried: dict[str, str] = field(default_factory=dict)  # kind → run id it came from
    retried: tuple[Due, ...] = ()  # due announcements this run takes up
    rule: str = "queued"


Decision = Duplicate | Dropped | Superseded | Queue


def _newest(items: Iterable[tuple[Announcement, str]]) -> dict[str, tuple[Announcement, str]]:
    best: dict[str, tuple[Announcement, str]] = {}
    for item, run_id in items:
        if item.kind not in best or item.newer_than(best[item.kind][0]):
            best[item.kind] = (item, run_id)
    return best


def held_or_trained(runs: list[RunView]) -> dict[str, tuple[Announcement, str]]:
    """The newest announcement of each kind that a waiting, running or completed run serves."""
    return _newest((a, r.id) for r in runs if r.holds and r.announcement is not None
                   for a in r.announcement.serves.values())


def _all_dropped(runs: list[RunView]) -> dict[str, str]:
    return {event_id: r.id for r in runs for event_id in r.dropped}


def due_announcements(runs: list[RunView]) -> list[Due]:
    """Announcements of runs that ended without training, not dropped, not held or trained
    by another run, and newer than every held or trained one of their kind; oldest first."""
    holders = [r for r in runs if r.holds]
    dropped = _all_dropped(runs)
    dropped_items = _dropped_items(runs, dropped)
    covered = held_or_trained(runs)
    found: dict[tuple[str, str, object], Due] = {}
    for run in runs:
        if run.phase != "ended":
            continue
        for item in run.items():
            if any(d.same_as(item) for d in dropped_items):
                continue
            if any(item.same_as(held) for r in holders for held in r.items()):
                continue
            if item.kind in covered and not item.newer_than(covered[item.kind][0]):
                continue
            found.setdefault(item.identity, Due(item, run.id, run.name, run.state_name))
    return sorted(found.values(), key=lambda d: d.announcement.order)


def _dropped_items(runs: list[RunView], dropped: dict[str, str]) -> list[Announcement]:
    return [a for r in runs for a in r.items() if a.event_id in dropped]


def decide(new: Announcement, runs: list[RunView]) -> Decision:
    for run in runs:
        if run.holds and any(new.same_as(item) for item in run.items()):
            return Duplicate(new, run.id)
    dropped = _all_dropped(runs)
    for item in _dropped_items(runs, dropped):
        if new.same_as(item):
            return Dropped(new, dropped[item.event_id])
    held = held_or_trained(runs)
    if new.kind in held and not new.newer_than(held[new.kind][0]):
        newer, holder = held[new.kind]
        trained = next(r for r in runs if r.id == holder).phase == "trained"
        return Superseded(new, newer, holder, trained)
    due = [d for d in due_announcements(runs) if not d.announcement.same_as(new)]
    candidates = [*((a, h) for a, h in held.values()), (new, ""),
                  *((d.announcement, d.run_id) for d in due)]
    chosen = _newest(candidates)
    serves = {kind: item for kind, (item, _) in chosen.items()}
    carried = {kind: holder for kind, (_, holder) in chosen.items() if holder}
    waiting = [r for r in runs if r.phase == "waiting" and r.announcement is not None]
    served_ids = {a.event_id for a in serves.values()}
    folded: dict[str, Announcement] = {}
    pending = [*(i for r in waiting for i in r.items()), new, *(d.announcement for d in due)]
    for item in pending:
        if item.event_id not in served_ids:
            folded[item.event_id] = item
    coalesced = tuple(sorted(folded.values(), key=lambda a: a.order))
    return Queue(new, RunAnnouncement(serves, coalesced), tuple(r.id for r in waiting),
                 carried, tuple(due))


def explain(decision: Decision, names: dict[str, str]) -> str:
    """One line for the dispatcher's log: which rule applied and why."""
    new = decision.announcement
    if isinstance(decision, Duplicate):
        return (f"rule duplicate: {new.describe()} is the same announcement as one run "
                f"{names.get(decision.run_id, decision.run_id)} holds or trained; no run")
    if isinstance(decision, Dropped):
        return (f"rule dropped: {new.describe()} was dropped by a user (tag on run "
                f"{names.get(decision.run_id, decision.run_id)}); no run")
    if isinstance(decision, Superseded):
        how = ("trained" if decision.trained else
               "holds (should that run end without training it, it stays due)")
        return (f"rule superseded: {new.describe()} is older than {decision.by.describe()}, "
                f"which run {names.get(decision.run_id, decision.run_id)} {how}; no run")
    retried = "".join(f"; takes up {d.describe()}" for d in decision.retried)
    return (f"rule queued: {new.describe()}; the run serves "
            f"{'; '.join(a.describe() for a in decision.run.serves.values())}{retried}")


def coalesced_message(new: Announcement, replacement_id: str, replacement_name: str) -> str:
    """The cancelled run's state message: which announcement it was coalesced into."""
    return (f"{COALESCED_PREFIX}{replacement_name} ({replacement_id}), queued for the newer "
            f"announcement {new.describe()}; it trains this run's announcements too, or newer "
            "ones of the same kind")
