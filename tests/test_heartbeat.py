"""The product's flow-run heartbeat (flows/flow_runs/heartbeat.py): one an hour in every
deployment and in `tpurl run`, and the shipped crash-silent-runs automation, which marks a
run Crashed when its heartbeat stops and never a live one.

The automation is run on a real `prefect server start` with its window scaled down (45 s for
a 30 s heartbeat, Prefect's shortest): one run's process is killed after its first heartbeat,
another lives on until it has beaten once after the killed one's crash (past its own first
window, so only its later heartbeats kept it Running), then completes, never once Crashed.
The shipped window is checked against the shipped heartbeat apart.
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
from flows.deployed.declared import Declared
from flows.flow_runs.heartbeat import HEARTBEAT_S, SETTING, ZOMBIE_AFTER_S, quiet_heartbeats
from tests.support.prefect_server import prefect_server_in, wait_until

pytestmark = [pytest.mark.services, pytest.mark.realtime]  # a server, runs that sleep
AUTOMATION = REPO_ROOT / "deployments" / "automations" / "crash-silent-runs.yaml"


def test_every_deployment_beats_once_an_hour():
    config = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    found = {d["name"]: Declared({}, d["work_pool"].get("job_variables") or {}).env.get(SETTING)
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
        # each sleeps until the test writes a line to it (600 s at most): the live one ends
        # once the test has seen it outlive the killed one's crash by a heartbeat
        runs = [subprocess.Popen([sys.executable, "-m", "tests.support.silent_run", "600"],
                                 cwd=REPO_ROOT, env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, start_new_session=True)
                for _ in range(2)]
        try:
            killed, live = (p.stdout.readline().strip() for p in runs)  # type: ignore[union-attr]

            def beats_of(run_id: str) -> int:
                return len(server.api("POST", "/events/filter", json={"limit": 50, "filter": {
                    "event": {"name": ["prefect.flow-run.heartbeat"]},
                    "any_resource": {"id": [f"prefect.flow-run.{run_id}"]}}}).json()["events"])

            wait_until(lambda: beats_of(killed), 60, "the first heartbeat of the run to kill")
            os.killpg(runs[0].pid, signal.SIGKILL)

            def state(run_id: str) -> str:
                return server.api("GET", f"/flow_runs/{run_id}").json()["state"]["type"]

            wait_until(lambda: state(killed) == "CRASHED", 120, "the silent run marked Crashed")
            # The live run started with the killed one: without its later heartbeats its window
            # ran out with the killed one's. It beats once more after that crash (30 s at most,
            # so more than the 45 s window after its first beat) and is still Running then.
            seen = beats_of(live)
            wait_until(lambda: beats_of(live) > seen, 60, "a heartbeat of the live run after the crash")
            assert state(live) == "RUNNING"
            runs[1].communicate("done\n", timeout=300)
            assert runs[1].returncode == 0
            wait_until(lambda: state(live) == "COMPLETED", 60, "the live run's completion")
            history = server.api("GET", "/flow_run_states/", params={"flow_run_id": live}).json()
            assert "CRASHED" not in {s["type"] for s in history}, history  # not even for a while
        finally:
            for process in runs:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
