"""docs/how-to/deploy-prefect-server.md, as written, from `prefect deploy --all` to a run on each pool.

A fresh `prefect server start` (a new user's API); the page's blocks run through bash with
the venv the page activates. The deploy runs prefect.yaml's real build/push steps: the flow
image is built FROM a Debian-packages base (scripts/debian-base-image.sh: no image registry is
reachable here) with CLOUD_TOOLS=0, pushed to the local registry, and the Kubernetes
deployments get it by digest. Then:

- the process pool: the page's worker runs the teardown deployment to its final state
  (failed at validation, as shipped: the GKE fields are empty) and starts a rehearsal run
  (cancelled once running: the full rehearsal through a process worker is
  tests/e2e/test_prefect_deploy.py's);
- the Kubernetes pool: the page's worker starts and registers with the pool; a run of the
  weekly deployment executes in a container of the pushed image by digest, from the pod spec
  prefect-kubernetes renders (tests/support/kube_pod.py says why that is a fair stand-in);
- without TPURL_FLOW_IMAGE the deploy stops before building, naming the variable and the fix.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from flows.common.paths import REPO_ROOT
from flows.deploy_steps import flow_image_tag
from tests.fakes.adc_key import write_adc_key
from tests.support.flow_image import debian_base_image, deploy_env
from tests.support.prefect_server import (
    QUICK_POLLING,
    PrefectServer,
    prefect_server_in,
    wait_until,
)
from tests.support.readme import blocks

PAGE = "how-to/deploy-prefect-server.md"
KUBERNETES = ("qwen3-30b-a3b-v6e-32-weekly", "qwen3-30b-a3b-v6e-32-retrain")
PROCESS = ("rehearsal", "retrain-rehearsal", "teardown-qwen3-30b-a3b-v6e-32")
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


@dataclass
class Walkthrough:
    server: PrefectServer
    env: dict[str, str]
    repository: str
    base_image: str
    deploy_log: str
    deployments: dict[str, dict[str, Any]]
    home: Path


def _bash(script: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=REPO_ROOT, env=env,
                          text=True, capture_output=True, timeout=timeout, check=False)


def _background(script: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=REPO_ROOT,
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)




def _state(server: PrefectServer, run_id: str) -> dict[str, Any]:
    return server.api("GET", f"/flow_runs/{run_id}").json()["state"]


def _runs_of(server: PrefectServer, deployment_id: str) -> list[dict[str, Any]]:
    return server.api("POST", "/flow_runs/filter", json={
        "flow_runs": {"deployment_id": {"any_": [deployment_id]}}}).json()


def _final(server: PrefectServer, run_id: str, timeout: float) -> dict[str, Any]:
    return wait_until(lambda: (s := _state(server, run_id))["type"] in FINAL and s, timeout,
                 f"flow run {run_id} to end")


def _logs(server: PrefectServer, run_id: str) -> str:
    found = server.api("POST", "/logs/filter", json={
        "logs": {"flow_run_id": {"any_": [run_id]}}, "limit": 200}).json()
    return "\n".join(entry["message"] for entry in found)


@pytest.fixture(scope="module")
def readme() -> dict[str, str]:
    return blocks(PAGE)


@pytest.fixture(scope="module")
def walkthrough(docker_client: docker.DockerClient, registry_prefix: str, readme: dict[str, str],
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walkthrough]:
    base = debian_base_image()
    home = tmp_path_factory.mktemp("readme-walkthrough")
    with prefect_server_in(home, settings=QUICK_POLLING) as server:  # its workers poll often
        repository = f"{registry_prefix}/tpurl-flow"
        env = deploy_env(server.env, repository, base)
        done = _bash(readme["deploy"], env, timeout=1800)
        log = done.stdout + done.stderr
        assert done.returncode == 0, log[-4000:]
        found = server.api("POST", "/deployments/filter", json={}).json()
        yield Walkthrough(server, env, repository, base, log, {d["name"]: d for d in found}, home)


def test_the_page_marks_every_command_of_the_walkthrough(readme: dict[str, str]):
    assert set(readme) == {"env", "deploy", "process-worker", "rehearsal-run", "teardown-run",
                           "result-storage", "kubernetes-worker", "kubernetes-run"}
    assert "TPURL_FLOW_IMAGE=" in readme["env"]


def test_deploy_builds_pushes_and_names_the_image_by_digest(walkthrough: Walkthrough,
                                                           docker_client: docker.DockerClient):
    expected = flow_image_tag(walkthrough.repository, base_image=walkthrough.base_image,
                              cloud_tools="0", context=str(REPO_ROOT))
    pushed = docker_client.images.get_registry_data(expected["image"])
    by_digest = f"{walkthrough.repository}@{pushed.id}"
    for name in KUBERNETES:
        assert walkthrough.deployments[name]["job_variables"]["image"] == by_digest, name
    for name in PROCESS:
        assert "image" not in (walkthrough.deployments[name]["job_variables"] or {}), name
    image = docker_client.images.get(by_digest)
    assert image.attrs["Config"]["User"] == "tpurl"
    assert image.attrs["Config"]["WorkingDir"] == "/opt/tpurl"
    assert walkthrough.deploy_log.count("Step 1/") == 1, "one build per deploy --all"


def test_the_weekly_deployment_runs_in_a_container_of_its_image(walkthrough: Walkthrough,
                                                                readme: dict[str, str],
                                                                docker_client: docker.DockerClient):
    server, deployment = walkthrough.server, walkthrough.deployments[KUBERNETES[0]]
    # The user's Application Default Credentials (prefect-gcp's GcpCredentials reads them).
    adc = write_adc_key(walkthrough.home / "adc.json")
    done = _bash(readme["result-storage"], {**walkthrough.env, "GOOGLE_APPLICATION_CREDENTIALS": str(adc)})
    assert done.returncode == 0, done.stdout + done.stderr
    run = server.api("POST", f"/deployments/{deployment['id']}/create_flow_run", json={}).json()
    rendered = subprocess.run(
        [sys.executable, "-m", "tests.support.kube_pod", "tpurl-kubernetes", deployment["id"],
         run["id"]], cwd=REPO_ROOT, env=server.env, capture_output=True, text=True, check=True)
    pod = json.loads(rendered.stdout)
    assert pod["image"] == deployment["job_variables"]["image"]
    assert pod["args"] == ["prefect", "flow-run", "execute"]
    assert pod["env"]["PREFECT__FLOW_RUN_ID"] == run["id"]
    assert pod["env"]["TPURL_GKE__PROJECT"] == ""  # the pool's env, from prefect.yaml
    docker_client.images.pull(pod["image"])  # from the registry, by digest, as a kubelet does
    # The pod reaches the API at an address of the cluster; here that is the host's 127.0.0.1.
    # Its Google credentials come from Workload Identity (the tpurl-flow service account) on
    # GKE; here the same fake key file stands in (prefect-gcp loads the results block's
    # GcpCredentials before the flow starts, and crashes the run without any).
    env = {**pod["env"], "PREFECT_API_URL": server.url,
           "GOOGLE_APPLICATION_CREDENTIALS": "/var/run/tpurl/adc.json"}
    container = docker_client.containers.run(
        pod["image"], command=pod["args"], environment=env, network_mode="host", detach=True,
        volumes={str(adc): {"bind": "/var/run/tpurl/adc.json", "mode": "ro"}})
    try:
        container.wait(timeout=600)
        output = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    state = _final(server, run["id"], 60)
    logs = _logs(server, run["id"])
    # The image ran the real entrypoint from /opt/tpurl: the flow validated the profile with
    # the pod's env and refused it, naming the empty fields, before touching anything.
    assert state["type"] == "FAILED", output[-3000:]
    assert "gke.project" in logs + state["message"], (state, logs[-3000:], output[-3000:])


def test_the_pages_process_worker_runs_teardown_and_rehearsal(walkthrough: Walkthrough,
                                                              readme: dict[str, str],
                                                              rehearsal_image: Any):
    server = walkthrough.server
    worker = _background(readme["process-worker"], walkthrough.env,
                         walkthrough.home / "process-worker.log")
    try:
        teardown = walkthrough.deployments["teardown-qwen3-30b-a3b-v6e-32"]
        done = _bash(readme["teardown-run"], walkthrough.env, timeout=600)
        [run] = _runs_of(server, teardown["id"])
        state = _final(server, run["id"], 120)
        assert state["type"] == "FAILED", done.stdout[-3000:]
        assert "gke.project" in _logs(server, run["id"]) + state["message"]

        rehearsal = walkthrough.deployments["rehearsal"]
        done = _bash(readme["rehearsal-run"], walkthrough.env)
        assert done.returncode == 0, done.stdout + done.stderr
        [run] = _runs_of(server, rehearsal["id"])
        wait_until(lambda: _state(server, run["id"])["type"] == "RUNNING", 300,
              "the rehearsal run to start on the process worker")
        server.api("POST", f"/flow_runs/{run['id']}/set_state",
                   json={"state": {"type": "CANCELLING"}, "force": True})
        assert _final(server, run["id"], 120)["type"] == "CANCELLED"
    finally:
        _stop(worker)


def test_the_pages_kubernetes_worker_starts_and_joins_its_pool(walkthrough: Walkthrough,
                                                               readme: dict[str, str]):
    log = walkthrough.home / "kubernetes-worker.log"
    worker = _background(readme["kubernetes-worker"], walkthrough.env, log)
    try:
        workers = wait_until(lambda: walkthrough.server.api(
            "POST", "/work_pools/tpurl-kubernetes/workers/filter", json={}).json(), 120,
            f"a worker of tpurl-kubernetes ({log})")
        assert workers and worker.poll() is None, log.read_text()[-3000:]
    finally:
        _stop(worker)


def test_deploy_without_the_image_variable_stops_naming_it(walkthrough: Walkthrough):
    env = {k: v for k, v in walkthrough.env.items() if k != "TPURL_FLOW_IMAGE"}
    done = _bash("source .venv/bin/activate && prefect --no-prompt deploy --all", env)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "TPURL_FLOW_IMAGE is not set" in out and "fix: export TPURL_FLOW_IMAGE=" in out, out[-3000:]
    assert "Step 1/" not in out, "nothing was built"
