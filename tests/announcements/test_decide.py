"""The dispatcher's decision rules, without a server: ordering by ``occurred``, the merge
of dataset and revision, superseded and duplicate announcements."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from flows.announcements.decide import (
    DROPPED_TAG,
    Dropped,
    Duplicate,
    Queue,
    RunView,
    Superseded,
    coalesced_message,
    decide,
    dropped_ids,
    due_announcements,
    explain,
    phase_of,
)
from flows.announcements.guard import coalesced_by
from flows.announcements.model import (
    Announcement,
    AnnouncementError,
    RunAnnouncement,
    dispatcher_run_name,
    retrain_run_name,
)
from flows.runpage.artifacts import announcement_markdown
from flows.runpage.markdown_text import md_text

T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
REV = "0123456789abcdef0123456789abcdef01234567"


def ann(kind: str, value: str, minute: int, event_id: str | None = None) -> Announcement:
    return Announcement(kind, value, event_id or f"e-{kind}-{minute}",
                        T0 + timedelta(minutes=minute))


def run(run_id: str, phase: str, *serves: Announcement,
        coalesced: tuple[Announcement, ...] = ()) -> RunView:
    return RunView(run_id, f"name-{run_id}", phase,  # type: ignore[arg-type]
                   RunAnnouncement({a.kind: a for a in serves}, coalesced))


def test_first_announcement_queues_one_run_serving_it():
    new = ann("dataset", "gs://b/v2.parquet", 1)
    decision = decide(new, [])
    assert isinstance(decision, Queue)
    assert decision.run.serves == {"dataset": new}
    assert decision.replaces == () and decision.run.coalesced == ()
    assert decision.run.parameters()["dataset_uri"] == "gs://b/v2.parquet"
    assert "model_revision" not in decision.run.parameters()


def test_announcement_during_a_run_waits_and_a_newer_one_replaces_it():
    running = run("r1", "active", ann("dataset", "v2", 1))
    second = decide(ann("dataset", "v3", 2), [running])
    assert isinstance(second, Queue) and second.replaces == ()
    waiting = run("w1", "waiting", *second.run.serves.values())
    third = decide(ann("dataset", "v4", 3), [waiting, running])
    assert isinstance(third, Queue)
    assert third.run.serves["dataset"].value == "v4"
    assert third.replaces == ("w1",)
    assert [a.value for a in third.run.coalesced] == ["v3"]


def test_dataset_and_revision_coalesce_into_one_run_keeping_both():
    waiting = run("w1", "waiting", ann("dataset", "v3", 2))
    decision = decide(ann("base-model", "abc123", 3), [waiting])
    assert isinstance(decision, Queue)
    assert {k: a.value for k, a in decision.run.serves.items()} == {
        "dataset": "v3", "base-model": "abc123"}
    assert decision.run.coalesced == ()  # v3 is still served, not folded away
    assert decision.replaces == ("w1",)
    params = decision.run.parameters()
    assert params["dataset_uri"] == "v3" and params["model_revision"] == "abc123"


def test_a_later_revision_keeps_the_dataset_the_last_run_trained():
    done = run("c1", "trained", ann("dataset", "v5", 1))
    decision = decide(ann("base-model", "def456", 2), [done])
    assert isinstance(decision, Queue)
    assert decision.run.serves["dataset"].value == "v5"
    assert decision.carried == {"dataset": "c1"}


def test_order_is_by_occurred_not_by_arrival():
    waiting = run("w1", "waiting", ann("dataset", "v4", 4))
    late_but_older = ann("dataset", "v3", 3)
    decision = decide(late_but_older, [waiting])
    assert isinstance(decision, Superseded)
    assert decision.by.value == "v4" and decision.run_id == "w1"


def test_older_than_what_the_running_run_serves_is_superseded():
    running = run("r1", "active", ann("dataset", "v4", 4), ann("base-model", "r1", 1))
    assert isinstance(decide(ann("dataset", "v3", 2), [running]), Superseded)
    # a different kind is not compared with it
    assert isinstance(decide(ann("base-model", "r2", 2), [running]), Queue)


def test_redelivered_event_is_a_duplicate_wherever_it_was_recorded():
    first = ann("dataset", "v2", 1, event_id="evt-1")
    waiting = run("w1", "waiting", ann("dataset", "v3", 2), coalesced=(first,))
    again = Announcement("dataset", "v2", "evt-1", first.occurred)
    decision = decide(again, [waiting])
    assert isinstance(decision, Duplicate) and decision.run_id == "w1"
    served = run("c1", "trained", first)
    assert isinstance(decide(again, [served]), Duplicate)


def test_same_occurred_is_ordered_by_event_id_so_dispatchers_agree():
    a, b = ann("dataset", "va", 1, "evt-a"), ann("dataset", "vb", 1, "evt-b")
    assert isinstance(decide(a, [run("w", "waiting", b)]), Superseded)
    assert isinstance(decide(b, [run("w", "waiting", a)]), Queue)


def test_runs_nobody_announced_are_never_replaced():
    manual = RunView("m1", "manual", "waiting", None)
    decision = decide(ann("dataset", "v2", 1), [manual])
    assert isinstance(decision, Queue) and decision.replaces == ()


def test_coalesced_announcements_accumulate_and_stay_ordered():
    waiting = run("w2", "waiting", ann("dataset", "v4", 4),
                  coalesced=(ann("dataset", "v3", 3), ann("dataset", "v2", 2)))
    decision = decide(ann("dataset", "v5", 5), [waiting])
    assert isinstance(decision, Queue)
    assert [a.value for a in decision.run.coalesced] == ["v2", "v3", "v4"]


@pytest.mark.parametrize(("state_type", "name", "phase"), [
    ("SCHEDULED", "Scheduled", "waiting"), ("SCHEDULED", "AwaitingConcurrencySlot", "waiting"),
    ("SCHEDULED", "Late", "waiting"), ("SCHEDULED", "AwaitingRetry", "active"),
    ("PENDING", "Pending", "active"), ("RUNNING", "Running", "active"),
    ("CANCELLING", "Cancelling", "active"), ("COMPLETED", "Completed", "trained"),
    ("CANCELLED", "Cancelled", "ended"), ("CRASHED", "Crashed", "ended"),
    ("FAILED", "Failed", "ended"), ("FAILED", "TimedOut", "ended")])
def test_only_not_started_runs_are_waiting(state_type, name, phase):
    assert phase_of(state_type, name) == phase


def test_record_round_trips_through_the_run_parameter():
    record = RunAnnouncement({"dataset": ann("dataset", "gs://b/d/v3.parquet", 2),
                              "base-model": ann("base-model", REV, 3)},
                             (ann("dataset", "gs://b/d/v2.parquet", 1),))
    back = RunAnnouncement.from_dict(record.parameters()["announcement"])
    assert back == record
    assert retrain_run_name("rehearsal", back, "20250601") == \
        "rehearsal-v3.parquet+rev-0123456789ab-20250601"
    text = announcement_markdown(back)
    assert md_text("gs://b/d/v3.parquet") in text and "Coalesced into this run" in text


def test_occurred_as_prefect_renders_it_is_accepted():
    """Prefect renders ``{{ event.occurred }}`` with str(datetime): a space, not a T."""
    item = Announcement.of("dataset", "v2", "e1", "2025-06-01 12:00:00.123456+00:00")
    assert item.occurred == datetime(2025, 6, 1, 12, 0, 0, 123456, tzinfo=UTC)


@pytest.mark.parametrize(("args", "field"), [
    (("model", "v", "e", "2025-06-01T00:00:00+00:00"), "announcement.kind"),
    (("dataset", "  ", "e", "2025-06-01T00:00:00+00:00"), "announcement.value"),
    (("dataset", "v", "", "2025-06-01T00:00:00+00:00"), "announcement.event_id"),
    (("dataset", "v", "e", "yesterday"), "announcement.occurred")])
def test_bad_announcement_is_refused_naming_the_field(args, field):
    with pytest.raises(AnnouncementError, match=f"^{field}: .*fix: "):
        Announcement.of(*args)


def test_bad_run_parameter_is_refused_naming_the_field():
    with pytest.raises(AnnouncementError, match=r"announcement\.serves\.dataset\.occurred"):
        RunAnnouncement.from_dict({"serves": {"dataset": {
            "kind": "dataset", "value": "v", "event_id": "e", "occurred": "soon"}}})


def test_the_run_recognises_the_dispatchers_cancellation_in_its_history():
    new = ann("dataset", "v4", 4)
    message = coalesced_message(new, "id-2", "rehearsal-v4")
    cancelled = SimpleNamespace(type=SimpleNamespace(value="CANCELLED"), message=message)
    other = SimpleNamespace(type=SimpleNamespace(value="CANCELLED"), message="by hand")
    pending = SimpleNamespace(type=SimpleNamespace(value="PENDING"), message=None)
    assert coalesced_by([pending, cancelled]) == message
    assert coalesced_by([pending, other]) is None


@pytest.mark.parametrize("ended", ["Cancelled", "Crashed", "Failed", "TimedOut"])
def test_a_run_that_ended_without_training_leaves_its_announcement_due(ended):
    """v9's run was cancelled (or crashed, failed, timed out); an older v8 then
    arriving is not superseded "by" v9: the next run trains v9, with v8 folded into it."""
    v9 = ann("dataset", "v9", 9)
    gone = replace(run("c9", "ended", v9), state_name=ended)
    [due] = due_announcements([gone])
    assert due.announcement == v9 and f"ended {ended} without training it" in due.describe()
    decision = decide(ann("dataset", "v8", 8), [gone])
    assert isinstance(decision, Queue)
    assert decision.run.serves["dataset"] == v9
    assert [a.value for a in decision.run.coalesced] == ["v8"]
    assert decision.retried == (due,) and decision.carried == {"dataset": "c9"}
    assert "takes up dataset v9" in explain(decision, {})
    # a revision announced next keeps the due dataset too
    other = decide(ann("base-model", REV, 10), [gone])
    assert isinstance(other, Queue) and other.run.serves["dataset"] == v9


def test_the_same_event_replayed_after_its_run_failed_is_queued_not_a_duplicate():
    v9 = ann("dataset", "v9", 9)
    decision = decide(v9, [replace(run("c9", "ended", v9), state_name="Crashed")])
    assert isinstance(decision, Queue) and decision.run.serves["dataset"] == v9
    assert decision.retried == ()  # the new one itself, not a second copy


def test_superseded_says_whether_the_newer_one_was_trained_or_is_only_held():
    done = decide(ann("dataset", "v3", 3), [run("c1", "trained", ann("dataset", "v4", 4))])
    held = decide(ann("dataset", "v3", 3), [run("r1", "active", ann("dataset", "v4", 4))])
    assert isinstance(done, Superseded) and done.trained
    assert isinstance(held, Superseded) and not held.trained
    assert "stays due" in explain(held, {"r1": "run-1"}) and "run-1" in explain(held, {
        "r1": "run-1"})


def test_the_same_uri_and_occurred_under_a_new_id_is_one_announcement():
    first = ann("dataset", "gs://b/v2.parquet", 2, event_id="id-1")
    retry = replace(first, event_id="id-2")
    assert isinstance(decide(retry, [run("w1", "waiting", first)]), Duplicate)
    assert isinstance(decide(retry, [run("c1", "trained", first)]), Duplicate)
    later = replace(first, event_id="id-3", occurred=first.occurred + timedelta(seconds=1))
    assert isinstance(decide(later, [run("c1", "trained", first)]), Queue)  # a new one


def test_only_an_explicit_drop_takes_a_due_announcement_off():
    v9 = ann("dataset", "v9", 9)
    gone = RunView("c9", "n", "ended", RunAnnouncement({"dataset": v9}), "Crashed",
                   dropped_ids(["tpurl-announcement", f"{DROPPED_TAG}{v9.event_id}"]))
    assert due_announcements([gone]) == []
    assert isinstance(decide(replace(v9, event_id="again"), [gone]), Dropped)
    decision = decide(ann("dataset", "v8", 8), [gone])
    assert isinstance(decision, Queue) and decision.run.serves["dataset"].value == "v8"


def test_a_revision_must_be_a_full_commit():
    for bad in ("refs/pr/1", "main", "v1.0", "0123456789ab", REV + "0", "g" * 40):
        with pytest.raises(AnnouncementError, match=r"^announcement\.value: .*not a commit"):
            Announcement.of("base-model", bad, "e", T0)
    assert Announcement.of("base-model", REV.upper(), "e", T0).value == REV


@pytest.mark.parametrize(("value", "shown"), [
    ("gs://my-bucket/data/openmath-v7.parquet", "gs:my-bucket›data›openmath-v7.parquet"),
    ("file:///my-bucket/data/openmath-v7.parquet", "file:my-bucket›data›openmath-v7.parquet"),
    ("gs://b/" + "d" * 80 + "/openmath-v7.parquet", "gs:b›ddd"),
    ("gs://b/../../x\n/y", "gs:b›..›..›x_›y")])
def test_dispatcher_names_keep_the_scheme_and_never_hold_a_slash(value, shown):
    name = dispatcher_run_name("dataset", value)
    assert shown in name and "/" not in name and "\n" not in name
    assert len(name) <= len("announce-dataset-") + 48
    if len(value) > 60:  # the middle goes, the file name stays
        assert "…" in name and name.endswith("›openmath-v7.parquet")
