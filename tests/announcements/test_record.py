"""The dispatcher's record of a run it queued vouches for that run, deployment and
announcement parameter only (pure; the check against a real API is test_direct_runs.py)."""

from __future__ import annotations

from flows.announcements.record import digest, matches, record_key, record_rows

ANNOUNCEMENT = {"serves": {"dataset": {"kind": "dataset", "value": "gs://b/d/v2.parquet",
                                       "event_id": "e-1", "occurred": "2026-01-01T00:00:00"}},
                "coalesced": []}


def test_the_digest_does_not_depend_on_key_order():
    reordered = {"coalesced": [], "serves": {"dataset": dict(reversed(
        ANNOUNCEMENT["serves"]["dataset"].items()))}}
    assert digest(reordered) == digest(ANNOUNCEMENT)


def test_a_record_vouches_for_its_own_run_deployment_and_parameter_only():
    rows = record_rows("run-1", "dep-1", ANNOUNCEMENT)
    assert matches(rows, "run-1", "dep-1", ANNOUNCEMENT)
    assert not matches(rows, "run-2", "dep-1", ANNOUNCEMENT)  # a copy on another run
    assert not matches(rows, "run-1", "dep-2", ANNOUNCEMENT)
    other = {**ANNOUNCEMENT, "coalesced": [ANNOUNCEMENT["serves"]["dataset"]]}
    assert not matches(rows, "run-1", "dep-1", other)
    assert not matches("not a table", "run-1", "dep-1", ANNOUNCEMENT)
    assert record_key("3f2a") == "tpurl-queued-3f2a"
    assert set(rows[0]) == {"run", "deployment", "announcement_sha256"}  # no announced value
