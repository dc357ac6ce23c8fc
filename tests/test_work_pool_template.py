"""The work pools' base job templates expose to a run only what a deployment may set: the
command, the working directory, the cluster config, the service account, the namespace and
the image are fixed, not variables, the env names are listed, and the schema refuses any other
variable; on the Kubernetes pool that is every variable but ``env``, so a run cannot put the
flow Job in another team's Kueue queue, at a priority, size or node pool, nor change its TTL
or the worker's watch timeouts. The image is the flow image by digest, which `prefect deploy` writes into the
Kubernetes pool's template (flows/deploy_steps.py ``pin_pool_image``, run here as prefect's
``run_steps`` runs prefect.yaml's step): a run's ``image`` would start a pod of any image as
the flow's service account.
A run's ``cluster_config`` on Prefect's own Kubernetes template runs a kubeconfig's exec
plugin in the worker's process; on the shipped one it is never rendered. Against a real
Prefect API (the session's, ``prefect_api``: the app `prefect server start` serves; the
module makes its pools afresh and deletes them when it ends): Prefect validates a flow run's
job variables against the pool's variables schema when the run is created
(prefect/server/api/validation.py ``validate_job_variables_for_deployment_flow_run``,
prefect 3.9.1), and the pod is rendered by prefect-kubernetes' own job configuration
(tests/support/kube_pod.py)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import httpx
import pytest
import yaml

from flows.announcements.seal import SECRET_NAME_ENV
from flows.backends.gke.jobs.common import QUEUE_LABEL
from flows.backends.gke.team_queues import INTERACTIVE, PRIORITY_LABEL, team_queue_name
from flows.common.paths import REPO_ROOT
from tests.support.prefect_server import PrefectServer, server_at_or_in

pytestmark = [pytest.mark.services, pytest.mark.realtime]

# prefect.yaml's Kubernetes deployments are the tutorial team's, on its pool, whose template
# is the shared one with the team's account and HF token Secret (flows/backends/gke/flow_pools.py)
POOL = "tpurl-kubernetes-tutorial"
TEMPLATE = REPO_ROOT / "deployments/work-pool/teams/tutorial/kubernetes-base-job-template.json"
SHARED_TEMPLATE = REPO_ROOT / "deployments/work-pool/kubernetes-base-job-template.json"
PROCESS_TEMPLATE = REPO_ROOT / "deployments/work-pool/process-base-job-template.json"
REPOSITORY = "127.0.0.1:5000/tpurl/tpurl-flow"
IMAGE = REPOSITORY + "@sha256:" + "a" * 64
ATTACKER_IMAGE = "docker.io/attacker/image:latest"


FIXED = ("command", "service_account_name", "namespace", "cluster_config", "working_dir",
         "image")

@dataclass(frozen=True)
class Pinned:
    """How prefect.yaml's pin step ended: the exit code `prefect deploy` would end with (0, or
    the SystemExit's code a refusal raises) and what it printed to stderr."""

    returncode: int
    stderr: str


def _pin(server: PrefectServer, image: str, repository: str | None = REPOSITORY) -> Pinned:
    """prefect.yaml's pin step, run by prefect's own ``run_steps`` (prefect/deployments/steps/
    core.py: its inputs templated from the upstream step outputs and the environment, as
    `prefect deploy` does), with pushed_digest's output as the upstream, against ``server``.
    A refusal ends the step with SystemExit, which ``run_steps`` lets pass (any other
    exception it wraps in StepExecutionError, which `prefect deploy` prints as a traceback):
    caught here as the exit code; any other exception fails the test."""
    from prefect.deployments.steps.core import run_steps
    from prefect.settings import PREFECT_API_URL, temporary_settings

    config = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    step = next(s for s in config["definitions"]["flow_image_push"]
                if "flows.deploy_steps.pin_pool_image" in s)
    upstream = {"flow-image-digest": {"image_by_digest": image}}
    stderr = io.StringIO()
    with (mock.patch.dict(os.environ), temporary_settings({PREFECT_API_URL: server.url}),
          contextlib.redirect_stderr(stderr)):
        os.environ.pop("TPURL_FLOW_IMAGE", None)
        if repository is not None:
            os.environ["TPURL_FLOW_IMAGE"] = repository
        try:
            asyncio.run(run_steps([step], upstream))
        except SystemExit as exited:
            code = exited.code if isinstance(exited.code, int) else exited.code is not None
            return Pinned(int(code), stderr.getvalue())
    return Pinned(0, stderr.getvalue())


def _pool_template(server: PrefectServer, pool: str = POOL) -> dict:
    return server.api("GET", f"/work_pools/{pool}").json()["base_job_template"]


