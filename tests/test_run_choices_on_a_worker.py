"""A run created through the Prefect API chooses nothing that runs on a process worker.

Against one real `prefect server start` and real process workers, with prefect.yaml's
`rehearsal` and teardown deployments deployed as the docs deploy them:

- on a pool made with Prefect's default process template (what `prefect work-pool create`
  makes without a template),
  a run's ``command`` job variable runs as the worker's user: the attack is real;
- on `tpurl-process` made with deployments/work-pool/process-base-job-template.json, the API
  refuses at creation a run naming ``command``, ``working_dir`` or an env name the template
  does not list (prefect/server/api/validation.py
  ``validate_job_variables_for_deployment_flow_run``, prefect 3.9.1), so no run exists and
  nothing runs;
- a listed env name given its own value, or another ``profile``, reaches the worker (Prefect
  cannot tell a run's variables from its deployment's), and the flow refuses the run naming
  it before it loads the profile (flows/deployed/run_choices.py);
- a run that chooses nothing, or repeats its deployment's own values, goes on to the
  profile's own validation (the teardown, as shipped, lacks its GKE fields).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flows.common.paths import REPO_ROOT
from tests.support.prefect_server import (
    PREFECT,
    QUICK_POLLING,
    RETRYABLE,
    PrefectServer,
    prefect_server_in,
    wait_until,
)
from tests.support.process_group import stop_group

pytestmark = [pytest.mark.services, pytest.mark.realtime]

TEMPLATE = REPO_ROOT / "deployments/work-pool/process-base-job-template.json"
TEARDOWN = "teardown-qwen3-30b-a3b-v6e-32"
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


def _worker(server: PrefectServer, pool: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([PREFECT, "worker", "start", "--pool", pool], cwd=REPO_ROOT,
                                env=server.env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("prefect-home")
    with prefect_server_in(home, settings=QUICK_POLLING) as server:
        for args in (["work-pool", "create", "tpurl-process", "--type", "process",
                      "--base-job-template", str(TEMPLATE)],
                     ["work-pool", "create", "stock-process", "--type", "process"]):
            done = server.cli(*args)
            assert done.returncode == 0, done.stdout + done.stderr
        done = server.cli("--no-prompt", "deploy", "--name", "rehearsal", "--name", TEARDOWN)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        deployments = {d["name"]: d for d in server.api("POST", "/deployments/filter",
                                                        json={}).json()}
        flow_id = deployments["rehearsal"]["flow_id"]
        default = server.api("POST", "/deployments/", json={
            "name": "on-the-default-template", "flow_id": flow_id,
            "work_pool_name": "stock-process",
            "entrypoint": deployments["rehearsal"]["entrypoint"],
            "pull_steps": deployments["rehearsal"]["pull_steps"],
            "parameters": {"profile": "rehearsal"}}).json()
        workers = [_worker(server, "tpurl-process", home / "worker.log"),
                   _worker(server, "stock-process", home / "default-worker.log")]
        try:
            yield {"server": server, "home": home, "default": default, **deployments}
        finally:
            for worker in workers:
                stop_group(worker)


def _create(world: dict[str, Any], name: str, **body: Any) -> httpx.Response:
    """The API's answer, 422 included (``PrefectServer.api`` raises on it), retried as
    Prefect's client retries a busy server (tests/support/prefect_server.py)."""
    server: PrefectServer = world["server"]
    for attempt in range(6):
        answer = httpx.post(f"{server.url}/deployments/{world[name]['id']}/create_flow_run",
                            json=body, timeout=30)
        if answer.status_code not in RETRYABLE:
            break
        time.sleep(2 ** attempt)
    return answer


def _final(world: dict[str, Any], run_id: str) -> dict[str, Any]:
    server: PrefectServer = world["server"]
    return wait_until(lambda: (s := server.api("GET", f"/flow_runs/{run_id}").json()["state"])[
        "type"] in FINAL and s, 300, f"flow run {run_id} to end")


def _logs(world: dict[str, Any], run_id: str) -> str:
    server: PrefectServer = world["server"]
    found = server.api("POST", "/logs/filter", json={
        "logs": {"flow_run_id": {"any_": [run_id]}}, "limit": 200}).json()
    return "\n".join(entry["message"] for entry in found)


def _logs_once_they_hold(world: dict[str, Any], run_id: str, text: str,
                         timeout_s: float = 60.0) -> str:
    """The run's logs once ``text`` is among them (or as they are after ``timeout_s``): the
    flow process ships its last records to the API as it exits, which can be after the API
    already shows the run's final state."""
    deadline = time.monotonic() + timeout_s
    logs = _logs(world, run_id)
    while text not in logs and time.monotonic() < deadline:
        time.sleep(0.5)
        logs = _logs(world, run_id)
    return logs


