"""The retrain a regression's rollback queues (flows/operations/watch_retrain.py) against a
real Prefect API: the newest dataset the retrain deployment's runs hold is announced again
as an event the API stores, and the dispatcher, given that event as its trigger passes it,
makes the waiting retrain run serve it. A missing deployment or an empty ledger queues
nothing and says so."""

from __future__ import annotations

import pytest
from prefect.client.orchestration import get_client

from flows.announcements.dispatch import dispatch_announcement
from flows.config import load_profile
from flows.operations.watch_retrain import announce_retrain
from tests.support.announcements import announce, ds, make_target, runs_of
from tests.support.prefect_server import wait_until

pytestmark = pytest.mark.usefixtures("prefect_api")


def _events(client, uri: str) -> list[dict]:
    found = client.request("POST", "/events/filter", json={"limit": 50, "filter": {
        "event": {"name": ["tpurl.dataset.updated"]}}}).json()["events"]
    return [e for e in found if e["payload"].get("uri") == uri]


def test_the_newest_dataset_is_announced_again_and_the_dispatcher_queues_it(tmp_path):
    deployment, deployment_id = make_target({"profile": "rehearsal"})
    announce(deployment, "dataset", ds("v1.parquet"), 1)
    _, held = announce(deployment, "dataset", ds("v2.parquet"), 2)
    profile = load_profile("rehearsal", {"local.root": str(tmp_path),
                                         "watch.retrain": deployment}, environ={})
    with get_client(sync_client=True) as client:
        line = announce_retrain(client, profile)
        assert line.startswith(f"retrain: dataset {ds('v2.parquet')} announced again to "
                               f"{deployment}'s dispatcher"), line
        [event] = wait_until(lambda: _events(client, ds("v2.parquet")), 60,
                             "the announcement on the API")
    assert event["resource"]["tpurl.profile"] == "rehearsal"
    result = dispatch_announcement(deployment=deployment, kind="dataset",
                                   value=event["payload"]["uri"], event_id=event["id"],
                                   occurred=event["occurred"])
    assert result["decision"] == "queued", result
    waiting = [r for r in runs_of(deployment_id) if r.state.is_scheduled()]
    assert [str(r.id) for r in waiting] == [result["run"]]
    assert waiting[0].parameters["dataset_uri"] == ds("v2.parquet")
    assert held["run"] in result["replaced"]


def test_nothing_is_queued_without_a_deployment_or_an_announcement(tmp_path):
    deployment, _ = make_target({"profile": "rehearsal"})
    with get_client(sync_client=True) as client:
        for target, words in ((deployment, "no dataset was ever announced"),
                              ("rl-post-training/no-such", "does not exist")):
            profile = load_profile("rehearsal", {"local.root": str(tmp_path),
                                                 "watch.retrain": target}, environ={})
            line = announce_retrain(client, profile)
            assert words in line and "no retrain was queued" in line, line
        assert announce_retrain(client, load_profile(
            "rehearsal", {"local.root": str(tmp_path)}, environ={})) == ""