@pytest.mark.parametrize("template_path", [TEMPLATE, SHARED_TEMPLATE, PROCESS_TEMPLATE],
                         ids=["kubernetes-team", "kubernetes", "process"])
def test_the_template_has_no_variable_for_what_runs_where_or_as_whom(template_path) -> None:
    template = json.loads(template_path.read_text())
    variables = template["variables"]
    assert not set(FIXED) & set(variables["properties"])
    assert variables["additionalProperties"] is False
    if template_path == PROCESS_TEMPLATE:
        assert variables["properties"]["env"]["additionalProperties"] is False
    else:  # one variable per name, each filling one fixed entry of the container's env
        assert "env" not in variables["properties"] and "env" not in template[
            "job_configuration"]
    placeholders = json.dumps(template["job_configuration"])
    for name in FIXED:
        assert "{{ " + name + " }}" not in placeholders
    # the worker's own command and cluster: none rendered (a fixed namespace is a constant)
    assert not {"command", "working_dir", "cluster_config"} & set(template["job_configuration"])


def test_every_env_name_a_deployment_sets_is_one_its_pool_lists() -> None:
    """prefect.yaml's environment variables are in the pool's template (or the deploy is
    refused): on the process pool under ``env``, on the Kubernetes pool one variable per
    name, each rendered as its own entry of the container's env; a Kubernetes deployment sets
    every name, so none reaches the pod without a value. The two pools list the same names."""
    config = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    process = set(json.loads(PROCESS_TEMPLATE.read_text())["variables"]["properties"]["env"][
        "properties"])
    template = json.loads(TEMPLATE.read_text())
    kubernetes = set(template["variables"]["properties"])
    assert kubernetes == process
    entries = _flow_container(template)["env"]
    values = {each["name"]: each["value"] for each in entries if "value" in each}
    assert {n: v for n, v in values.items() if n in kubernetes} == {
        name: "{{ " + name + " }}" for name in kubernetes}
    # the one value the pool fixes itself: the name of the Secret it maps the dispatcher's
    # key from, for the fix a pod without it prints (announcements/seal.py)
    assert set(values) - kubernetes == {SECRET_NAME_ENV}
    for deployment in config["deployments"]:
        variables = deployment["work_pool"].get("job_variables") or {}
        if deployment["work_pool"]["name"] == POOL:
            assert set(variables) == kubernetes, deployment["name"]
        else:
            assert set(variables.get("env") or {}) <= process, deployment["name"]


def test_every_kubernetes_deployment_runs_in_its_profiles_teams_pool() -> None:
    """A team's flow pods act as the team (its pool's account, Role, HF token Secret), so
    each Kubernetes deployment of prefect.yaml names the pool of its profile's team in the
    shipped teams file, or the shared pool for a profile in no team; the pool's template is
    shipped."""
    from flows.backends.gke.flow_pools import pool_name, template_file
    from flows.config.teams import TEAMS_FILE, load_teams

    teams = load_teams(TEAMS_FILE)
    config = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    on_kubernetes = [d for d in config["deployments"]
                     if d["work_pool"]["name"].startswith("tpurl-kubernetes")]
    assert on_kubernetes
    by_name = {d["name"]: d for d in config["deployments"]}
    for deployment in on_kubernetes:
        parameters = deployment["parameters"]
        if "profile" not in parameters:  # a dispatcher: its retrain deployment's profile
            parameters = by_name[parameters["deployment"].split("/")[-1]]["parameters"]
        team = teams.team_of(parameters["profile"])
        assert deployment["work_pool"]["name"] == pool_name(team.name if team else None), (
            deployment["name"])
        assert template_file(team.name if team else None).is_file()
    (pin,) = [s["flows.deploy_steps.pin_pool_image"]
              for s in config["definitions"]["flow_image_push"]
              if "flows.deploy_steps.pin_pool_image" in s]
    assert pin["work_pool"] == POOL


def _exec_kubeconfig(marker: Path) -> dict:
    """A kubeconfig whose user is an exec credential plugin (kubernetes_asyncio/config/
    kube_config.py ``load_from_exec_plugin``, run while the client is configured): the
    plugin writes ``marker`` and answers an ExecCredential."""
    credential = json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1",
                             "kind": "ExecCredential", "status": {"token": "t"}})
    return {"apiVersion": "v1", "kind": "Config", "current-context": "x",
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
            "users": [{"name": "u", "user": {"exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "sh",
                "args": ["-c", f"id > {marker}; echo '{credential}'"]}}}]}


