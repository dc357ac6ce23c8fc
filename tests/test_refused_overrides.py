"""A token-shaped `--set` value is refused before Prefect stores anything, and no refusal
quotes it back: the real CLI and the real flow on a real Prefect API, whose flow runs, logs
and state messages are read back and searched.

`tpurl run` validates the profile with its overrides before it creates a flow run
(flows/cli.py ``main``), so nothing reaches the API. A deployment run's parameters are
stored by Prefect when the run is created, before the flow body can look at them: that
cannot be prevented here (NOTES.md), so the flow's refusal must not echo the value either.
And a deployment's run, executed as a worker executes it, is refused an override of a field
that is not run-tunable before any side effect, with the field named.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.profiles import fake_hf_token
from tests.support.worker_run import execute_as_a_worker

pytestmark = pytest.mark.services

TOKEN = fake_hf_token("RefusedOverride")
# a field that refuses token literals, and ones whose type errors would quote the value
FIELDS = ("model.hf_revision", "eval.batches", "image.builder", "train.args.learning_rate")


def _flow_runs_and_logs() -> tuple[str, str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterExpectedStartTime
    from prefect.client.schemas.sorting import FlowRunSort, LogSort
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)
    # the newest expected by now: a run made now is among them, whatever runs other tests of
    # the session's API scheduled far ahead (the dispatcher's ledger tests schedule 200)
    soon = FlowRunFilter(expected_start_time=FlowRunFilterExpectedStartTime(
        before_=datetime.now(UTC) + timedelta(days=1)))
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=soon, limit=200,
                                     sort=FlowRunSort.EXPECTED_START_TIME_DESC)
        logs = client.read_logs(limit=200, sort=LogSort.TIMESTAMP_DESC)
    return (json.dumps([r.model_dump(mode="json") for r in runs]),
            "\n".join(log.message for log in logs))


@pytest.mark.parametrize("field", FIELDS)
def test_tpurl_run_refuses_before_any_flow_run_and_never_quotes_the_value(
        prefect_api: None, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        field: str) -> None:
    from flows.cli import main

    code = main(["run", "rehearsal", "--set", f"local.root={tmp_path}",
                 "--set", f"{field}={TOKEN}"])
    err = capsys.readouterr().err
    assert code == 2 and f"{field}:" in err and "is invalid" in err
    assert TOKEN not in err and TOKEN[:12] not in err
    runs, logs = _flow_runs_and_logs()
    # no flow run was created: none has this test's root among its parameters (the
    # session's API holds other tests' runs, some of them still changing state)
    assert str(tmp_path) not in runs
    assert TOKEN not in runs and TOKEN not in logs


def test_a_deployment_style_run_stores_the_parameter_but_its_refusal_does_not_quote_it(
        prefect_api: None, tmp_path: Path) -> None:
    """What a run created with these parameters (the UI's run form, `prefect deployment
    run`) does: Prefect keeps the parameter, which nothing in the flow can prevent; the
    refusal names the field and the fix without the value."""
    from flows.config.errors import ProfileError
    from flows.pipeline import rl_post_training

    state = rl_post_training(profile="rehearsal", overrides={
        "local.root": str(tmp_path), "eval.batches": TOKEN}, return_state=True)
    assert state.is_failed()
    error = state.result(raise_on_failure=False)
    assert isinstance(error, ProfileError) and "eval.batches: Input should be a valid " \
        "integer" in str(error)
    assert TOKEN not in str(error) and TOKEN not in (state.message or "")
    runs, logs = _flow_runs_and_logs()
    assert TOKEN in runs  # the stored parameter: the limit NOTES.md states
    assert "eval.batches" in logs and TOKEN not in logs


# A deployment's run, executed as a process worker executes it (tests/support/worker_run.py):
# its overrides may change run-tunable fields only (flows/config/run_overrides.py).
DEPLOYMENT_RUNS = {
    "image": ({"image.base": "docker.io/attacker/evil:1"}, "image.base", "fixed by the "
              "deployment"),
    "secret": ({"model.hf_token.env": "PREFECT_API_KEY"}, "model.hf_token.env", "fixed by "
               "the deployment"),
    "section": ({"local": ""}, "local", "fixed by the deployment"),
    "tunable, bad value": ({"eval.batches": "0"}, "eval.batches", "greater than or equal"),
}


def test_a_deployment_s_run_is_refused_what_its_overrides_may_not_change(
        prefect_api: None) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, LogFilter, LogFilterFlowRunId

    from flows.common.paths import REPO_ROOT

    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name("rl-post-training")
        deployment_id = client.create_deployment(
            flow_id=flow_id, name=f"refused-{uuid.uuid4().hex[:8]}",
            entrypoint="flows/pipeline.py:rl_post_training",
            pull_steps=[{"prefect.deployments.steps.set_working_directory": {
                "directory": str(REPO_ROOT)}}])  # as prefect.yaml's checkout_pull
        runs = {kind: client.create_flow_run_from_deployment(deployment_id, parameters={
            "profile": "rehearsal", "overrides": overrides}).id
            for kind, (overrides, _field, _why) in DEPLOYMENT_RUNS.items()}
    workers = {kind: execute_as_a_worker(str(run_id)) for kind, run_id in runs.items()}
    outputs = {kind: worker.communicate(timeout=600)[0] for kind, worker in workers.items()}
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)
    with get_client(sync_client=True) as client:
        for kind, run_id in runs.items():
            _overrides, field, why = DEPLOYMENT_RUNS[kind]
            run = client.read_flow_run(run_id)
            assert run.deployment_id == deployment_id
            assert run.state is not None and run.state.is_failed(), (kind, outputs[kind])
            message = run.state.message or ""
            # the field, why, and that the run's parameter (not the file) is at fault
            assert f"{field}: " in message and why in message, message
            assert "the run's overrides parameter cannot be used with profile" in message
            assert "is invalid" not in message
            # refused before any side effect: no stage (task run) started, nothing logged
            # after validation
            tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[run_id])))
            assert tasks == [], kind
            logs = [log.message for log in client.read_logs(log_filter=LogFilter(
                flow_run_id=LogFilterFlowRunId(any_=[run_id])))]
            assert any(field in line for line in logs), (kind, logs)
            assert not any("validated" in line for line in logs), (kind, logs)


def test_the_deployments_own_overrides_are_its_not_the_runs(prefect_api: None,
                                                              monkeypatch) -> None:
    """prefect.yaml's `overrides` (the GKE retrain's `eval.batches`, which adds an eval
    section a run could not add) are the deploying operator's: read from the deployment on the
    API, not from the run's merged parameters, and exempt from the run-tunable rule only with
    the same key and value."""
    from prefect.client.orchestration import get_client

    from flows.config import ProfileError, load_profile
    from flows.deployed.declared import deployment_declared
    from flows.flow_runs.run_origin import deployed_fields
    from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED

    given = {"eval.batches": "4"}
    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name("rl-post-training")
        deployment_id = client.create_deployment(
            flow_id=flow_id, name=f"deployed-{uuid.uuid4().hex[:8]}",
            entrypoint="flows/pipeline.py:rl_post_training",
            parameters={"profile": TUTORIAL, "overrides": given})
    monkeypatch.setenv("PREFECT__RUNTIME__DEPLOYMENT__ID", str(deployment_id))
    deployed = deployed_fields(deployment_declared())  # as the flow reads it
    assert deployed == given

    def load(run_overrides: dict[str, str]):
        return load_profile(TUTORIAL, {**TUTORIAL_REQUIRED, **run_overrides}, environ={},
                            origin="deployment", deployed={**TUTORIAL_REQUIRED, **deployed})

    assert load(given).eval is not None  # the deployment's own: the retrain evaluates
    for run_overrides, field in (({"eval.batches": "1"}, "eval.batches"),
                                 ({**given, "image.base": "docker.io/attacker/evil:1"},
                                  "image.base")):
        with pytest.raises(ProfileError) as refused:
            load(run_overrides)
        assert f"{field}: " in str(refused.value)
    monkeypatch.delenv("PREFECT__RUNTIME__DEPLOYMENT__ID")
    assert deployed_fields(deployment_declared()) == {}  # an in-process call: no deployment
