"""The product's flow-run heartbeat (flows/flow_runs/heartbeat.py): one an hour in every
deployment and in `tpurl run`, and the shipped crash-silent-runs automation, which marks a
run Crashed when its heartbeat stops and never a live one.

The automation is run on a real `prefect server start` with its window scaled down (45 s for
a 30 s heartbeat, Prefect's shortest): one run's process is killed after its first heartbeat,
another sleeps on. The shipped window is checked against the shipped heartbeat apart.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prefect.events.schemas.automations import AutomationCore

from flows.common.paths import REPO_ROOT
from flows.flow_runs.heartbeat import HEARTBEAT_S, SETTING, ZOMBIE_AFTER_S, quiet_heartbeats
from tests.support.prefect_server import prefect_server_in, wait_until

pytestmark = [pytest.mark.services, pytest.mark.realtime]  # a server, runs that sleep
AUTOMATION = REPO_ROOT / "deployments" / "automations" / "crash-silent-runs.yaml"


def test_every_deployment_beats_once_an_hour():
    config = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    found = {d["name"]: ((d["work_pool"].get("job_variables") or {}).get("env") or {}).get(SETTING)
             for d in config["deployments"]}
    assert found and set(found.values()) == {str(HEARTBEAT_S)}, found


def test_tpurl_run_sets_the_heartbeat_unless_the_operator_did():
    env: dict[str, str] = {}
    quiet_heartbeats(env)
    assert env == {SETTING: str(HEARTBEAT_S)}
    env = {SETTING: "60"}
    quiet_heartbeats(env)
    assert env == {SETTING: "60"}


def test_the_shipped_window_outlasts_two_heartbeats():
    spec = AutomationCore.model_validate(yaml.safe_load(AUTOMATION.read_text()))
    assert spec.trigger.within.total_seconds() == ZOMBIE_AFTER_S >= 2 * HEARTBEAT_S


def test_a_killed_run_is_marked_crashed_and_a_live_one_is_not(tmp_path: Path):
    with prefect_server_in(tmp_path) as server:
        shipped = yaml.safe_load(AUTOMATION.read_text())
        shipped["trigger"]["within"] = 45
        scaled = tmp_path / "crash.yaml"
        scaled.write_text(yaml.safe_dump(shipped))
        done = server.cli("automation", "create", "--from-file", str(scaled))
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        env = {**server.env, SETTING: "30", "PYTHONPATH": str(REPO_ROOT)}
        runs = [subprocess.Popen([sys.executable, "-m", "tests.support.silent_run", str(s)],
                                 cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, text=True,
                                 start_new_session=True) for s in (600, 150)]
        try:
            killed, live = (p.stdout.readline().strip() for p in runs)  # type: ignore[union-attr]

            def beat_of(run_id: str) -> list[dict]:
                return server.api("POST", "/events/filter", json={"limit": 10, "filter": {
                    "event": {"name": ["prefect.flow-run.heartbeat"]},
                    "any_resource": {"id": [f"prefect.flow-run.{run_id}"]}}}).json()["events"]

            wait_until(lambda: beat_of(killed), 60, "the first heartbeat of the run to kill")
            os.killpg(runs[0].pid, signal.SIGKILL)

            def state(run_id: str) -> str:
                return server.api("GET", f"/flow_runs/{run_id}").json()["state"]["type"]

            wait_until(lambda: state(killed) == "CRASHED", 120, "the silent run marked Crashed")
            assert state(live) == "RUNNING"
            assert runs[1].wait(timeout=300) == 0
            wait_until(lambda: state(live) == "COMPLETED", 60, "the live run's completion")
        finally:
            for process in runs:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
