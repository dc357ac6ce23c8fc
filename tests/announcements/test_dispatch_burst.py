"""A burst of announcements against a real Prefect API: the dispatcher run that a worker
starts first decides every announcement whose dispatcher run has not finished, queues one
retrain run, and cancels the dispatcher runs that have not started; one that had started
finds its announcement held. The dispatcher runs are made from a deployment (as a trigger
makes them) and one is executed in-process by Prefect's engine (prefect 3.9.1
prefect/flow_engine.py ``run_flow``, what a worker's process runs for a flow run)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from prefect.client.orchestration import get_client
from prefect.flow_engine import run_flow
from prefect.states import Pending, Running

from flows.announcements.dispatch import dispatch_announcement
from tests.support.announcements import T0, ds, make_target, runs_of

pytestmark = pytest.mark.usefixtures("prefect_api")


def test_the_first_dispatcher_of_a_burst_queues_one_run_for_all_of_it():
    deployment, target_id = make_target({"profile": "rehearsal",
                                         "overrides": {"announcements.settle_s": 0}})
    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name("tpurl-announcement")
        dispatcher = client.create_deployment(flow_id=flow_id,
                                              name=f"announce-{uuid.uuid4().hex[:8]}",
                                              parameters={"deployment": deployment})
        made = [client.create_flow_run_from_deployment(dispatcher, parameters={
            "deployment": deployment, "kind": "dataset", "value": ds(f"b{i}.parquet"),
            "event_id": str(uuid.uuid4()), "occurred": str(T0 + timedelta(seconds=i))})
            for i in range(6)]
        started = made[3]  # a worker took it already: it waits for the lock
        for state in (Pending(), Running()):
            client.set_flow_run_state(started.id, state, force=True)
        first = client.read_flow_run(made[0].id)
    result = run_flow(dispatch_announcement, flow_run=first, parameters=first.parameters)

    assert result["decision"] == "queued"
    assert sorted(result["batched"]) == sorted(r.parameters["event_id"] for r in made[1:])
    (retrain,) = runs_of(target_id)
    assert str(retrain.id) == result["run"] and retrain.state.is_scheduled()
    record = retrain.parameters["announcement"]
    assert record["serves"]["dataset"]["event_id"] == made[-1].parameters["event_id"]
    assert [a["event_id"] for a in record["coalesced"]] == [
        r.parameters["event_id"] for r in made[:-1]]
    with get_client(sync_client=True) as client:
        states = {r.id: client.read_flow_run(r.id).state for r in made[1:]}
    for run in made[1:]:
        if run.id == started.id:
            assert states[run.id].is_running()  # never cancelled under a process
        else:
            assert states[run.id].is_cancelled(), states[run.id]
            assert states[run.id].message.startswith("Decided by dispatcher run ")

    again = dispatch_announcement(**started.parameters)  # the started one, getting the lock
    assert again == {"decision": "duplicate", "run": result["run"]}
    assert len(runs_of(target_id)) == 1
