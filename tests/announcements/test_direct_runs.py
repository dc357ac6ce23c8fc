"""A run of the retrain deployment created directly through the API (the UI's run form,
`prefect deployment run`, any client that may create runs), not by the dispatcher: it is
held to the announcement rules, and it can neither mark a real announcement served nor drop
it. Against a real Prefect API, each run executed as a process worker executes it
(`python -m prefect.engine` with PREFECT__FLOW_RUN_ID: prefect 3.9.1
prefect/workers/process.py), the ledger read back as the dispatcher reads it."""

from __future__ import annotations

import uuid
from uuid import UUID

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterKey,
    FlowRunFilter,
    FlowRunFilterId,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.client.schemas.objects import ConcurrencyLimitStrategy, ConcurrencyOptions
from prefect.logging.handlers import APILogWorker
from prefect.states import Cancelled, Completed

from flows.announcements.decide import DROPPED_TAG, due_announcements
from flows.announcements.dispatch import read_ledger
from flows.announcements.record import record_key, refusal, write_record
from flows.common.paths import REPO_ROOT
from tests.support.announcements import ANNOUNCED, announce, ds, execute_as_a_worker

pytestmark = pytest.mark.services


def _retrain_deployment() -> tuple[str, UUID]:
    """A retrain deployment as prefect.yaml's retrain-rehearsal: the real entrypoint, run
    from the checkout (its checkout_pull), limit 1 with ENQUEUE."""
    name = f"retrain-direct-{uuid.uuid4().hex[:8]}"
    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name("rl-post-training")
        deployment_id = client.create_deployment(
            flow_id=flow_id, name=name, parameters={"profile": "rehearsal"},
            entrypoint="flows/pipeline.py:rl_post_training",
            pull_steps=[{"prefect.deployments.steps.set_working_directory": {
                "directory": str(REPO_ROOT)}}],
            concurrency_limit=1, concurrency_options=ConcurrencyOptions(
                collision_strategy=ConcurrencyLimitStrategy.ENQUEUE))
    return f"rl-post-training/{name}", deployment_id


def _due_ids(deployment_id: UUID) -> set[str]:
    with get_client(sync_client=True) as client:
        return {d.announcement.event_id for d in due_announcements(
            read_ledger(client, deployment_id))}


def test_direct_runs_are_refused_and_leave_the_real_announcement_due(prefect_api) -> None:
    deployment, deployment_id = _retrain_deployment()
    event_id, queued = announce(deployment, "dataset", ds("v2.parquet"), 1)
    with get_client(sync_client=True) as client:  # the user cancels it before it starts
        real = client.read_flow_run(UUID(queued["run"]))
        client.set_flow_run_state(real.id, Cancelled(message="cancelled by the user"))
    assert _due_ids(deployment_id) == {event_id}  # ended without training: due

    handed = real.parameters["announcement"]  # readable by any API client
    sibling = f"file://{ANNOUNCED}-untrusted/v2.parquet"  # the prefix without its '/'
    attacks = {
        "revision": ({"model_revision": "refs/pr/7"}, [],
                     "model.hf_revision: revision 'refs/pr/7' is not a commit (set by the "
                     "run's model_revision parameter)"),
        "outside": ({"dataset_uri": sibling}, [],
                    "data.train_files: " + repr(sibling) + " is under no prefix the profile "
                    "rehearsal allows"),
        "overrides": ({"overrides": {"data.train_files": "/tmp/evil.parquet"}}, [],
                      "data.train_files: '/tmp/evil.parquet' is under no prefix"),
        # the dispatcher's own parameters, copied onto a run of one's own, with the tag
        # `tpurl announcements drop` writes
        "forged": ({"dataset_uri": ds("v2.parquet"), "announcement": handed},
                   [f"{DROPPED_TAG}{event_id}"],
                   "announcement: no dispatcher recorded run"),
    }
    # a run holding the real announcement, recorded and sealed as the dispatcher's (as a
    # run made first under its idempotency key was), that trains another dataset
    attacks["swapped"] = ({"dataset_uri": ds("v1.parquet"), "announcement": handed}, [],
                          "dataset_uri: differs from the announced dataset")
    with get_client(sync_client=True) as client:
        runs = {kind: client.create_flow_run_from_deployment(
            deployment_id, parameters=parameters, tags=tags).id
            for kind, (parameters, tags, _why) in attacks.items()}
        [record] = client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=[record_key(str(real.id))])))
        write_record(client, str(record.flow_run_id), str(runs["swapped"]),
                     str(deployment_id), handed)
    workers = {kind: execute_as_a_worker(run_id) for kind, run_id in runs.items()}
    outputs = {kind: worker.communicate(timeout=600)[0] for kind, worker in workers.items()}
    APILogWorker.drain_all(timeout=10)
    with get_client(sync_client=True) as client:
        for kind, run_id in runs.items():
            why = attacks[kind][2]
            run = client.read_flow_run(run_id)
            assert run.state is not None and run.state.is_failed(), (kind, outputs[kind])
            assert why in (run.state.message or ""), (kind, run.state.message)
            assert "fix: " in (run.state.message or "")
            # refused before any side effect: no stage started, nothing said it validated
            assert client.read_task_runs(flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[run_id]))) == [], kind
            logs = [log.message for log in client.read_logs(log_filter=LogFilter(
                flow_run_id=LogFilterFlowRunId(any_=[run_id])))]
            assert not any("validated" in line or "serves " in line for line in logs), logs
        forged = client.read_flow_run(runs["forged"])
        assert "leave the announcement parameter empty" in (forged.state.message or "")
        # even a forged run that reached Completed (what a run that trained something else
        # would reach) marks nothing served: the ledger reads only recorded runs
        client.set_flow_run_state(runs["forged"], Completed(), force=True)
    assert _due_ids(deployment_id) == {event_id}

    # and the next announcement's run takes the real one up
    _, follow = announce(deployment, "base-model", "ab" * 20, 2)
    assert follow["decision"] == "queued" and follow["retried"] == [event_id]
    with get_client(sync_client=True) as client:  # the dispatcher's run is its own
        run = client.read_flow_run(UUID(follow["run"]))
        assert refusal(client, str(run.id), str(deployment_id),
                       run.parameters["announcement"], wait_s=0) is None
        assert refusal(client, str(runs["forged"]), str(deployment_id),
                       run.parameters["announcement"], wait_s=0) is not None
