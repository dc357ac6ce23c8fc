"""The decision rules' details that mutation testing (scripts/mutation.sh) found unchecked:
which run a decision names, the due rules item by item, and the dispatcher's log line."""

from __future__ import annotations

from types import SimpleNamespace

from flows.announcements.decide import (
    Dropped,
    Duplicate,
    Queue,
    Superseded,
    coalesced_message,
    decide,
    due_announcements,
    explain,
)
from flows.announcements.guard import COALESCED_PREFIX, coalesced_by
from flows.announcements.model import RunAnnouncement
from tests.announcements.test_decide import ann, run


def ended(run_id: str, *serves, coalesced=(), state: str = "Crashed"):
    view = run(run_id, "ended", *serves, coalesced=coalesced)
    return view.__class__(view.id, view.name, "ended", view.announcement, state)


def test_a_dropped_item_does_not_hide_the_next_item_of_the_same_run():
    dropped = ann("dataset", "d1", 1)
    other = ann("revision", "r1", 2)
    gone = ended("x", dropped, other)
    tagger = ended("t", dropped)
    tagger = tagger.__class__(tagger.id, tagger.name, "ended", None, "Failed",
                              frozenset({dropped.event_id}))
    due = due_announcements([gone, tagger])
    assert [d.announcement for d in due] == [other]


def test_an_item_held_elsewhere_does_not_hide_the_next_item_of_the_same_run():
    held = ann("dataset", "d1", 1)
    other = ann("revision", "r1", 2)
    due = due_announcements([ended("x", held, other), run("w", "waiting", held)])
    assert [d.announcement for d in due] == [other]


def test_due_needs_to_be_newer_than_what_was_trained_of_its_kind():
    trained = run("c", "trained", ann("dataset", "d2", 2))
    older, newer = ann("dataset", "d1", 1), ann("dataset", "d3", 3)
    assert due_announcements([ended("x", older), trained]) == []
    due = due_announcements([ended("y", newer), trained])
    assert [d.announcement for d in due] == [newer]


def test_a_due_announcement_names_the_run_that_left_it_and_how():
    item = ann("dataset", "d1", 1)
    (due,) = due_announcements([ended("x", item, state="TimedOut")])
    assert (due.run_id, due.run_name, due.ended) == ("x", "name-x", "TimedOut")
    assert due.describe() == f"{item.describe()}, due: run name-x ended TimedOut without training it"


def test_duplicate_and_dropped_name_the_announcement_and_the_run():
    new = ann("dataset", "d1", 1)
    duplicate = decide(new, [run("a", "active", new)])
    assert duplicate == Duplicate(new, "a")
    tagger = ended("t", new)
    tagger = tagger.__class__(tagger.id, tagger.name, "ended", tagger.announcement, "Failed",
                              frozenset({new.event_id}))
    dropped = decide(ann("dataset", "d1", 1, event_id="again"), [tagger])
    assert isinstance(dropped, Dropped) and dropped.run_id == "t"
    assert dropped.announcement.event_id == "again"


def test_the_log_line_of_each_rule_names_the_run_by_its_name():
    new, newer = ann("dataset", "d1", 1), ann("dataset", "d2", 2)
    names = {"a": "run-a"}
    assert explain(Duplicate(new, "a"), names) == (
        f"rule duplicate: {new.describe()} is the same announcement as one run run-a holds "
        "or trained; no run")
    assert explain(Dropped(new, "a"), names) == (
        f"rule dropped: {new.describe()} was dropped by a user (tag on run run-a); no run")
    assert explain(Dropped(new, "b"), names).endswith("(tag on run b); no run")
    assert explain(Superseded(new, newer, "a", True), names) == (
        f"rule superseded: {new.describe()} is older than {newer.describe()}, which run "
        "run-a trained; no run")
    assert explain(Superseded(new, newer, "b", False), names) == (
        f"rule superseded: {new.describe()} is older than {newer.describe()}, which run b "
        "holds (should that run end without training it, it stays due); no run")


def test_the_queued_log_line_lists_what_the_run_serves_and_takes_up():
    left = ann("revision", "r1", 1)
    new = ann("dataset", "d1", 2)
    decision = decide(new, [ended("x", left)])
    assert isinstance(decision, Queue)
    assert explain(decision, {}) == (
        f"rule queued: {new.describe()}; the run serves {new.describe()}; {left.describe()}"
        f"; takes up {decision.retried[0].describe()}")
    plain = Queue(new, RunAnnouncement({"dataset": new}, ()))
    assert explain(plain, {}) == f"rule queued: {new.describe()}; the run serves {new.describe()}"


def test_the_cancelled_runs_message_names_its_replacement():
    new = ann("dataset", "d1", 1)
    assert coalesced_message(new, "id-9", "retrain-9") == (
        f"{COALESCED_PREFIX}retrain-9 (id-9), queued for the newer announcement "
        f"{new.describe()}; it trains this run's announcements too, or newer ones of the same "
        "kind")


def test_states_missing_a_message_or_a_type_are_not_the_dispatchers_cancellation():
    cancelled = SimpleNamespace(value="CANCELLED")
    states = [SimpleNamespace(), SimpleNamespace(type=cancelled),
              SimpleNamespace(type=cancelled, message=None),
              SimpleNamespace(type=object(), message=f"{COALESCED_PREFIX}x"),
              SimpleNamespace(message=f"{COALESCED_PREFIX}x")]
    assert coalesced_by(states) is None
    found = SimpleNamespace(type=cancelled, message=f"{COALESCED_PREFIX}y")
    assert coalesced_by([*states, found]) == f"{COALESCED_PREFIX}y"


def test_an_item_older_than_what_was_trained_does_not_hide_the_next_item():
    trained = run("c", "trained", ann("dataset", "d2", 2))
    other = ann("revision", "r1", 3)
    due = due_announcements([ended("x", ann("dataset", "d1", 1), other), trained])
    assert [d.announcement for d in due] == [other]


def test_a_run_missing_from_the_names_is_shown_by_its_id():
    new = ann("dataset", "d1", 1)
    assert explain(Duplicate(new, "zz"), {}) == (
        f"rule duplicate: {new.describe()} is the same announcement as one run zz holds or "
        "trained; no run")


def test_each_due_announcement_taken_up_is_listed():
    first, second = ann("dataset", "d1", 1), ann("revision", "r1", 2)
    decision = decide(ann("other", "o1", 4), [ended("x", first), ended("y", second)])
    assert isinstance(decision, Queue) and len(decision.retried) == 2
    assert explain(decision, {}).endswith(
        f"; takes up {decision.retried[0].describe()}; takes up {decision.retried[1].describe()}")
