"""A user's cancel, end to end on a real `prefect server start` and Prefect's own runner: the
run is cancelled as the UI does it (the flow run set to Cancelling), the runner delivers its
cancel intent and SIGTERM, and what a user then sees is asserted: the train task run
Cancelled (not Crashed), the stage table's rows (export "not run", not "pending"), the
`tpurl.stage.cancelled` event, the flow run Cancelled, and no "Crash detected" line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flows.common.paths import REPO_ROOT
from flows.runpage.live import OUTPUTS_TITLE
from tests.support.prefect_server import PrefectServer, prefect_server_in, wait_until

pytestmark = [pytest.mark.services, pytest.mark.realtime]


@pytest.fixture
def server(tmp_path: Path):
    with prefect_server_in(tmp_path) as found:
        yield found


def _stage_of(name: str) -> str:
    return name.split(":", 1)[0]


def test_a_cancel_during_train_ends_it_cancelled_with_the_rest_not_run(server: PrefectServer,
                                                                      tmp_path: Path):
    env = {**server.env, "PYTHONPATH": str(REPO_ROOT)}
    announced = tmp_path / "data" / "openmath-v9.parquet"  # what an announcement carries
    announced.parent.mkdir()
    announced.write_bytes(b"PAR1")
    runner = subprocess.Popen([sys.executable, "-m", "tests.support.cancel_probe",
                               str(tmp_path / "root"), str(announced)], cwd=REPO_ROOT, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        assert runner.stdout is not None
        deployment_id = next(line.split()[1] for line in runner.stdout
                             if line.startswith("SERVING"))
        run_id = server.api("POST", f"/deployments/{deployment_id}/create_flow_run",
                            json={}).json()["id"]

        def training() -> dict[str, Any] | None:
            runs = {_stage_of(t["name"]): t for t in
                    server.api("POST", "/task_runs/filter", json={
                        "flow_runs": {"id": {"any_": [run_id]}}}).json()}
            train = runs.get("train")
            return train if train and train["state_type"] == "RUNNING" else None

        wait_until(training, 180, "the train task running")
        # what the UI's Cancel button does: the flow run goes to Cancelling
        server.api("POST", f"/flow_runs/{run_id}/set_state", json={
            "state": {"type": "CANCELLING", "message": "cancelled from the UI"}, "force": True})

        def ended() -> dict[str, Any] | None:
            run = server.api("GET", f"/flow_runs/{run_id}").json()
            return run if run["state_type"] == "CANCELLED" else None

        wait_until(ended, 120, "the flow run Cancelled")
    finally:
        runner.terminate()
        try:
            out = runner.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            runner.kill()
            out = runner.communicate()[0]

    tasks = {_stage_of(t["name"]): t for t in server.api("POST", "/task_runs/filter", json={
        "flow_runs": {"id": {"any_": [run_id]}}}).json()}
    assert tasks["train"]["state_type"] == "CANCELLED", (tasks["train"]["state"], out[-3000:])
    assert "cancelled by the user" in tasks["train"]["state"]["message"]
    assert "export" not in tasks  # never started

    artifacts = server.api("POST", "/artifacts/filter", json={
        "artifacts": {"flow_run_id": {"any_": [run_id]}}}).json()
    table = next(a for a in artifacts if a["key"] == "tpurl-rehearsal-stages")
    rows = table["data"] if isinstance(table["data"], list) else json.loads(table["data"])
    assert [r["status"] for r in rows] == ["skipped", "skipped", "ran", "cancelled", "not run"]
    listed = next(a for a in artifacts if a["key"] is None and
                  (a["description"] or "").startswith(OUTPUTS_TITLE))["data"]
    assert f"Training data of this run: `{announced}`" in listed, listed

    def cancelled_events() -> list[dict[str, Any]]:  # events reach the API asynchronously
        return server.api("POST", "/events/filter", json={"limit": 50, "filter": {
            "event": {"name": ["tpurl.stage.cancelled"]},
            "related": {"resources_in_roles": [[f"prefect.flow-run.{run_id}", "flow-run"]]}}}
        ).json()["events"]

    event = wait_until(cancelled_events, 60, "the tpurl.stage.cancelled event")[0]
    assert event["resource"]["prefect.resource.id"] == "tpurl.stage.rehearsal.train"
    assert event["payload"]["reason"] == "cancelled by the user"

    logs = [e["message"] for e in server.api("POST", "/logs/filter", json={
        "logs": {"flow_run_id": {"any_": [run_id]}}, "limit": 200}).json()]
    assert not [m for m in logs if "Crash detected" in m], logs
    stop = [m for m in logs if m.startswith("run stopped during train (cancelled by the user)")]
    assert stop and f"Training data: {announced}." in stop[0], logs