def test_prefects_default_template_runs_a_runs_command_on_the_worker(world, tmp_path):
    """The attack, on a pool of Prefect's default process template: the marker is written by the
    worker's child, as the worker's user, with the worker's environment."""
    marker = tmp_path / "ran"
    run = _create(world, "default", job_variables={
        "command": f"sh -c 'env > {marker}.env; id > {marker}'"})
    assert run.status_code == 201, run.text
    log = world["home"] / "default-worker.log"
    # the command is no engine: the run's state is never reported, the marker is the proof
    wait_until(lambda: marker.is_file() and marker.read_text(), 300,
               f"the run's command on the worker ({log.read_text()[-2000:]})")
    assert "uid=" in marker.read_text()
    assert "PREFECT_API_URL=" in Path(f"{marker}.env").read_text()


@pytest.mark.parametrize("variables", [
    {"command": "sh -c 'id > MARKER'"},
    {"working_dir": "/tmp"},
    {"env": {"PYTHONPATH": "MARKER"}},
    {"env": {"PREFECT_API_URL": "http://127.0.0.1:9/api"}},
    {"env": {"HF_TOKEN": "hf_" + "x" * 34}},
    {"env": {"TPURL_IMAGE__BASE": "attacker/image:latest"}},
    {"env": {"TPURL_MODEL__HF_TOKEN__SECRET_BLOCK": "theirs"}},
    {"env": {"TPURL_CACHE_DIR": "MARKER"}},
    {"cluster_config": {"config": {}, "context_name": "x"}},
], ids=lambda v: next(iter(v)) + ("." + next(iter(v["env"])) if "env" in v else ""))
def test_the_api_refuses_a_variable_the_pool_does_not_offer(world, tmp_path, variables):
    marker = tmp_path / "ran"
    named = {k: ({n: str(x).replace("MARKER", str(marker)) for n, x in v.items()}
                 if isinstance(v, dict) and k == "env" else
                 str(v).replace("MARKER", str(marker)) if isinstance(v, str) else v)
             for k, v in variables.items()}
    server: PrefectServer = world["server"]
    before = server.api("POST", "/flow_runs/count", json={}).json()
    for name in ("rehearsal", TEARDOWN):
        refused = _create(world, name, job_variables=named)
        assert refused.status_code == 422, refused.text
        assert "Error creating flow run" in refused.text
    assert server.api("POST", "/flow_runs/count", json={}).json() == before
    assert not marker.exists()


@pytest.mark.parametrize(("name", "body", "named"), [
    (TEARDOWN, {"job_variables": {"env": {"TPURL_GKE__CLUSTER": "someone-elses"}}},
     "job_variables.env.TPURL_GKE__CLUSTER"),
    ("rehearsal", {"job_variables": {"env": {"TPURL_GKE__BUCKET": "theirs"}}},
     "job_variables.env.TPURL_GKE__BUCKET"),
    ("rehearsal", {"job_variables": {"env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "60"}}},
     "job_variables.env.PREFECT_FLOWS_HEARTBEAT_FREQUENCY"),
    ("rehearsal", {"job_variables": {"stream_output": False}}, "job_variables.stream_output"),
    ("rehearsal", {"parameters": {"profile": "qwen3-30b-a3b-v6e-32"}}, "profile"),
    (TEARDOWN, {"parameters": {"profile": "smoke-qwen3-0.6b-v6e-8"}}, "profile"),
], ids=["teardown-cluster", "rehearsal-bucket", "heartbeat", "stream_output",
        "rehearsal-profile", "teardown-profile"])
def test_the_flow_refuses_a_run_that_chose_its_own_value(world, name, body, named):
    run = _create(world, name, **body)
    assert run.status_code == 201, run.text
    final = _final(world, run.json()["id"])
    logs = _logs_once_they_hold(world, run.json()["id"], "chose what only the deployment may")
    assert final["type"] == "FAILED", final
    assert f"{named}:" in logs, logs[-3000:]
    assert "chose what only the deployment may" in logs, logs[-3000:]
    # refused before the profile is loaded: nothing validated, locked or started
    assert "validated" not in logs and "is required but not set" not in logs, logs[-3000:]
    for value in ("someone-elses", "theirs"):
        assert value not in logs


@pytest.mark.parametrize("body", [
    {},
    {"job_variables": {"env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "3600",
                               "TPURL_GKE__CLUSTER": ""}}},
    {"parameters": {"profile": "qwen3-30b-a3b-v6e-32", "delete_bucket": False}},
], ids=["nothing", "the-deployments-own-env", "the-deployments-own-profile"])
def test_a_run_that_repeats_its_deployment_reaches_the_profiles_validation(world, body):
    run = _create(world, TEARDOWN, **body)
    assert run.status_code == 201, run.text
    final = _final(world, run.json()["id"])
    logs = _logs_once_they_hold(world, run.json()["id"], "is required but not set")
    assert final["type"] == "FAILED", final
    assert "chose what only the deployment may" not in logs, logs[-3000:]
    assert "gke.project: is required but not set" in logs, logs[-3000:]
