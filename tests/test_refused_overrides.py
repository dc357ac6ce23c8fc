"""A token-shaped `--set` value is refused before Prefect stores anything, and no refusal
quotes it back: the real CLI and the real flow on a real Prefect API, whose flow runs, logs
and state messages are read back and searched.

`tpurl run` validates the profile with its overrides before it creates a flow run
(flows/cli.py ``main``), so nothing reaches the API. A deployment run's parameters are
stored by Prefect when the run is created, before the flow body can look at them: that
cannot be prevented here (NOTES.md), so the flow's refusal must not echo the value either.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.profiles import fake_hf_token

pytestmark = pytest.mark.services

TOKEN = fake_hf_token("RefusedOverride")
# a field that refuses token literals, and ones whose type errors used to quote the value
FIELDS = ("model.hf_revision", "eval.batches", "image.builder", "train.args.learning_rate")


def _flow_runs_and_logs() -> tuple[str, str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.sorting import FlowRunSort, LogSort
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)
    with get_client(sync_client=True) as client:  # the newest: a run made now is among them
        runs = client.read_flow_runs(limit=200, sort=FlowRunSort.EXPECTED_START_TIME_DESC)
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