async def _configure_client(template: dict, values: dict) -> object:
    """What the Kubernetes worker does with a run (prefect_kubernetes/worker.py, 0.8.0):
    renders the job configuration from the pool's template and the run's variables, then
    configures its client from it (``_get_configured_kubernetes_client``: a rendered
    cluster_config is loaded as the run gave it)."""
    from prefect_kubernetes.worker import KubernetesWorker, KubernetesWorkerJobConfiguration

    config = await KubernetesWorkerJobConfiguration.from_template_and_values(template, values)
    if config.cluster_config is not None:
        worker = KubernetesWorker(work_pool_name=POOL)
        async with worker._get_configured_kubernetes_client(config):
            pass
    return config.cluster_config


def test_a_runs_cluster_config_runs_its_command_on_prefects_template_and_not_on_ours(
        deployed: tuple[PrefectServer, dict], tmp_path: Path) -> None:
    """The rendering resolves variables and block references through the API, as the
    worker's does: the module's server."""
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect_kubernetes.worker import KubernetesWorker

    marker = tmp_path / "ran"
    values = {"image": IMAGE, "cluster_config": {"config": _exec_kubeconfig(marker),
                                                 "context_name": "x"}}
    stock = KubernetesWorker.get_default_base_job_template()
    with temporary_settings({PREFECT_API_URL: deployed[0].url}):
        assert asyncio.run(_configure_client(stock, values)) is not None
        assert marker.is_file() and "uid=" in marker.read_text()  # the attack, for real
        marker.unlink()
        assert asyncio.run(_configure_client(json.loads(TEMPLATE.read_text()), values)) is None
    assert not marker.exists()


# the pools this module makes on the session's API (another module may have made them too)
POOLS_MADE = (POOL, "image-variable")


@pytest.fixture(scope="module")
def deployed(prefect_api: None, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[PrefectServer, dict]]:
    from prefect.settings import PREFECT_API_URL

    def delete_pools() -> None:  # and the deployments on them
        made = server.api("POST", "/deployments/filter", json={
            "work_pools": {"name": {"any_": list(POOLS_MADE)}}}).json()
        for each in made:
            server.api("DELETE", f"/deployments/{each['id']}")
        for name in POOLS_MADE:
            with contextlib.suppress(httpx.HTTPStatusError):
                server.api("DELETE", f"/work_pools/{name}")

    with server_at_or_in(str(PREFECT_API_URL.value()),
                         tmp_path_factory.mktemp("prefect-home")) as server:
        delete_pools()
        try:
            server.create_pool(POOL, "kubernetes", TEMPLATE)
            pinned = _pin(server, IMAGE)
            assert pinned.returncode == 0, pinned.stderr
            flow = server.api("POST", "/flows/", json={"name": "rl-post-training"}).json()
            deployment = server.api("POST", "/deployments/", json={
                "name": "pool-template-weekly", "flow_id": flow["id"], "work_pool_name": POOL,
                "job_variables": {"TPURL_GKE__PROJECT": ""}}).json()
            yield server, deployment
        finally:
            delete_pools()


@pytest.mark.parametrize("variables", [
    {"command": "sh -c 'gcloud projects add-iam-policy-binding ...'"},
    {"service_account_name": "default"},
    {"namespace": "kube-system"},
    {"args": ["sh"]},
    {"cluster_config": {"config": {}, "context_name": "x"}},
    {"env": {"PYTHONPATH": "/tmp"}},
    {"env": {"PREFECT_API_URL": "http://127.0.0.1:9/api"}},
    {"env": {"TPURL_IMAGE__BASE": "attacker/image:latest"}},
    {"image": ATTACKER_IMAGE},
    {"image": REPOSITORY + "@sha256:" + "0" * 64},  # an older build of the flow image
])
def test_a_run_naming_a_fixed_field_is_refused_at_creation(
        deployed: tuple[PrefectServer, dict], variables: dict) -> None:
    _refused_at_creation(*deployed, variables)


def test_a_run_gets_the_fixed_command_account_and_namespace(
        deployed: tuple[PrefectServer, dict]) -> None:
    server, deployment = deployed
    run = server.api("POST", f"/deployments/{deployment['id']}/create_flow_run",
                     json={"job_variables": {"TPURL_GKE__PROJECT": ""}}).json()
    pod = _rendered_pod(server, POOL, deployment["id"], run["id"])
    assert pod["args"] == ["prefect", "flow-run", "execute"]  # the worker's own
    assert pod["service_account"] == "tpurl-flow-tutorial"  # the team's, not tpurl-flow
    assert pod["namespace"] == pod["config_namespace"] == "default"
    assert pod["image"] == IMAGE


def _flow_container(template: dict) -> dict:
    return template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"][
        "containers"][0]


