"""prefect.yaml against one real `prefect server start`: the process-pool deployments deploy
with nothing but the venv (`deploy --all` creates them all before it needs Docker), a
Kubernetes one without TPURL_FLOW_IMAGE is refused in one message, each dispatcher's triggers
fire only on announcements for its own target (docs/how-to/announce.md's example among them) and carry
their descriptions, notify-on-failure.yaml applies after its one substitution, and the
git_clone pull runs a process worker's flow run away from any checkout.

No Docker here: DOCKER_HOST points at a socket that does not exist, so any build or push
step would fail. The dispatchers are not run (no worker): an automation's run-deployment
action creates a flow run of the dispatcher, which is what "an announcement starts a
retrain" means at the server (prefect/server/events/actions.py, RunDeployment).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from flows.common.paths import REPO_ROOT
from flows.flow_runs.heartbeat import HEARTBEAT_S, SETTING
from tests.support.prefect_server import (
    PREFECT,
    PrefectServer,
    prefect_server_in,
    wait_until,
)
from tests.support.readme import blocks, json_block

REV = "0123456789abcdef0123456789abcdef01234567"
PROCESS = ["rehearsal", "retrain-rehearsal", "announce-retrain-rehearsal",
           "teardown-qwen3-30b-a3b-v6e-32", "rollback-qwen3-30b-a3b-v6e-32",
           "rollback-rehearsal", "watch-rehearsal"]
DISPATCHERS = {"rehearsal": "announce-retrain-rehearsal",
               "qwen3-30b-a3b-v6e-32": "announce-qwen3-30b-a3b-v6e-32-retrain"}


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    home = tmp_path_factory.mktemp("prefect-home")
    with prefect_server_in(home) as server:
        server.env = {k: v for k, v in server.env.items() if not k.startswith("TPURL_FLOW_")}
        server.env["DOCKER_HOST"] = f"unix://{home}/no-docker.sock"
        server.create_pool("tpurl-process", "process",
                           REPO_ROOT / "deployments/work-pool/process-base-job-template.json")
        server.create_pool("tpurl-kubernetes-tutorial", "kubernetes",
                           REPO_ROOT / "deployments/work-pool/teams/tutorial/"
                           "kubernetes-base-job-template.json")
        yield server


def _deployments(server: PrefectServer) -> dict[str, dict]:
    return {d["name"]: d for d in server.api("POST", "/deployments/filter", json={}).json()}


def test_deploy_all_without_docker_creates_every_docker_free_deployment(prefect_server):
    """The image variable set but no daemon: `deploy --all` stops at the first image build
    (prefect/cli/deploy/_core.py stops at a deployment's failure), by then having created
    every process-pool one, teardown included (this server is fresh: none existed)."""
    env = {**prefect_server.env, "TPURL_FLOW_IMAGE": "127.0.0.1:9/tpurl/tpurl-flow"}
    done = subprocess.run([PREFECT, "--no-prompt", "deploy", "--all"], cwd=REPO_ROOT, env=env,
                          text=True, capture_output=True, timeout=300, check=False)
    out = done.stdout + done.stderr
    assert done.returncode != 0 and "Docker is not running" in out, out[-3000:]
    assert set(_deployments(prefect_server)) == set(PROCESS), out[-3000:]


def test_process_pool_deployments_deploy_without_docker_or_the_image_variable(prefect_server):
    names = [arg for name in PROCESS for arg in ("--name", name)]
    done = prefect_server.cli("--no-prompt", "deploy", *names)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    # their one build step is the notifications' (flows/notifications/apply.py), no Docker
    assert "build_docker_image" not in out and "push steps" not in out, out[-3000:]
    assert "notify: off for profile rehearsal" in out, out[-3000:]
    deployed = _deployments(prefect_server)
    assert set(PROCESS) <= set(deployed)
    # their flow runs beat once an hour (flows/flow_runs/heartbeat.py), as the worker's env
    assert {name: deployed[name]["job_variables"]["env"][SETTING] for name in PROCESS} == \
        dict.fromkeys(PROCESS, str(HEARTBEAT_S))


def test_a_kubernetes_deployment_without_the_image_variable_is_one_message(prefect_server):
    done = prefect_server.cli("--no-prompt", "deploy", "--name", "qwen3-30b-a3b-v6e-32-weekly")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert out.count("TPURL_FLOW_IMAGE is not set") == 1, out[-3000:]
    assert "fix: export TPURL_FLOW_IMAGE=" in out
    assert "Traceback" not in out and "StepExecutionError" not in out, out[-3000:]
    assert "qwen3-30b-a3b-v6e-32-weekly" not in _deployments(prefect_server)


def _dispatchers_yaml(tmp_path: Path) -> Path:
    """prefect.yaml's two dispatchers, their matches untouched, on the process pool with their
    triggers enabled (the tutorial's step once the gke fields are set) and without the image
    build, which needs Docker and has no part in which events a trigger matches."""
    config = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    chosen = [d for d in config["deployments"] if d["name"] in DISPATCHERS.values()]
    for deployment in chosen:
        for key in ("build", "push", "pull"):
            deployment.pop(key, None)
        deployment["work_pool"] = {"name": "tpurl-process"}
        for trigger in deployment["triggers"]:
            trigger["enabled"] = True
    path = tmp_path / "prefect.yaml"
    path.write_text(yaml.safe_dump({**config, "deployments": chosen}))
    return path


def _announce(server: PrefectServer, event: str, resource: dict[str, str], payload: dict) -> None:
    server.api("POST", "/events", json=[{
        "id": str(uuid.uuid4()), "occurred": datetime.now(UTC).isoformat(), "event": event,
        "resource": resource, "payload": payload}])


def _runs(server: PrefectServer, deployment_id: str) -> list[dict]:
    return server.api("POST", "/flow_runs/filter", json={
        "flow_runs": {"deployment_id": {"any_": [deployment_id]}}}).json()


def test_an_announcement_starts_its_targets_dispatcher_and_no_other(prefect_server, tmp_path):
    done = prefect_server.cli("--no-prompt", "deploy", "--prefect-file",
                              str(_dispatchers_yaml(tmp_path)), "--all")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    ids = {profile: _deployments(prefect_server)[name]["id"]
           for profile, name in DISPATCHERS.items()}
    automations = prefect_server.api("POST", "/automations/filter", json={}).json()
    names = {a["name"] for a in automations}
    assert {"tpurl: dataset announced → retrain-rehearsal",
            "tpurl: base model announced → retrain-rehearsal",
            "tpurl: dataset announced → qwen3-30b-a3b-v6e-32-retrain",
            "tpurl: base model announced → qwen3-30b-a3b-v6e-32-retrain"} <= names, names
    described = {t["name"]: t["description"] for d in yaml.safe_load(
        (REPO_ROOT / "prefect.yaml").read_text())["deployments"] for t in d.get("triggers", [])}
    assert {a["name"]: a["description"] for a in automations
            if a["name"] in described} == described  # what the Automations page shows

    # Unaddressed (no tpurl.profile label): no target's; then one for each target.
    _announce(prefect_server, "tpurl.dataset.updated", {"prefect.resource.id": "tpurl.dataset.x"},
              {"uri": "gs://b/data/unaddressed.parquet"})
    # The docs' example (how-to/announce.md), posted as written (a 422 would raise here).
    prefect_server.api("POST", "/events", content=json_block("announce-dataset", "how-to/announce.md"),
                       headers={"Content-Type": "application/json"})
    _announce(prefect_server, "tpurl.base-model.updated",
              {"prefect.resource.id": "tpurl.base-model.qwen3",
               "tpurl.profile": "qwen3-30b-a3b-v6e-32"}, {"revision": REV})
    local = f"file://{REPO_ROOT}/.tpurl/announced/openmath-v2.parquet"
    _announce(prefect_server, "tpurl.dataset.updated", {
        "prefect.resource.id": "tpurl.dataset.openmath", "tpurl.profile": "rehearsal"},
        {"uri": local})
    wait_until(lambda: len(_runs(prefect_server, ids["qwen3-30b-a3b-v6e-32"])) == 2 and
               _runs(prefect_server, ids["rehearsal"]), 120, "the dispatcher runs of each target")
    served = {profile: sorted((r["parameters"]["kind"], r["parameters"]["value"])
                              for r in _runs(prefect_server, i)) for profile, i in ids.items()}
    assert served == {"rehearsal": [("dataset", local)],
                      "qwen3-30b-a3b-v6e-32": [("base-model", REV),
                                               ("dataset", "gs://BUCKET/data/openmath-v7.parquet")]}
    for run in _runs(prefect_server, ids["rehearsal"]):
        assert run["parameters"]["deployment"] == "rl-post-training/retrain-rehearsal"


def test_notify_on_failure_applies_after_its_one_substitution(prefect_server, tmp_path):
    shipped = (REPO_ROOT / "deployments/automations/notify-on-failure.yaml").read_text()
    assert shipped.count("REPLACE-WITH-BLOCK-ID") == 3  # the sed line, its comment, the field
    done = subprocess.run([sys.executable, "-c", (
        "from prefect.blocks.notifications import SlackWebhook\n"
        "print(SlackWebhook(url='http://127.0.0.1:9/hook').save('tpurl-alerts'))")],
        env=prefect_server.env, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    block_id = done.stdout.strip().splitlines()[-1]
    path = tmp_path / "notify.yaml"
    path.write_text(shipped.replace("REPLACE-WITH-BLOCK-ID", block_id))
    done = prefect_server.cli("automation", "create", "--from-file", str(path))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    [automation] = [a for a in prefect_server.api("POST", "/automations/filter", json={}).json()
                    if a["name"] == "tpurl-run-failed"]
    assert automation["actions"][0]["block_document_id"] == block_id
    # the server keeps `expect` as a set: its order is not the file's
    assert set(automation["trigger"]["expect"]) == {"prefect.flow-run.Failed",
                                                    "prefect.flow-run.Crashed"}


def test_git_clone_pull_runs_a_worker_away_from_the_checkout(prefect_server, tmp_path):
    """prefect.yaml's git_clone_pull with its one setting (the repository) made: a worker
    started outside any checkout runs the dispatcher from the clone. The deployment and the
    worker share a work queue of their own in the process pool, so the worker runs this run
    alone: the runs the announcements of another test left scheduled in the pool's default
    queue (no worker ran them there) would each have been one more flow-run process."""
    repo = tmp_path / "tpu-rl-pipeline.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(REPO_ROOT), str(repo)], check=True)
    config = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    [clone] = config["definitions"]["git_clone_pull"]
    step = clone["prefect.deployments.steps.git_clone"]
    step["repository"] = f"file://{repo}"  # the one setting; this clone's default branch
    step.pop("branch")
    [dispatcher] = [d for d in config["deployments"] if d["name"] == "announce-retrain-rehearsal"]
    dispatcher.update(name="announce-from-git", triggers=[],
                      parameters={"deployment": "rl-post-training/no-such-deployment"},
                      work_pool={**dispatcher["work_pool"], "work_queue_name": "from-git"})
    path = tmp_path / "prefect.yaml"
    path.write_text(yaml.safe_dump({**config, "pull": [clone], "deployments": [dispatcher]}))
    done = prefect_server.cli("--no-prompt", "deploy", "--prefect-file", str(path), "--all")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    deployment = _deployments(prefect_server)["announce-from-git"]
    assert [next(iter(s)) for s in deployment["pull_steps"]] == ["prefect.deployments.steps.git_clone"]

    away = tmp_path / "elsewhere"
    away.mkdir()
    worker = subprocess.Popen([str(Path(sys.executable).with_name("prefect")), "worker", "start",
                               "--pool", "tpurl-process", "--work-queue", "from-git"],
                              cwd=away, env=prefect_server.env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        run = prefect_server.api("POST", f"/deployments/{deployment['id']}/create_flow_run", json={
            "parameters": {"deployment": "rl-post-training/no-such-deployment", "kind": "dataset",
                           "value": "gs://b/x.parquet", "event_id": str(uuid.uuid4()),
                           "occurred": datetime.now(UTC).isoformat()}}).json()
        final = wait_until(lambda: (s := prefect_server.api(
            "GET", f"/flow_runs/{run['id']}").json()["state"])["type"] in (
            "COMPLETED", "FAILED", "CRASHED", "CANCELLED") and s, 300, "the run from the clone")
    finally:
        worker.terminate()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:  # seen at a load of 9 on 2 cores: never left behind
            worker.kill()
            worker.wait(30)
    # The dispatcher's own refusal: its entrypoint exists only in the clone (the worker and
    # its flow-run directory are outside any checkout), so the code ran from there.
    assert final["type"] == "FAILED" and "does not exist" in (final["message"] or ""), final


def test_the_docs_deploy_a_target_with_its_dispatcher_and_triggers_in_one_command(tmp_path):
    """docs/how-to/announce.md's deploy-announcements block as written, on a fresh API (its
    `work-pool create` is a new user's first); then `tpurl announce` as the page writes it, and the
    same event posted twice: Prefect's API answers 204 both times and its triggers skip the
    id they have seen (prefect/server/events/triggers.py, consumer: event_has_been_seen), so
    one dispatcher run; a retry under a new id reaches the dispatcher (which calls it a
    duplicate: tests/announcements/test_dispatch_endings.py)."""
    (tmp_path / "home").mkdir()
    with prefect_server_in(tmp_path / "home") as server:
        block = blocks("how-to/announce.md")["deploy-announcements"]
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=REPO_ROOT,
                              env=server.env, text=True, capture_output=True, timeout=600,
                              check=False)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        deployments = _deployments(server)
        assert set(deployments) == {"retrain-rehearsal", "announce-retrain-rehearsal"}
        automations = server.api("POST", "/automations/filter", json={}).json()
        dispatcher = deployments["announce-retrain-rehearsal"]["id"]
        assert sorted(a["name"] for a in automations) == [
            "tpurl: base model announced → retrain-rehearsal",
            "tpurl: dataset announced → retrain-rehearsal"]
        assert {action["deployment_id"] for a in automations for action in a["actions"]} == {
            dispatcher}

        announced = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", "source .venv/bin/activate && tpurl announce "
             "rehearsal --dataset .tpurl/announced/openmath-v2.parquet"], cwd=REPO_ROOT,
            env=server.env, text=True, capture_output=True, timeout=300, check=False)
        assert announced.returncode == 0, announced.stdout + announced.stderr
        [run] = wait_until(lambda: _runs(server, dispatcher), 120, "the dispatcher's run")
        assert run["parameters"]["value"] == \
            f"file://{REPO_ROOT}/.tpurl/announced/openmath-v2.parquet"
        assert run["parameters"]["deployment"] == "rl-post-training/retrain-rehearsal"

        body = [{"id": str(uuid.uuid4()), "occurred": datetime.now(UTC).isoformat(),
                 "event": "tpurl.dataset.updated",
                 "resource": {"prefect.resource.id": "tpurl.dataset.openmath",
                              "tpurl.profile": "rehearsal"},
                 "payload": {"uri": f"file://{REPO_ROOT}/.tpurl/announced/v3.parquet"}}]
        for _ in range(2):
            assert server.api("POST", "/events", json=body).status_code == 204
        wait_until(lambda: len(_runs(server, dispatcher)) == 2, 120, "the event's run")
        retry = [{**body[0], "id": str(uuid.uuid4())}]
        assert server.api("POST", "/events", json=retry).status_code == 204
        wait_until(lambda: len(_runs(server, dispatcher)) == 3, 120, "the retry's run")
        def stored() -> list[str]:  # the event persister writes in batches
            return [e["id"] for e in server.api("POST", "/events/filter", json={
                "filter": {"event": {"name": ["tpurl.dataset.updated"]}}}).json()["events"]
                    if e["id"] == body[0]["id"]]

        assert wait_until(stored, 60, "the event stored") == [body[0]["id"]]  # once
        assert len(_runs(server, dispatcher)) == 3  # the repeated id started nothing
