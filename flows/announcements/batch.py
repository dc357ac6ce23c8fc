"""Deciding several announcements at once (pure): what one dispatcher does with every
announcement whose dispatcher run has not finished yet, so a burst gives one retrain run.

The announcements are decided one by one, oldest first, with :func:`decide`, against the
target's runs plus one *planned* waiting run standing for the run this dispatcher will
create: a newer announcement replaces the planned run (its announcements are coalesced into
the next), an older or repeated one is superseded by it or a duplicate of it. So the batch
ends in exactly the decisions the same announcements would get one dispatcher at a time, but
with one run created (the last planned one) instead of one per announcement. The real
waiting runs replaced along the way, and the due announcements taken up, are collected for
that one run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from flows.announcements.decide import Decision, Due, Queue, RunView, decide
from flows.announcements.model import Announcement

PLANNED = "planned-run"  # stands for the run the dispatcher will create


@dataclass(frozen=True)
class Batch:
    """Each announcement's decision (by event id; run ids may be ``PLANNED``) and the one run
    to queue, if any."""

    decisions: dict[str, Decision] = field(default_factory=dict)
    queue: Queue | None = None

    def served_by_planned(self, event_id: str) -> bool:
        """Is this announcement trained by, or coalesced into, the run to queue?"""
        return self.queue is not None and event_id in self.queue.run.event_ids()


def decide_batch(items: Iterable[Announcement], runs: list[RunView]) -> Batch:
    """Decide ``items`` (repeats by event id counted once) against the target's ``runs``."""
    unique = {a.event_id: a for a in items}
    ledger, decisions = list(runs), {}
    last: Queue | None = None
    replaced: list[str] = []
    retried: dict[str, Due] = {}
    for item in sorted(unique.values(), key=lambda a: a.order):
        decision = decide(item, ledger)
        decisions[item.event_id] = decision
        if not isinstance(decision, Queue):
            continue
        replaced += [r for r in decision.replaces if r != PLANNED and r not in replaced]
        for due in decision.retried:
            retried.setdefault(due.announcement.event_id, due)
        # the replaced waiting runs will be cancelled; the planned run holds what they held
        ledger = [r for r in ledger if r.id not in decision.replaces]
        ledger.append(RunView(id=PLANNED, name="", phase="waiting", announcement=decision.run))
        last = decision
    if last is None:
        return Batch(decisions)
    carried = {kind: run for kind, run in last.carried.items() if run != PLANNED}
    queue = replace(last, replaces=tuple(replaced), carried=carried,
                    retried=tuple(retried.values()))
    return Batch(decisions, queue)
