"""Deciding a burst at once (flows/announcements/batch.py, pure, hypothesis): one run is
queued whatever the order and mix of the announcements, it serves what deciding them one at
a time would serve, and every announcement is either in it or decided against it; the
settle wait of flows/announcements/pending.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from flows.announcements.batch import PLANNED, decide_batch
from flows.announcements.decide import Duplicate, Queue, RunView, Superseded, decide
from flows.announcements.model import Announcement, RunAnnouncement
from flows.announcements.pending import PendingRun, settle_wait, settled_pending

T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
REV = "0123456789abcdef0123456789abcdef0123456"

items = st.lists(st.tuples(st.sampled_from(["dataset", "base-model"]), st.integers(0, 40),
                           st.booleans()), min_size=1, max_size=30)


def make(spec: list[tuple[str, int, bool]]) -> list[Announcement]:
    out = []
    for i, (kind, minute, repeat) in enumerate(spec):
        if repeat and out:  # the emitter's retry of an earlier one under a new id
            first = out[minute % len(out)]
            out.append(Announcement.of(first.kind, first.value, f"retry-{i}", first.occurred))
            continue
        value = f"gs://b/d{minute}.parquet" if kind == "dataset" else f"{REV}{minute % 10}"
        out.append(Announcement.of(kind, value, f"e{i}", T0 + timedelta(minutes=minute)))
    return out


def one_at_a_time(news: list[Announcement], runs: list[RunView]) -> RunAnnouncement | None:
    """Today's dispatchers, in the announcements' order: each Queue replaces the waiting run."""
    ledger, record = list(runs), None
    for item in sorted(news, key=lambda a: a.order):
        decision = decide(item, ledger)
        if isinstance(decision, Queue):
            ledger = [r for r in ledger if r.id not in decision.replaces]
            ledger.append(RunView(id=f"run-{item.event_id}", name="", phase="waiting",
                                  announcement=decision.run))
            record = decision.run
    return record


@settings(max_examples=150, deadline=None)
@given(items, st.booleans(), st.randoms(use_true_random=False))
def test_a_burst_queues_one_run_serving_what_one_at_a_time_would(spec, running, rnd):
    news = make(spec)
    runs = []
    if running:  # a run in progress holds an announcement from minute 20
        held = Announcement.of("dataset", "gs://b/held.parquet", "held", T0 + timedelta(minutes=20))
        runs.append(RunView(id="r1", name="r1", phase="active",
                            announcement=RunAnnouncement({"dataset": held})))
    shuffled = list(news)
    rnd.shuffle(shuffled)
    batch = decide_batch(shuffled, runs)
    expected = one_at_a_time(news, runs)
    assert (batch.queue.run.serves if batch.queue else None) == (
        expected.serves if expected else None)
    for item in news:
        decision = batch.decisions[item.event_id]
        if isinstance(decision, Queue):
            assert batch.served_by_planned(item.event_id), item
        else:
            assert isinstance(decision, Duplicate | Superseded), decision
            assert decision.run_id in {PLANNED, "r1"}
    assert batch.queue is None or PLANNED not in batch.queue.replaces


def test_the_waiting_runs_a_burst_replaces_are_the_real_ones():
    old = Announcement.of("dataset", "gs://b/old.parquet", "old", T0)
    waiting = RunView(id="w1", name="w1", phase="waiting",
                      announcement=RunAnnouncement({"dataset": old}))
    news = [Announcement.of("dataset", f"gs://b/n{i}.parquet", f"n{i}",
                            T0 + timedelta(minutes=i + 1)) for i in range(5)]
    batch = decide_batch(news, [waiting])
    assert batch.queue is not None and batch.queue.replaces == ("w1",)
    assert batch.queue.run.serves["dataset"].event_id == "n4"
    assert [a.event_id for a in batch.queue.run.coalesced] == ["old", "n0", "n1", "n2", "n3"]


def test_the_burst_is_decided_once_none_came_for_settle_s():
    now = datetime.now(UTC)
    assert settle_wait(None, now, 15) == 0
    assert settle_wait(now - timedelta(seconds=20), now, 15) == 0
    assert 4.9 < settle_wait(now - timedelta(seconds=10), now, 15) <= 5
    # a burst still arriving: read again after a sleep, until the newest is settle_s old
    reads, slept = [], []
    item = Announcement.of("dataset", "gs://b/x.parquet", "x", T0)

    def read() -> list[PendingRun]:
        reads.append(1)
        age = 1.0 if len(reads) < 3 else 30.0
        return [PendingRun("p", item, True, datetime.now(UTC) - timedelta(seconds=age))]

    pending = settled_pending(read, None, 10, lambda _: None, slept.append)
    assert len(reads) == 3 and len(slept) == 2 and [p.id for p in pending] == ["p"]