def _rendered_pod(server: PrefectServer, pool: str, deployment_id: str, run_id: str) -> dict:
    """The run's pod as the Kubernetes worker renders it (tests/support/kube_pod.py)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from tests.support.kube_pod import render_container

    with temporary_settings({PREFECT_API_URL: server.url}):
        return asyncio.run(render_container(pool, deployment_id, run_id))


def test_a_runs_image_is_the_pods_image_with_an_image_variable_and_refused_on_ours(
        deployed: tuple[PrefectServer, dict]) -> None:
    """The attack, for real, on a pool whose template renders an ``image`` variable (the
    shipped template given one, as Prefect's own Kubernetes template has): the API accepts
    the run and the worker's rendering starts the attacker's image as the team's flow
    account. On the pinned pool the API refuses the run, and a run's pod has the pinned
    digest."""
    server, deployment = deployed
    with_variable = json.loads(TEMPLATE.read_text())
    _flow_container(with_variable)["image"] = "{{ image }}"
    with_variable["variables"]["properties"]["image"] = {"type": "string"}
    server.create_pool("image-variable", "kubernetes", with_variable)
    exposed = server.api("POST", "/deployments/", json={
        "name": "image-variable", "flow_id": deployment["flow_id"],
        "work_pool_name": "image-variable", "job_variables": {"image": IMAGE}}).json()
    attack = server.api("POST", f"/deployments/{exposed['id']}/create_flow_run",
                        json={"job_variables": {"image": ATTACKER_IMAGE}}).json()
    pod = _rendered_pod(server, "image-variable", exposed["id"], attack["id"])
    assert (pod["image"], pod["service_account"]) == (ATTACKER_IMAGE, "tpurl-flow-tutorial")

    with pytest.raises(httpx.HTTPStatusError) as err:
        server.api("POST", f"/deployments/{deployment['id']}/create_flow_run",
                   json={"job_variables": {"image": ATTACKER_IMAGE}})
    assert err.value.response.status_code == 422
    run = server.api("POST", f"/deployments/{deployment['id']}/create_flow_run",
                     json={}).json()
    assert _rendered_pod(server, POOL, deployment["id"], run["id"])["image"] == IMAGE


def test_an_image_in_stored_job_variables_is_not_rendered(
        deployed: tuple[PrefectServer, dict]) -> None:
    """Variables the API did not validate against the pinned template (a deployment made
    while the pool had an ``image`` variable, a run created by the scheduler from it) reach
    the worker's rendering and change nothing: the template renders no variable there."""
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration

    server, _ = deployed
    with temporary_settings({PREFECT_API_URL: server.url}):
        config = asyncio.run(KubernetesWorkerJobConfiguration.from_template_and_values(
            _pool_template(server), {"image": ATTACKER_IMAGE}))
    assert config.job_manifest["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE


def test_a_deployment_setting_an_image_is_refused_so_prefect_yaml_sets_none(
        deployed: tuple[PrefectServer, dict]) -> None:
    server, deployment = deployed
    with pytest.raises(httpx.HTTPStatusError) as err:
        server.api("POST", "/deployments/", json={
            "name": "own-image", "flow_id": deployment["flow_id"],
            "work_pool_name": POOL, "job_variables": {"image": ATTACKER_IMAGE}})
    assert err.value.response.status_code == 422
    config = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    for each in config["deployments"]:
        assert "image" not in (each["work_pool"].get("job_variables") or {}), each["name"]
    push = [next(iter(step)) for step in config["definitions"]["flow_image_push"]]
    assert push[-2:] == ["flows.deploy_steps.pushed_digest", "flows.deploy_steps.pin_pool_image"]


def test_a_later_deploy_replaces_the_digest_and_nothing_else(
        deployed: tuple[PrefectServer, dict]) -> None:
    server, _ = deployed
    newer = REPOSITORY + "@sha256:" + "b" * 64
    try:
        done = _pin(server, newer)
        assert done.returncode == 0, done.stderr
        template = _pool_template(server)
        assert _flow_container(template)["image"] == newer
        _flow_container(template)["image"] = _flow_container(json.loads(TEMPLATE.read_text()))[
            "image"]
        assert template == json.loads(TEMPLATE.read_text())
    finally:
        assert _pin(server, IMAGE).returncode == 0


@pytest.mark.parametrize(("repository", "image", "says"), [
    (None, IMAGE, "Refused: TPURL_FLOW_IMAGE is not set"),
    (REPOSITORY, ATTACKER_IMAGE.replace(":latest", "@sha256:" + "a" * 64), "by sha256 digest"),
])
def test_the_pin_step_refuses_with_the_fix_and_leaves_the_pool(
        deployed: tuple[PrefectServer, dict], repository: str | None, image: str,
        says: str) -> None:
    server, _ = deployed
    before = _pool_template(server)
    done = _pin(server, image, repository)
    assert done.returncode == 1
    assert says in done.stderr and "fix: " in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert _pool_template(server) == before


# The flow Job of one team's deployment, as a run would make it another team's: its
# LocalQueue at interactive priority (tpurl's own labels, flows/backends/gke/team_queues.py),
# a request the size of that team's share of the cohort's CPU, its node pool, a Job kept
# forever and a worker that stops watching it at once. One value for every variable of
# Prefect's own Kubernetes template (prefect_kubernetes/worker.py, 0.8.0) and of the shipped
# one, but `env` and what FIXED covers above.
ANOTHER_TEAMS: dict[str, object] = {
    "labels": {QUEUE_LABEL: team_queue_name("b"), PRIORITY_LABEL: INTERACTIVE},
    "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
    "cpu_request": "30", "cpu_limit": "30", "memory_request": "120Gi", "memory_limit": "120Gi",
    "node_pool": "team-b-np",
    "finished_job_ttl": None,
    "job_watch_timeout_seconds": 1,
    "pod_watch_timeout_seconds": 86400,
    "backoff_limit": 6,
    "image_pull_policy": "Never",
    "stream_output": False,
    "name": "team-b-retrain",
    # no `env` on ours: one variable per name (test_a_runs_env_past_the_validation_...)
    "env": {"PREFECT_API_URL": "http://127.0.0.1:9/api", "PYTHONPATH": "/tmp/attacker"},
}
DECLARED: dict[str, dict] = json.loads(TEMPLATE.read_text())["variables"]["properties"]
# What a run may name: the environment variables the template lists, one variable each,
# whose values the flow compares with its deployment's before anything runs
# (flows/deployed/run_choices.py).
RUN_MAY_NAME = frozenset(name for name in DECLARED if name.isupper())


def _some_value(schema: dict) -> object:
    """A value a variable's schema accepts: a variable the shipped template declares with no
    case in ANOTHER_TEAMS is still tried."""
    kinds = {schema.get("type")} | {each.get("type") for each in schema.get("anyOf", [])}
    if "enum" in schema:
        return schema["enum"][-1]
    return (7 if "integer" in kinds else False if "boolean" in kinds
            else {"tpurl-test": "b"} if "object" in kinds else "team-b")


def test_every_variable_prefects_template_offers_has_a_case() -> None:
    """A variable a later prefect-kubernetes adds to its template, or the shipped template
    declares, is tried below or named by FIXED."""
    from prefect_kubernetes.worker import KubernetesWorker

    stock = KubernetesWorker.get_default_base_job_template()["variables"]["properties"]
    assert set(stock) | set(DECLARED) <= set(ANOTHER_TEAMS) | set(FIXED) | RUN_MAY_NAME


@pytest.mark.parametrize("variable", sorted((set(ANOTHER_TEAMS) | set(DECLARED)) - RUN_MAY_NAME))
def test_a_run_cannot_give_the_flow_job_another_teams_queue_size_or_place(
        deployed: tuple[PrefectServer, dict], variable: str) -> None:
    """Every route on which Prefect validates a run's job variables against the pool's
    schema refuses it before any Job exists, so before Kueue sees one: creating the run
    (prefect 3.9.1 server/api/deployments.py ``create_flow_run_from_deployment``) and
    changing a scheduled run's variables (server/api/flow_runs.py ``update_flow_run``), both
    through server/api/validation.py ``validate_job_variables_for_deployment_flow_run``; a
    deployment cannot set it either (``validate_job_variables_for_deployment``), nor an
    automation's run-deployment action (``validate_job_variables_for_run_deployment_action``,
    server/api/automations.py)."""
    server, deployment = deployed
    attack = {variable: ANOTHER_TEAMS.get(variable, _some_value(DECLARED.get(variable, {})))}
    assert f"'{variable}' was unexpected" in _refused_at_creation(server, deployment, attack)

    run = server.api("POST", f"/deployments/{deployment['id']}/create_flow_run",
                     json={}).json()
    assert run["state"]["type"] == "SCHEDULED"
    with pytest.raises(httpx.HTTPStatusError) as err:
        server.api("PATCH", f"/flow_runs/{run['id']}", json={"job_variables": attack})
    assert err.value.response.status_code == 422
    assert "Error updating flow run" in err.value.response.text
    assert server.api("GET", f"/flow_runs/{run['id']}").json()["job_variables"] == \
        run["job_variables"]

    with pytest.raises(httpx.HTTPStatusError) as err:
        server.api("POST", "/deployments/", json={
            "name": f"own-{variable}", "flow_id": deployment["flow_id"],
            "work_pool_name": POOL, "job_variables": attack})
    assert err.value.response.status_code == 422

    with pytest.raises(httpx.HTTPStatusError) as err:  # an automation that would run it so
        server.api("POST", "/automations/", json={
            "name": f"run-{variable}", "trigger": {
                "type": "event", "posture": "Reactive", "expect": ["tpurl.test"],
                "threshold": 1, "within": 0},
            "actions": [{"type": "run-deployment", "source": "selected",
                         "deployment_id": deployment["id"], "job_variables": attack}]})
    assert err.value.response.status_code == 422
    assert f"'{variable}' was unexpected" in err.value.response.text


def test_prefect_yaml_sets_no_job_variable_but_the_environment() -> None:
    config = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    for each in config["deployments"]:
        may = RUN_MAY_NAME if each["work_pool"]["name"] == POOL else {"env"}
        assert set(each["work_pool"].get("job_variables") or {}) <= may, each["name"]


def _resolved(server: PrefectServer, run_id: str) -> object:
    """The run's job configuration exactly as the Kubernetes worker builds it before it
    creates the Job (prefect 3.9.1 prefect/workers/base.py ``resolve_for_flow_run``: the
    pool's template, the deployment's variables and the run's over them, then
    prefect_kubernetes' ``prepare_for_flow_run``)."""
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration

    async def resolve() -> object:
        async with get_client() as client:
            pool = await client.read_work_pool(POOL)
            run = await client.read_flow_run(UUID(run_id))
            return await KubernetesWorkerJobConfiguration.resolve_for_flow_run(
                run, client=client, work_pool=pool, worker_name="tpurl-test")

    with temporary_settings({PREFECT_API_URL: server.url}):
        return asyncio.run(resolve())


def test_a_run_created_past_the_validation_gets_the_pools_queue_size_and_place(
        deployed: tuple[PrefectServer, dict]) -> None:
    """``POST /flow_runs/`` validates no job variables (prefect 3.9.1 server/api/
    flow_runs.py ``create_flow_run``) and still takes a deployment and the pool's queue, so
    the worker picks such a run up. What it renders is the template's: no variable above has
    a placeholder to fill, and the Job carries no Kueue label, the fixed size and node pool."""
    server, deployment = deployed
    config = _resolved(server, _created_unvalidated(server, deployment, ANOTHER_TEAMS))
    job = config.job_manifest  # type: ignore[attr-defined]
    pod = job["spec"]["template"]
    container = pod["spec"]["containers"][0]
    shipped = json.loads(TEMPLATE.read_text())["job_configuration"]["job_manifest"]["spec"]
    for metadata in (job["metadata"], pod["metadata"]):
        assert not {QUEUE_LABEL, PRIORITY_LABEL} & set(metadata.get("labels") or {})
        assert not set(ANOTHER_TEAMS["annotations"]) & set(metadata.get("annotations") or {})
    assert container["resources"] == shipped["template"]["spec"]["containers"][0]["resources"]
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert pod["spec"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu-np"}
    assert (job["spec"]["ttlSecondsAfterFinished"], job["spec"]["backoffLimit"]) == (86400, 0)
    assert (config.job_watch_timeout_seconds, config.pod_watch_timeout_seconds,  # type: ignore[attr-defined]
            config.stream_output) == (None, 60, True)  # type: ignore[attr-defined]
    assert not job["metadata"]["generateName"].startswith("team-b")


def test_a_pool_made_from_an_earlier_template_is_fixed_by_the_update_tpurl_check_prints(
        deployed: tuple[PrefectServer, dict]) -> None:
    """A deployed server whose pool still offers ``labels`` (as the template did before it
    fixed the flow Job's labels): the API takes team b's queue; `tpurl check` names the pool
    and prints the update; applied, with the deploy that pins the image again, the same run
    is refused and the pool is the shipped one."""
    from flows.operations.check import POOLS, _pool_finding

    server, deployment = deployed
    earlier = _pool_template(server)
    earlier["job_configuration"]["job_manifest"]["metadata"]["labels"] = "{{ labels }}"
    earlier["variables"]["properties"]["labels"] = {
        "type": "object", "additionalProperties": {"type": "string"}}
    attack = {"job_variables": {"labels": ANOTHER_TEAMS["labels"]}}
    try:
        server.api("PATCH", f"/work_pools/{POOL}",
                   json={"base_job_template": earlier})
        server.api("POST", f"/deployments/{deployment['id']}/create_flow_run", json=attack)
        finding = _pool_finding(POOL, POOLS[POOL],
                                lambda pool: _pool_template(server, pool))
        assert finding.ok is False and finding.fix.startswith("`prefect work-pool update ")
        update, deploy = finding.fix.split("`")[1], finding.fix.split("`")[3]
        assert deploy == "prefect --no-prompt deploy --all"
        done = server.cli(*update.split()[1:])
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        assert _pin(server, IMAGE).returncode == 0  # what `prefect deploy` does next
    with pytest.raises(httpx.HTTPStatusError) as err:
        server.api("POST", f"/deployments/{deployment['id']}/create_flow_run", json=attack)
    assert err.value.response.status_code == 422
    assert _pool_finding(POOL, POOLS[POOL],
                         lambda pool: _pool_template(server, pool)).ok is True


# What a run past the validation gives as its env: another API, from which the pod would
# load the flow and its pull steps, and a path Python imports from before any of our code.
INJECTED_ENV: dict[str, str] = ANOTHER_TEAMS["env"]  # type: ignore[assignment]


def _container_env(config: object) -> dict[str, object]:
    container = config.job_manifest["spec"]["template"]["spec"]["containers"][0]  # type: ignore[attr-defined]
    return {each["name"]: each.get("value") for each in container.get("env") or []}


@pytest.mark.parametrize("job_variables", [
    {"env": INJECTED_ENV},
    {f"env.{name}": value for name, value in INJECTED_ENV.items()},  # Prefect's dotted form
], ids=["env", "dotted"])
def test_a_runs_env_past_the_validation_reaches_no_pod(
        deployed: tuple[PrefectServer, dict], job_variables: dict) -> None:
    """``POST /flow_runs/`` stores a run's job variables unvalidated (prefect 3.9.1
    server/api/flow_runs.py ``create_flow_run``) with the deployment and the pool's queue,
    so the worker picks the run up and renders it (prefect/workers/base.py
    ``from_template_and_values``: a run's ``env`` is merged into a job configuration's
    ``env``). The shipped template has no ``env`` in its job configuration: the pod's
    environment is the worker's own Prefect settings and the names the deployment sets."""
    server, deployment = deployed
    env = _container_env(_resolved(server, _created_unvalidated(server, deployment,
                                                                job_variables)))
    assert "PYTHONPATH" not in env
    assert env["PREFECT_API_URL"] == server.url  # the worker's own
    assert env["TPURL_GKE__PROJECT"] == ""  # the deployment's


@pytest.mark.parametrize(("env_config", "variables", "reaches"), [
    ("{{ env }}", {"env": INJECTED_ENV}, True),  # the shipped process template
    ({"TPURL_GKE__PROJECT": "{{ TPURL_GKE__PROJECT }}"}, {"env": INJECTED_ENV}, True),
    ("{{ deployment_env }}", {"deployment_env": INJECTED_ENV}, True),
    (None, {"env": INJECTED_ENV, "deployment_env": INJECTED_ENV}, False),
], ids=["env-variable", "one-placeholder-per-name", "another-variable", "no-env"])
def test_the_process_pool_cannot_keep_a_runs_env_out_while_deployments_set_one(
        deployed: tuple[PrefectServer, dict], env_config: object, variables: dict,
        reaches: bool) -> None:
    """The process worker's job configuration carries a flow's environment in ``env`` alone
    (prefect 3.9.1 prefect/workers/process.py ``ProcessJobConfiguration``: the command and
    working directory besides; ``prepare_for_flow_run`` lays ``env`` over the worker's own
    environment). Every way a template can fill it from a deployment's variables also takes
    a run's names, given through ``POST /flow_runs/`` unvalidated: an ``env`` placeholder is
    the run's ``env`` whole; a dict of one placeholder per name gets the run's ``env``
    merged in (prefect/workers/base.py ``from_template_and_values``, "deep merge `env`");
    a placeholder of another variable is that variable whole. Only a template without
    ``env`` keeps it out, and then no deployment sets an environment variable."""
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.workers.process import ProcessJobConfiguration

    template = json.loads(PROCESS_TEMPLATE.read_text())
    del template["job_configuration"]["env"]
    if env_config is not None:
        template["job_configuration"]["env"] = env_config
    template["variables"]["properties"]["TPURL_GKE__PROJECT"] = {"type": "string"}
    template["variables"]["properties"]["deployment_env"] = {"type": "object"}
    with temporary_settings({PREFECT_API_URL: deployed[0].url}):
        config = asyncio.run(ProcessJobConfiguration.from_template_and_values(
            template, {"TPURL_GKE__PROJECT": "", **variables}))
    assert (config.env.get("PREFECT_API_URL") == INJECTED_ENV["PREFECT_API_URL"]) is reaches
    assert ("PYTHONPATH" in config.env) is reaches


def test_prefect_yamls_kubernetes_variables_are_the_pods_env(
        deployed: tuple[PrefectServer, dict]) -> None:
    """A deployment with prefect.yaml's Kubernetes job variables is accepted by the API, and
    each is the flow container's variable of that name, as the worker renders the run; the
    worker's own PREFECT_API_URL stays."""
    server, deployment = deployed
    config = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    weekly = next(each for each in config["deployments"]
                  if each["work_pool"]["name"] == POOL)
    variables = weekly["work_pool"]["job_variables"]
    made = server.api("POST", "/deployments/", json={
        "name": "prefect-yaml-variables", "flow_id": deployment["flow_id"],
        "work_pool_name": POOL, "job_variables": variables}).json()
    run = server.api("POST", f"/deployments/{made['id']}/create_flow_run", json={}).json()
    env = _container_env(_resolved(server, run["id"]))
    assert {name: env[name] for name in variables} == variables
    assert env["PREFECT_API_URL"] == server.url


def _refused_at_creation(server: PrefectServer, deployment: dict, variables: dict) -> str:
    """Create a run of ``deployment`` with ``variables`` through the API: refused (422)
    and no run of it made; the refusal's text."""
    runs = {"flow_runs": {"deployment_id": {"any_": [deployment["id"]]}}}  # the API is shared
    before = server.api("POST", "/flow_runs/count", json=runs).json()
    with pytest.raises(httpx.HTTPStatusError) as err:
        server.api("POST", f"/deployments/{deployment['id']}/create_flow_run",
                   json={"job_variables": variables})
    assert err.value.response.status_code == 422
    assert "Error creating flow run" in err.value.response.text
    assert server.api("POST", "/flow_runs/count", json=runs).json() == before
    return err.value.response.text


def _created_unvalidated(server: PrefectServer, deployment: dict, variables: dict) -> str:
    """A run of ``deployment`` on the pool's queue made through ``POST /flow_runs/``, which
    takes its job variables as given; its id."""
    run = server.api("POST", "/flow_runs/", json={
        "flow_id": deployment["flow_id"], "deployment_id": deployment["id"],
        "work_pool_name": POOL, "state": {"type": "SCHEDULED"},
        "job_variables": variables}).json()
    assert run["job_variables"] == variables and run["work_queue_id"]  # taken as given
    return str(run["id"])


def test_the_generators_check_names_each_file_a_new_team_lacks_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    """docs/how-to/identities.md's `python -m flows.backends.gke.flow_pools --check`: the
    shipped teams file and the shipped files agree (exit 0); a teams file with a team no
    file was written for exits 1 naming that team's missing files, and leaves the tree as
    it was."""
    from flows.backends.gke import flow_pools

    shipped_file = REPO_ROOT / "deployments" / "teams.yaml"
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(shipped_file))  # the tests' default: no team
    assert flow_pools.main(["--check"]) == 0
    assert capsys.readouterr().out == ""
    shipped = yaml.safe_load(shipped_file.read_text())
    shipped["teams"]["vision"] = {"usd_per_month": 100, "profiles": ["rehearsal"]}
    teams_file = tmp_path / "teams.yaml"
    teams_file.write_text(yaml.safe_dump(shipped))
    monkeypatch.setenv("TPURL_TEAMS_FILE", str(teams_file))
    assert flow_pools.main(["--check"]) == 1
    said = capsys.readouterr().out.splitlines()
    assert said and all(line.startswith("deployments/work-pool/teams/vision/")
                        and line.endswith("is missing, what the generator writes")
                        for line in said), said
    assert not (REPO_ROOT / "deployments" / "work-pool" / "teams" / "vision").exists()


@pytest.mark.parametrize("team", [None, "tutorial"])
def test_the_fix_for_a_missing_pool_names_the_template_that_pool_is_made_from(
        team: str | None) -> None:
    """The pin step's fix for a pool that does not exist yet (`prefect work-pool create POOL
    --type kubernetes --base-job-template FILE`): FILE is the shipped template of that
    pool, the shared one or the team's, a path from the repository's root that exists and
    holds a Kubernetes worker's template."""
    from flows.backends.gke.flow_pools import pool_name, pool_template_shown, template_file

    shown = pool_template_shown(pool_name(team))
    assert (REPO_ROOT / shown).resolve() == template_file(team).resolve()
    template = json.loads((REPO_ROOT / shown).read_text())
    assert {"job_configuration", "variables"} <= set(template), shown
