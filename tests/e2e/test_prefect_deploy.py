"""`prefect deploy`, event-triggered retraining and the run page, against a real server.

The retraining deployment is driven the way users drive it: an event posted to the API
creates a run with the templated parameters, a process worker runs the rehearsal to the end,
and an overlapping announcement is cancelled by the deployment's concurrency limit.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from flows.core.paths import REHEARSAL_DIR, REPO_ROOT
from tests.support.flow_image import debian_base_image, deploy_env
from tests.support.prefect_server import PREFECT, PrefectServer

pytestmark = pytest.mark.rehearsal
OUTPUTS = REPO_ROOT / ".tpurl" / "test-outputs"
TEMPLATE = REPO_ROOT / "deployments" / "work-pool" / "kubernetes-base-job-template.json"
DEPLOYMENTS = {"rehearsal", "retrain-rehearsal", "qwen3-30b-a3b-v6e-32-weekly",
               "qwen3-30b-a3b-v6e-32-retrain", "teardown-qwen3-30b-a3b-v6e-32"}


@pytest.fixture(scope="module")
def deployed(prefect_server: PrefectServer, docker_client, registry_prefix: str) -> dict[str, dict]:
    """Every deployment, after prefect.yaml's build/push of the flow image (a layer-cache hit
    when tests/e2e/test_flow_image.py built it in this session)."""
    for args in (["work-pool", "create", "tpurl-process", "--type", "process"],
                 ["work-pool", "create", "tpurl-kubernetes", "--type", "kubernetes",
                  "--base-job-template", str(TEMPLATE)]):
        done = prefect_server.cli(*args)
        assert done.returncode == 0, done.stdout + done.stderr
    env = deploy_env(prefect_server.env, f"{registry_prefix}/tpurl-flow", debian_base_image())
    done = subprocess.run([PREFECT, "--no-prompt", "deploy", "--all"], cwd=REPO_ROOT, env=env,
                          text=True, capture_output=True, timeout=1800, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = prefect_server.api("POST", "/deployments/filter", json={}).json()
    return {d["name"]: d for d in found}


@pytest.fixture(scope="module")
def new_dataset(rehearsal_image, tmp_path_factory) -> Path:
    """A new dataset version, as a data team would announce it."""
    out = tmp_path_factory.mktemp("announced") / "openmath-v2.parquet"
    python = rehearsal_image.venv_dir() / "bin" / "python"
    subprocess.run([str(python), str(REHEARSAL_DIR / "make_dataset.py"), "--out", str(out),
                    "--rows", "48", "--seed", "7"], check=True, cwd=REPO_ROOT)
    return out


def _emit(server: PrefectServer, event: str, resource: str, payload: dict) -> None:
    server.api("POST", "/events", json=[{
        "id": str(uuid.uuid4()), "occurred": datetime.now(UTC).isoformat(), "event": event,
        "resource": {"prefect.resource.id": resource}, "payload": payload}])


def _runs(server: PrefectServer, deployment_id: str) -> list[dict]:
    return server.api("POST", "/flow_runs/filter", json={
        "flow_runs": {"deployment_id": {"any_": [deployment_id]}},
        "sort": "EXPECTED_START_TIME_ASC"}).json()


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def test_deploy_all_creates_every_deployment_with_schedule_and_triggers(deployed, prefect_server):
    assert set(deployed) >= DEPLOYMENTS
    weekly = deployed["qwen3-30b-a3b-v6e-32-weekly"]
    assert weekly["schedules"][0]["schedule"]["cron"] == "0 6 * * 1"
    assert weekly["concurrency_limit"] == 1 or weekly.get("global_concurrency_limit")
    automations = prefect_server.api("POST", "/automations/filter", json={}).json()
    expects = {e for a in automations for e in a["trigger"].get("expect", [])}
    assert {"tpurl.dataset.updated", "tpurl.base-model.updated"} <= expects


def test_dataset_event_retrains_once_and_an_overlapping_one_is_cancelled(
        deployed, prefect_server, new_dataset):
    deployment = deployed["retrain-rehearsal"]
    _emit(prefect_server, "tpurl.dataset.updated", "tpurl.dataset.openmath",
          {"uri": str(new_dataset)})
    runs = _wait(lambda: _runs(prefect_server, deployment["id"]), 60, "a triggered flow run")
    assert len(runs) == 1
    first = runs[0]
    assert first["parameters"] == {"profile": "rehearsal", "dataset_uri": str(new_dataset)}

    worker = subprocess.Popen([PREFECT, "worker", "start", "--pool", "tpurl-process"],
                              cwd=REPO_ROOT, env=prefect_server.env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        state = lambda run_id: prefect_server.api("GET", f"/flow_runs/{run_id}").json()["state"]  # noqa: E731
        _wait(lambda: state(first["id"])["type"] == "RUNNING", 180, "the first run to start")
        _emit(prefect_server, "tpurl.dataset.updated", "tpurl.dataset.openmath",
              {"uri": str(new_dataset) + "?v=3"})
        second = _wait(lambda: [r for r in _runs(prefect_server, deployment["id"])
                                if r["id"] != first["id"]], 60, "the second triggered run")[0]
        _wait(lambda: state(second["id"])["type"] in ("CANCELLED", "CANCELLING"), 300,
              f"the overlapping run to be cancelled (it is {state(second['id'])})")
        final = _wait(lambda: state(first["id"])["type"] if state(first["id"])["type"] in (
            "COMPLETED", "FAILED", "CRASHED", "CANCELLED") else None, 1800, "the retraining run")
        assert final == "COMPLETED", state(first["id"])
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    _check_run_page(prefect_server, first["id"])


def _check_run_page(server: PrefectServer, run_id: str) -> None:
    wanted = {"tpurl-rehearsal-stages", "tpurl-rehearsal-metrics", "tpurl-rehearsal-hf-export"}

    def artifacts_of_run() -> list[dict]:
        found = server.api("POST", "/artifacts/filter", json={
            "artifacts": {"flow_run_id": {"any_": [run_id]}}}).json()
        return found if wanted <= {a["key"] for a in found if a["key"]} else []

    try:
        artifacts = _wait(artifacts_of_run, 60, "the run's artifacts")
    except AssertionError:
        artifacts = server.api("POST", "/artifacts/filter", json={
            "artifacts": {"flow_run_id": {"any_": [run_id]}}}).json()
    keys = {a["key"] for a in artifacts if a["key"]}
    assert {"tpurl-rehearsal-stages", "tpurl-rehearsal-metrics",
            "tpurl-rehearsal-hf-export"} <= keys, keys
    stages = next(a for a in artifacts if a["key"] == "tpurl-rehearsal-stages")
    table = stages["data"] if isinstance(stages["data"], list) else json.loads(stages["data"])
    assert [row["stage"] for row in table] == ["image", "infra", "convert", "train", "export"]
    assert any(a["type"] == "progress" for a in artifacts)
    def event_names() -> set[str]:  # events reach the API asynchronously
        found = server.api("POST", "/events/filter", json={"limit": 50, "filter": {
            "event": {"prefix": ["tpurl."]},
            "related": {"resources_in_roles": [[f"prefect.flow-run.{run_id}", "flow-run"]]}}}
        ).json()
        names = {e["event"] for e in found["events"]}
        return names if {"tpurl.stage.started", "tpurl.model.exported"} <= names else set()

    assert _wait(event_names, 60, "the run's tpurl events")
    _screenshot(server, run_id, stages["id"])


def _screenshot(server: PrefectServer, run_id: str, stages_id: str) -> None:
    """The run page and the stage table as a user sees them, kept under .tpurl/test-outputs."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (.ci/run installs it); no run-page screenshot")
    OUTPUTS.mkdir(parents=True, exist_ok=True)
    ui = server.url.removesuffix("/api")
    for name, page in (("run-page.png", f"runs/flow-run/{run_id}"),
                       ("stage-table.png", f"artifacts/artifact/{stages_id}")):
        target = OUTPUTS / name
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                        "--no-first-run", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={OUTPUTS / 'chromium-profile'}", "--hide-scrollbars",
                        "--window-size=1600,1400", "--virtual-time-budget=20000",
                        f"--screenshot={target}", f"{ui}/{page}"],
                       check=True, timeout=120, capture_output=True)
        assert target.stat().st_size > 10_000, name
