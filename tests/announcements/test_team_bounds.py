"""Two teams in one workspace, one team's member attacking the other's announcements through
the Prefect API only (a real server: the test harness's; dispatcher runs executed as a
process worker executes them): the dispatcher queues runs of its own deployment's target
only, its record cannot be forged by a client that writes artifacts, a run made first under
the dispatcher's idempotency key is not recorded, and runs anyone may create hide no due
announcement from the ledger."""

from __future__ import annotations

import logging
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import ArtifactCreate
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect.states import Cancelled, Completed, Scheduled

from flows.announcements.decide import DROPPED_TAG, due_announcements
from flows.announcements.dispatch import RUN_TAG, read_ledger
from flows.announcements.model import Announcement, AnnouncementError, RunAnnouncement
from flows.announcements.record import digest, record_key, refusal
from flows.common.paths import REPO_ROOT
from tests.support.announcements import (
    T0,
    announce,
    ds,
    execute_as_a_worker,
    make_target,
    runs_of,
)

pytestmark = pytest.mark.usefixtures("prefect_api")


def _due_ids(deployment_id: UUID) -> set[str]:
    with get_client(sync_client=True) as client:
        return {d.announcement.event_id for d in due_announcements(
            read_ledger(client, deployment_id))}


def _left_due(deployment: str, deployment_id: UUID, minute: int) -> tuple[str, dict]:
    """An announcement whose run the user cancelled before it started: due."""
    event_id, queued = announce(deployment, "dataset", ds(f"v{minute}.parquet"), minute)
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(UUID(queued["run"]), Cancelled(message="by the user"))
        real = client.read_flow_run(UUID(queued["run"]))
    assert _due_ids(deployment_id) == {event_id}
    return event_id, real.parameters["announcement"]


def test_a_dispatcher_run_queues_runs_of_its_own_deployments_target_only() -> None:
    """Team A's dispatcher deployment declares team A's retrain deployment; a run of it
    naming team B's is refused before anything is read or made. (A run that leaves the
    target to the deployment queues team A's: test_dispatch_burst.py.)"""
    settle = {"profile": "rehearsal", "overrides": {"announcements.settle_s": "0"}}
    team_a, team_a_id = make_target(settle)
    team_b, team_b_id = make_target(settle)
    with get_client(sync_client=True) as client:
        dispatcher = client.create_deployment(
            flow_id=client.create_flow_from_name("tpurl-announcement"),
            name=f"announce-{uuid.uuid4().hex[:8]}", parameters={"deployment": team_a},
            entrypoint="flows/announcements/dispatch.py:dispatch_announcement",
            pull_steps=[{"prefect.deployments.steps.set_working_directory": {
                "directory": str(REPO_ROOT)}}])
        attack = client.create_flow_run_from_deployment(dispatcher, parameters={
            "kind": "dataset", "value": ds("b-v1.parquet"), "occurred": str(T0),
            "deployment": team_b, "event_id": str(uuid.uuid4())}).id
    output = execute_as_a_worker(attack).communicate(timeout=600)[0]
    with get_client(sync_client=True) as client:
        refused = client.read_flow_run(attack)
    assert refused.state is not None and refused.state.is_failed(), output
    message = refused.state.message or ""
    assert f"deployment: is the deployment's: a run may not choose another value than " \
        f"{team_a!r}" in message, message
    assert "parameters.deployment in prefect.yaml" in message
    assert runs_of(team_b_id) == [] and runs_of(team_a_id) == []  # nothing queued, vouched


def test_a_record_forged_by_an_artifact_writer_neither_drops_nor_serves(target,
                                                                         caplog) -> None:
    """The forger copies the record's shape onto the real dispatcher run, for a run of its
    own that carries the due announcement and the drop tag (and for one that completed);
    without the workers' key its seal is a guess."""
    deployment, deployment_id = target
    event_id, handed = _left_due(deployment, deployment_id, 1)
    with get_client(sync_client=True) as client:
        [real_record] = client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=[record_key(str(r.id))
                                        for r in runs_of(deployment_id)])))
        dispatcher_run = real_record.flow_run_id
        forged = {
            "dropped": client.create_flow_run_from_deployment(
                deployment_id, parameters={"dataset_uri": ds("v1.parquet"),
                                           "announcement": handed},
                tags=[RUN_TAG, f"{DROPPED_TAG}{event_id}"], state=Cancelled()).id,
            "served": client.create_flow_run_from_deployment(
                deployment_id, parameters={"dataset_uri": ds("v1.parquet"),
                                           "announcement": handed},
                tags=[RUN_TAG]).id,
        }
        for run_id in forged.values():
            row = {"run": str(run_id), "deployment": str(deployment_id),
                   "announcement_sha256": digest(handed)}
            guessed = secrets.token_hex(32)  # an HMAC-SHA256's length, under no key known
            client.create_artifact(ArtifactCreate(
                key=record_key(str(run_id)), type="table", flow_run_id=dispatcher_run,
                data=[row, {**row, "seal": guessed}]))
        client.set_flow_run_state(forged["served"], Completed(), force=True)
        for run_id in forged.values():
            assert refusal(client, str(run_id), str(deployment_id), handed, wait_s=0)
    with caplog.at_level(logging.WARNING, logger="flows.announcements.record"):
        assert _due_ids(deployment_id) == {event_id}
    assert "2 record(s) of deployment" in caplog.text and "TPURL_DISPATCH_KEY" in caplog.text


