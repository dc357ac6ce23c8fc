"""The Kubernetes work pool's base job template exposes to a run only what a run may change
(issue 37.3): the command, the service account and the namespace are fixed, not variables,
and the schema refuses any variable it does not list. Against one real `prefect server
start`: Prefect validates a flow run's job variables against the pool's variables schema
when the run is created (prefect/server/api/validation.py
``validate_job_variables_for_deployment_flow_run``, prefect 3.9.1), and the pod is rendered
by prefect-kubernetes' own job configuration (tests/support/kube_pod.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from flows.common.paths import REPO_ROOT
from tests.support.prefect_server import PrefectServer, prefect_server_in

pytestmark = [pytest.mark.services, pytest.mark.realtime]

TEMPLATE = REPO_ROOT / "deployments/work-pool/kubernetes-base-job-template.json"
IMAGE = "127.0.0.1:5000/tpurl/tpurl-flow@sha256:" + "a" * 64


def test_the_template_has_no_variable_for_what_runs_or_as_whom() -> None:
    template = json.loads(TEMPLATE.read_text())
    variables = template["variables"]
    assert not {"command", "service_account_name", "namespace"} & set(variables["properties"])
    assert variables["additionalProperties"] is False
    placeholders = json.dumps(template["job_configuration"])
    for name in ("command", "service_account_name", "namespace"):
        assert "{{ " + name + " }}" not in placeholders


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrefectServer, dict]]:
    with prefect_server_in(tmp_path_factory.mktemp("prefect-home")) as server:
        done = server.cli("work-pool", "create", "tpurl-kubernetes", "--type", "kubernetes",
                          "--base-job-template", str(TEMPLATE))
        assert done.returncode == 0, done.stdout + done.stderr
        flow = server.api("POST", "/flows/", json={"name": "rl-post-training"}).json()
        deployment = server.api("POST", "/deployments/", json={
            "name": "weekly", "flow_id": flow["id"], "work_pool_name": "tpurl-kubernetes",
            "job_variables": {"image": IMAGE, "env": {"TPURL_GKE__PROJECT": ""}}}).json()
        yield server, deployment


@pytest.mark.parametrize("variables", [
    {"command": "sh -c 'gcloud projects add-iam-policy-binding ...'"},
    {"service_account_name": "default"},
    {"namespace": "kube-system"},
    {"args": ["sh"]},
])
def test_a_run_naming_a_fixed_field_is_refused_at_creation(
        deployed: tuple[PrefectServer, dict], variables: dict) -> None:
    server, deployment = deployed
    before = server.api("POST", "/flow_runs/count", json={}).json()
    with pytest.raises(httpx.HTTPStatusError) as err:
        server.api("POST", f"/deployments/{deployment['id']}/create_flow_run",
                   json={"job_variables": variables})
    assert err.value.response.status_code == 422
    assert "Error creating flow run" in err.value.response.text
    assert server.api("POST", "/flow_runs/count", json={}).json() == before


def test_a_run_gets_the_fixed_command_account_and_namespace(
        deployed: tuple[PrefectServer, dict]) -> None:
    server, deployment = deployed
    run = server.api("POST", f"/deployments/{deployment['id']}/create_flow_run",
                     json={"job_variables": {"cpu_request": "2"}}).json()
    rendered = subprocess.run(
        [sys.executable, "-m", "tests.support.kube_pod", "tpurl-kubernetes", deployment["id"],
         run["id"]], cwd=REPO_ROOT, env=server.env, capture_output=True, text=True, check=True)
    pod = json.loads(rendered.stdout)
    assert pod["args"] == ["prefect", "flow-run", "execute"]  # the worker's own
    assert pod["service_account"] == "tpurl-flow"
    assert pod["namespace"] == pod["config_namespace"] == "default"
    assert pod["image"] == IMAGE
