"""The dispatcher's rules over many orderings of announcements and run endings (pure,
hypothesis): an announcement is served only once a run trained it; whatever a run that
cancelled (queued or training), crashed, failed or timed out held stays due and the next
queued run takes it up; nothing is superseded by an announcement no run trained or holds.

The simulation plays the dispatcher (flows/announcements/decide.py applied as dispatch.py
applies it: a queued run waits, the runs it replaces are cancelled) and the worker (the
oldest waiting run starts; a running one ends in one of Prefect's endings)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from flows.announcements.decide import (
    Duplicate,
    Queue,
    RunView,
    Superseded,
    decide,
    due_announcements,
)
from flows.announcements.model import Announcement

T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
# how a started run may end: (phase, Prefect state name); Failed/TimedOut is a flow timeout
ENDINGS = [("trained", "Completed"), ("ended", "Cancelled"), ("ended", "Crashed"),
           ("ended", "Failed"), ("ended", "TimedOut")]

announce = st.tuples(st.just("announce"), st.sampled_from(["dataset", "base-model"]),
                     st.integers(0, 30), st.sampled_from(["new", "redeliver", "new-id"]))
worker = st.tuples(st.sampled_from(["start", "cancel-queued"]), st.just(""), st.just(0),
                   st.just(""))
ending = st.tuples(st.just("end"), st.sampled_from([f"{p}/{n}" for p, n in ENDINGS]),
                   st.just(0), st.just(""))
steps = st.lists(st.one_of(announce, worker, ending), max_size=40)


class World:
    def __init__(self) -> None:
        self.runs: list[RunView] = []
        self.made: list[Announcement] = []
        self.seq = 0

    def set_phase(self, run_id: str, phase: str, state: str) -> None:
        self.runs = [replace(r, phase=phase, state_name=state) if r.id == run_id else r
                     for r in self.runs]

    def oldest(self, phase: str) -> RunView | None:
        return next((r for r in self.runs if r.phase == phase), None)

    def newest(self, kind: str) -> Announcement | None:
        mine = [a for a in self.made if a.kind == kind]
        return max(mine, key=lambda a: a.order) if mine else None

    def announcement(self, kind: str, minute: int, how: str) -> Announcement:
        self.seq += 1
        earlier = [a for a in self.made if a.kind == kind]
        if how != "new" and earlier:
            chosen = earlier[minute % len(earlier)]
            if how == "redeliver":
                return chosen
            return replace(chosen, event_id=f"e{self.seq}")  # a retry under a new id
        # distinct announcements never tie on `occurred` here (ties: test_decide.py)
        occurred = T0 + timedelta(minutes=minute, microseconds=self.seq)
        return Announcement(kind, f"{kind}-{minute}-{self.seq}", f"e{self.seq}", occurred)

    def dispatch(self, new: Announcement) -> None:
        decision = decide(new, self.runs)
        phases = {r.id: r.phase for r in self.runs}
        if isinstance(decision, Duplicate):
            assert phases[decision.run_id] != "ended", "a duplicate of a due announcement"
            assert any(new.same_as(a) for a in self.made)
            return
        self.made.append(new)
        if isinstance(decision, Superseded):
            assert phases[decision.run_id] != "ended", \
                "superseded by an announcement no run trained or holds"
            assert decision.trained == (phases[decision.run_id] == "trained")
            assert decision.by.newer_than(new)
            return
        assert isinstance(decision, Queue)
        for kind in ("dataset", "base-model"):
            newest = self.newest(kind)
            if newest is not None:
                assert decision.run.serves[kind].identity == newest.identity, kind
        for replaced in decision.replaces:
            self.set_phase(replaced, "ended", "Cancelled")  # "Coalesced into …"
        self.runs.append(RunView(f"r{len(self.runs)}", f"run-{len(self.runs)}", "waiting",
                                 decision.run))
        assert sum(r.phase == "waiting" for r in self.runs) == 1


@settings(max_examples=400, deadline=None)
@given(steps)
def test_no_announcement_is_lost_to_any_ending(plan):
    world = World()
    for action, arg, minute, how in plan:
        if action == "announce":
            world.dispatch(world.announcement(arg, minute, how))
        elif action == "start" and (run := world.oldest("waiting")):
            world.set_phase(run.id, "active", "Running")
        elif action == "cancel-queued" and (run := world.oldest("waiting")):
            world.set_phase(run.id, "ended", "Cancelled")
        elif action == "end" and (run := world.oldest("active")):
            phase, state = arg.split("/")
            world.set_phase(run.id, phase, state)
    while run := world.oldest("waiting") or world.oldest("active"):  # the worker drains
        world.set_phase(run.id, "trained", "Completed")
    trained = [a for r in world.runs if r.phase == "trained"
               for a in r.announcement.serves.values()]  # type: ignore[union-attr]
    due = [d.announcement for d in due_announcements(world.runs)]
    for kind in ("dataset", "base-model"):
        newest = world.newest(kind)
        if newest is None:
            continue
        assert any(a.identity == newest.identity for a in trained + due), (kind, newest)
        if any(a.identity == newest.identity for a in due):
            # not trained yet: the next announcement of either kind queues a run that does
            other = "base-model" if kind == "dataset" else "dataset"
            later = Announcement(other, "next", "e-next", T0 + timedelta(days=1))
            decision = decide(later, world.runs)
            assert isinstance(decision, Queue)
            assert decision.run.serves[kind].identity == newest.identity
