"""docs/how-to/deploy-prefect-server.md, as written, from `prefect deploy --all` to a run on each pool.

A fresh `prefect server start` (a new user's API); the page's blocks run through bash with
the venv the page activates. The deploy and its server are the session's (tests/support/
page_deployment.py): tests/e2e/test_prefect_deploy.py's retraining runs on them too, as a
user's one deploy serves both pages. The deploy runs prefect.yaml's real build/push steps: the flow
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
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import docker
import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage as gcs

from flows.common.paths import REPO_ROOT
from flows.deploy_steps import flow_image_tag
from flows.run.result import RESULT_FOLDER
from tests.fakes.adc_key import key_identity, write_adc_key
from tests.fakes.oauth_token import token_endpoint
from tests.support.page_deployment import PAGE, Walkthrough, page_bash
from tests.support.prefect_server import PrefectServer, wait_until
from tests.support.process_group import stop_group
from tests.support.readme import blocks

KUBERNETES = ("qwen3-30b-a3b-v6e-32-weekly", "qwen3-30b-a3b-v6e-32-retrain")
PROCESS = ("rehearsal", "retrain-rehearsal", "teardown-qwen3-30b-a3b-v6e-32")
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


def _background(script: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=REPO_ROOT,
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


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


def test_the_page_marks_every_command_of_the_walkthrough(readme: dict[str, str]):
    assert set(readme) == {"env", "deploy", "process-worker", "rehearsal-run", "teardown-run",
                           "result-storage", "kubernetes-worker", "kubernetes-run"}
    assert "TPURL_FLOW_IMAGE=" in readme["env"]


def _pinned_image(walkthrough: Walkthrough) -> str:
    """The flow container's image in the Kubernetes pool's template, as `deploy` wrote it."""
    pool = walkthrough.server.api("GET", "/work_pools/tpurl-kubernetes-tutorial").json()
    assert "image" not in pool["base_job_template"]["variables"]["properties"]
    return pool["base_job_template"]["job_configuration"]["job_manifest"]["spec"]["template"][
        "spec"]["containers"][0]["image"]


def test_deploy_builds_pushes_and_names_the_image_by_digest(walkthrough: Walkthrough,
                                                           docker_client: docker.DockerClient):
    expected = flow_image_tag(walkthrough.repository, base_image=walkthrough.base_image,
                              cloud_tools="0", context=str(REPO_ROOT))
    pushed = docker_client.images.get_registry_data(expected["image"])
    by_digest = f"{walkthrough.repository}@{pushed.id}"
    # pinned in the Kubernetes pool's template (flows/deploy_steps.py pin_pool_image), never a
    # job variable a run could set
    assert _pinned_image(walkthrough) == by_digest
    for name in (*KUBERNETES, *PROCESS):
        assert "image" not in (walkthrough.deployments[name]["job_variables"] or {}), name
    image = docker_client.images.get(by_digest)
    assert image.attrs["Config"]["User"] == "tpurl"
    assert image.attrs["Config"]["WorkingDir"] == "/opt/tpurl"
    assert walkthrough.deploy_log.count("Step 1/") == 1, "one build per deploy --all"


def test_the_weekly_deployment_runs_in_a_container_of_its_image(walkthrough: Walkthrough,
                                                                readme: dict[str, str],
                                                                docker_client: docker.DockerClient,
                                                                gcs_url: str):
    """The weekly run in a container of the image, its Prefect result written to the bucket
    the page's result-storage block names: on fake-gcs-server (STORAGE_EMULATOR_HOST, which
    google-cloud-storage reads), the credentials refreshed at a local stand-in of Google's
    token endpoint (the key file's token_uri). Without them the failed run's result write
    retried against unreachable Google hosts for 120 s before the run could end."""
    server, deployment = walkthrough.server, walkthrough.deployments[KUBERNETES[0]]
    bucket = re.search(r"gke\.bucket=(\S+)", readme["result-storage"]).group(1)  # type: ignore[union-attr]
    storage = gcs.Client(project="my-proj", credentials=AnonymousCredentials(),
                         client_options={"api_endpoint": gcs_url})
    if storage.lookup_bucket(bucket) is None:
        storage.create_bucket(bucket)
    with token_endpoint() as google_tokens:
        # The user's Application Default Credentials (prefect-gcp's GcpCredentials reads them).
        adc = write_adc_key(walkthrough.home / "adc.json", token_uri=google_tokens.url)
        google_tokens.know(*key_identity(adc))
        done = page_bash(readme["result-storage"],
                         {**walkthrough.env, "GOOGLE_APPLICATION_CREDENTIALS": str(adc)})
        assert done.returncode == 0, done.stdout + done.stderr
        run = server.api("POST", f"/deployments/{deployment['id']}/create_flow_run",
                         json={}).json()
        rendered = subprocess.run(
            [sys.executable, "-m", "tests.support.kube_pod", "tpurl-kubernetes-tutorial",
             deployment["id"], run["id"]], cwd=REPO_ROOT, env=server.env, capture_output=True,
            text=True, check=True)
        pod = json.loads(rendered.stdout)
        assert pod["image"] == _pinned_image(walkthrough)
        assert pod["args"] == ["prefect", "flow-run", "execute"]
        assert pod["env"]["PREFECT__FLOW_RUN_ID"] == run["id"]
        assert pod["env"]["TPURL_GKE__PROJECT"] == ""  # the pool's env, from prefect.yaml
        docker_client.images.pull(pod["image"])  # from the registry, by digest, as a kubelet does
        # The pod reaches the API at an address of the cluster; here that is the host's
        # 127.0.0.1. Its Google credentials come from Workload Identity (the team's tpurl-flow-tutorial
        # service account) on GKE; here the same fake key file stands in (prefect-gcp loads the results
        # block's GcpCredentials before the flow starts, and crashes the run without any).
        env = {**pod["env"], "PREFECT_API_URL": server.url,
               "GOOGLE_APPLICATION_CREDENTIALS": "/var/run/tpurl/adc.json",
               "STORAGE_EMULATOR_HOST": gcs_url}
        container = docker_client.containers.run(
            pod["image"], command=pod["args"], environment=env, network_mode="host",
            detach=True, volumes={str(adc): {"bind": "/var/run/tpurl/adc.json", "mode": "ro"}})
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
    # ...and Prefect kept the failure's result where the block points, with a token the key
    # earned (no write went out unauthenticated)
    written = [b.name for b in storage.list_blobs(bucket, prefix=f"{RESULT_FOLDER}/")]
    assert written and google_tokens.issued, (written, output[-3000:])
    assert "Failed to write result" not in output, output[-3000:]


def test_the_pages_process_worker_runs_teardown_and_rehearsal(walkthrough: Walkthrough,
                                                              readme: dict[str, str],
                                                              rehearsal_image: Any):
    server = walkthrough.server
    worker = _background(readme["process-worker"], walkthrough.env,
                         walkthrough.home / "process-worker.log")
    try:
        teardown = walkthrough.deployments["teardown-qwen3-30b-a3b-v6e-32"]
        done = page_bash(readme["teardown-run"], walkthrough.env, timeout=600)
        [run] = _runs_of(server, teardown["id"])
        state = _final(server, run["id"], 120)
        assert state["type"] == "FAILED", done.stdout[-3000:]
        assert "gke.project" in _logs(server, run["id"]) + state["message"]

        rehearsal = walkthrough.deployments["rehearsal"]
        done = page_bash(readme["rehearsal-run"], walkthrough.env)
        assert done.returncode == 0, done.stdout + done.stderr
        [run] = _runs_of(server, rehearsal["id"])
        wait_until(lambda: _state(server, run["id"])["type"] == "RUNNING", 300,
              "the rehearsal run to start on the process worker")
        server.api("POST", f"/flow_runs/{run['id']}/set_state",
                   json={"state": {"type": "CANCELLING"}, "force": True})
        assert _final(server, run["id"], 120)["type"] == "CANCELLED"
    finally:
        stop_group(worker)


def test_the_pages_kubernetes_worker_starts_and_joins_its_pool(walkthrough: Walkthrough,
                                                               readme: dict[str, str]):
    log = walkthrough.home / "kubernetes-worker.log"
    worker = _background(readme["kubernetes-worker"], walkthrough.env, log)
    try:
        workers = wait_until(lambda: walkthrough.server.api(
            "POST", "/work_pools/tpurl-kubernetes-tutorial/workers/filter", json={}).json(), 120,
            f"a worker of tpurl-kubernetes-tutorial ({log})")
        assert workers and worker.poll() is None, log.read_text()[-3000:]
    finally:
        stop_group(worker)


def test_the_flow_image_benchmark_builds_a_change(walkthrough: Walkthrough):
    """benchmarks/flow_image.py's quick run on this dockerd, after the walkthrough built the
    flow image: the base found, the build cached, one flows/ file changed and built again
    into another image (the benchmark exits 1 when the change gave the cached image)."""
    from tests.support.benchmarks import assert_figures, run_quick

    out = run_quick("flow_image", "--quick", timeout=1200)
    assert_figures(out, "base image (Debian packages):", "flow image size:",
                   "flow image build: cold nan s, cached")


def test_deploy_without_the_image_variable_stops_naming_it(walkthrough: Walkthrough):
    env = {k: v for k, v in walkthrough.env.items() if k != "TPURL_FLOW_IMAGE"}
    done = page_bash("source .venv/bin/activate && prefect --no-prompt deploy --all", env)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "TPURL_FLOW_IMAGE is not set" in out and "fix: export TPURL_FLOW_IMAGE=" in out, out[-3000:]
    assert "Step 1/" not in out, "nothing was built"