def test_runs_scheduled_far_ahead_hide_no_due_announcement(target, monkeypatch) -> None:
    """A run-only member creates a page of runs for 2099, with and without the dispatcher's
    tag: the ledger still holds the due announcement, and the next run takes it up. The
    ledger's page is made small (the paging is the same code at any size): a page of 200
    runs made one API call each cost 25 s of waiting for the server."""
    from flows.announcements import dispatch

    monkeypatch.setattr(dispatch, "PAGE", 5)
    deployment, deployment_id = target
    event_id, _ = _left_due(deployment, deployment_id, 1)
    far = Scheduled(scheduled_time=datetime(2099, 1, 1, tzinfo=UTC))
    with get_client(sync_client=True) as client:
        for i in range(dispatch.PAGE + 10):  # a page of tagged ones: with the real one, two
            client.create_flow_run_from_deployment(  # pages
                deployment_id, state=far.model_copy(),
                tags=[RUN_TAG] if i < dispatch.PAGE else [])
    with get_client(sync_client=True) as client:
        assert len(read_ledger(client, deployment_id)) == dispatch.PAGE + 1  # every tagged run
    assert _due_ids(deployment_id) == {event_id}
    _, follow = announce(deployment, "base-model", "cd" * 20, 2)
    assert follow["decision"] == "queued" and follow["retried"] == [event_id]


def test_a_run_made_first_under_the_dispatchers_idempotency_key_is_not_recorded(
        target) -> None:
    """The attacker predicts the announcement the dispatcher will hand (it posted the
    event) and creates the run first, under the dispatcher's idempotency key, with its own
    dataset: the dispatcher refuses to record it, so it serves nothing."""
    deployment, deployment_id = target
    event_id, minute = str(uuid.uuid4()), 3
    value = ds("v3.parquet")
    handed = RunAnnouncement({"dataset": Announcement.of(
        "dataset", value, event_id, str(T0 + timedelta(minutes=minute)))}).to_dict()
    with get_client(sync_client=True) as client:
        planted = client.create_flow_run_from_deployment(
            deployment_id, parameters={"dataset_uri": ds("poisoned.parquet"),
                                       "announcement": handed},
            idempotency_key=f"tpurl-announcement-{event_id}", tags=[RUN_TAG]).id
    with pytest.raises(AnnouncementError, match="other parameters than this announcement's"):
        announce(deployment, "dataset", value, minute, event_id=event_id)
    with get_client(sync_client=True) as client:
        assert refusal(client, str(planted), str(deployment_id), handed, wait_s=0)
    # the refusal's fix, as written: the same announcement under a new event id
    _, queued = announce(deployment, "dataset", value, minute)
    assert queued["decision"] == "queued" and queued["run"] != str(planted)


class _CreatingMeanwhile:
    """The real client, with runs of the target created through the same API while the
    ledger is read (as another client would): two after each of the first ``reads`` page
    reads, and one before every count when ``before_count``."""

    def __init__(self, client, deployment_id: UUID, reads: int = 0,
                 before_count: bool = False) -> None:
        self.client, self.deployment_id = client, deployment_id
        self.reads, self.before_count = reads, before_count

    def _create(self, runs: int) -> None:
        for _ in range(runs):
            self.client.create_flow_run_from_deployment(self.deployment_id, tags=[RUN_TAG])

    def read_flow_runs(self, **kwargs):
        page = self.client.read_flow_runs(**kwargs)
        if self.reads > 0:
            self.reads -= 1
            self._create(2)
        return page

    def count_flow_runs(self, **kwargs):
        if self.before_count:
            self._create(1)
        return self.client.count_flow_runs(**kwargs)


def test_the_ledger_holds_every_run_when_runs_are_created_while_it_is_read(
        target, monkeypatch) -> None:
    """Offset pages shift when a run is created meanwhile: the read repeats until it holds
    as many runs as the server counts, and fails, saying so, if they never stop coming."""
    from flows.announcements import dispatch

    _, deployment_id = target
    monkeypatch.setattr(dispatch, "PAGE", 3)
    with get_client(sync_client=True) as client:
        for _ in range(7):
            client.create_flow_run_from_deployment(deployment_id, tags=[RUN_TAG])
        read = dispatch.read_all_runs(_CreatingMeanwhile(client, deployment_id, reads=2),
                                      deployment_id)
        assert {r.id for r in read} == {r.id for r in runs_of(deployment_id)}
        assert len(read) == 7 + 2 * 2
        with pytest.raises(AnnouncementError, match="kept being created while the dispatcher"):
            dispatch.read_all_runs(_CreatingMeanwhile(client, deployment_id, before_count=True),
                                   deployment_id)
