"""`tpurl support-bundle` (flows/operations/support_bundle.py) after a deploy through the infra stage's
code, with a run's objects on the fake Kubernetes API: every source lands in the archive, a
token canary planted in every source appears nowhere in it (only ***), and every call made
is a read. Here for the fake cloud's fixtures in this folder's conftest."""

from __future__ import annotations

import base64
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.backends.gke.infra import clients
from flows.backends.gke.infra.infra_stage import planned_for
from flows.backends.gke.infra.provision import provision
from flows.backends.gke.infra.settings import BLUEPRINT_FILE, settings_from_profile
from flows.backends.gke.watch import client as kube_client
from flows.cli import main
from flows.core.redaction import forms
from tests.fakes.cloud import Cloud
from tests.fakes.cloud import fakecloud_state as fc
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.support.cluster import cluster_at
from tests.support.logs import Log
from tests.support.profiles import SMOKE, SMOKE_REQUIRED, fake_hf_token, smoke_profile

CANARY = fake_hf_token("CanaryBundle")
ENCODED = base64.b64encode(CANARY.encode()).decode()
BUCKET = "my-bundle-bucket"
RUN = "rl-0123456789ab"
OVERRIDES = {**SMOKE_REQUIRED, "gke.bucket": BUCKET, "description": f"smoke {CANARY}"}
# The GoogleApis methods that only read (the one write of the seam is create_repository).
READS = {"project_number", "enabled_services", "get_cluster", "get_reservation",
         "region_quotas", "project_iam_policy", "bucket_iam_policy", "addon_versions",
         "kueue_objects", "test_iam_permissions", "get_repository", "image_exists",
         "cloud_build_account", "repository_iam_policy", "zones_offering"}


@pytest.fixture
def kube() -> Any:
    with FakeApiServer(FakeKube()) as server:
        yield server


def _plant(cloud: Cloud, gcs: Any, kube: FakeKube, tmp: Path) -> None:
    """The canary in every source the bundle reads."""
    profile = smoke_profile(**OVERRIDES)
    settings = settings_from_profile(profile)
    # the edited blueprint on this machine, and the deployment's copy in the bucket
    local = settings.workdir / BLUEPRINT_FILE
    local.write_text(local.read_text() + f"# operator note: {CANARY}\n")
    bucket = gcs.bucket(BUCKET)
    saved = f"{settings.state_prefix}deployment/.ghpc/artifacts/expanded_blueprint.yaml"
    bucket.blob(saved).upload_from_string(f"blueprint_name: x\n# {CANARY}\n")
    # the cluster and its pools as the GKE API reports them; the Kueue objects
    state = fc.load()
    (cluster,) = state["clusters"].values()
    cluster["resourceLabels"] = {"note": CANARY}
    cluster["nodePools"][1].setdefault("config", {})["labels"] = {"note": CANARY}
    docs = [d for d in yaml.safe_load_all(state["kueue_config"]) if d]
    for doc in docs:
        doc["metadata"].setdefault("annotations", {})["note"] = CANARY
    state["kueue_config"] = yaml.safe_dump_all(docs)
    fc.save(state)
    cloud.apis.addons["kueue"] = f"v0.15.2+{CANARY}"  # read by the pre-flight
    # the run's objects, events and log lines
    labels = {"tpurl/run": RUN, "tpurl/stage": "train"}
    kube.create("jobsets", "default", {"metadata": {"name": "train-x", "labels": labels,
                                                    "annotations": {"note": CANARY}},
                                       "spec": {"suspend": False}})
    kube.create("jobsets", "default", {"metadata": {"name": "someone-else"}, "spec": {}})
    kube.create("workloads", "default", {"metadata": {"name": "jobset-train-x", "labels": labels},
                                         "status": {"conditions": [{"type": "QuotaReserved",
                                                                    "message": CANARY}]}})
    kube.create("pods", "default", {
        "metadata": {"name": "train-x-head-0", "labels": labels},
        "spec": {"containers": [{"name": "workload-container", "env": [
            {"name": "DEBUG_TOKEN", "value": CANARY}]}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "workload-container", "state": {"running": {}}}]}})
    kube.append_log("default", "train-x-head-0", "workload-container",
                    ["step 1", f"environment: HF_TOKEN={CANARY}", f"b64 {ENCODED}"])
    kube.create("events", "default", {"metadata": {"name": "e1"}, "reason": "Failed",
                                      "message": f"pull failed with {CANARY}",
                                      "involvedObject": {"name": "train-x-head-0"}})
    kube.create("nodes", "", {"metadata": {"name": "n0", "labels": {"note": "x"}}})
    # the persisted run result (the image record) and a stage's kept log
    root = f"tpurl-results/{SMOKE}/"  # flows/run/result.py result_uris
    bucket.blob(root + "latest.json").upload_from_string(json.dumps(
        {"stages": [{"stage": "image", "uris": {"image": "r@sha256:1"}}], "note": CANARY}))
    bucket.blob(f"qwen3-0.6b/trained/{RUN}/tpurl-logs/train-grpo.log").upload_from_string(
        f"Traceback\nHfHubHTTPError: 401 for token {CANARY}\n")


def _blobs(gcs: Any) -> list[tuple[str, int]]:
    return sorted((b.name, b.generation) for b in gcs.list_blobs(BUCKET))


def test_the_bundle_holds_every_source_and_no_secret_and_only_reads(
        cloud: Cloud, gcs: Any, kube: FakeApiServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_TOKEN", CANARY)
    profile = smoke_profile(**OVERRIDES)
    provision(settings_from_profile(profile), cloud.apis, gcs, Log(),
              planned=planned_for(profile))
    _plant(cloud, gcs, kube.kube, tmp_path)
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, gcs))
    monkeypatch.setattr(kube_client, "connect", lambda profile: cluster_at(kube.url))
    before_calls, before_tools = len(cloud.apis.calls), cloud.calls()
    before_requests, before_blobs = len(kube.kube.requests), _blobs(gcs)
    out = tmp_path / "bundle.tar.gz"

    code = main(["support-bundle", SMOKE, *[f"--set={k}={v}" for k, v in OVERRIDES.items()],
                 "--run", RUN, "--out", str(out)])
    assert code == 0, capsys.readouterr()
    with tarfile.open(out) as tar:
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
                 for m in tar.getmembers() if m.isfile()}

    # every source is there
    expected = {"profile/as-written.yaml", "profile/resolved.json", "plan/plan.txt",
                "cloud/cluster.json", "cloud/node-pools.json", "blueprint/edited.yaml",
                "blueprint/deployed-expanded.yaml", "kubernetes/jobsets.json",
                "kubernetes/workloads.json", "kubernetes/pods.json", "kubernetes/events.json",
                "kubernetes/nodes.json", "kubernetes/kueue.json",
                "logs/pods/train-x-head-0/workload-container.log", "preflight.txt",
                "image/reference.json", "image/patches.yaml", "results/latest.json",
                "versions.json", f"logs/stages/qwen3-0.6b/trained/{RUN}/tpurl-logs/train-grpo.log"}
    assert expected <= set(files), sorted(expected - set(files))
    assert any(name.startswith("plan/manifests/") for name in files)
    assert "someone-else" not in files["kubernetes/jobsets.json"]  # --run selects the run's
    assert '"tpu-rl-pipeline"' in files["versions.json"] and '"prefect"' in files["versions.json"]
    # the canary: nowhere, in any form; redacted where it was planted
    leaks = [name for name, text in files.items() if any(f in text for f in forms(CANARY))]
    assert leaks == [], leaks
    planted = ["profile/resolved.json", "blueprint/edited.yaml",
               "blueprint/deployed-expanded.yaml", "cloud/cluster.json", "cloud/node-pools.json",
               "kubernetes/kueue.json", "kubernetes/jobsets.json", "kubernetes/workloads.json",
               "kubernetes/pods.json", "kubernetes/events.json", "preflight.txt",
               "logs/pods/train-x-head-0/workload-container.log", "results/latest.json",
               f"logs/stages/qwen3-0.6b/trained/{RUN}/tpurl-logs/train-grpo.log"]
    assert [name for name in planted if "***" not in files[name]] == []
    assert "errors.txt" not in files, files.get("errors.txt")
    # read-only: GETs on the Kubernetes API, reads of the GKE API, no gcloud/gcluster, the
    # bucket unchanged
    requests = kube.kube.requests[before_requests:]
    assert requests and {method for _, method, _ in requests} == {"GET"}
    assert set(cloud.apis.calls[before_calls:]) <= READS
    assert cloud.calls() == before_tools
    assert _blobs(gcs) == before_blobs


def test_an_unreachable_cluster_still_writes_a_bundle_that_says_so(
        cloud: Cloud, gcs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, gcs))

    def refused(profile: Any) -> Any:
        raise RuntimeError("no context gke_my-proj-123_us-east5_tpurl-v6e")
    monkeypatch.setattr(kube_client, "connect", refused)
    out = tmp_path / "b.tar.gz"
    code = main(["support-bundle", SMOKE, *[f"--set={k}={v}" for k, v in SMOKE_REQUIRED.items()],
                 "--out", str(out)])
    assert code == 0
    with tarfile.open(out) as tar:
        names = {m.name.split("/", 1)[1] for m in tar.getmembers()}
        errors = tar.extractfile(f"{out.name.removesuffix('.tar.gz')}/errors.txt")
        assert errors is not None and b"kubernetes: not reachable" in errors.read()
    assert {"profile/resolved.json", "plan/plan.txt", "preflight.txt"} <= names
    assert "see errors.txt" in capsys.readouterr().out


# Secrets of every kind the profile can reference, none shaped like a known token: only
# resolving the profile's references (and reading its notification block) redacts them.
WANDB_KEY = "wandbkey" + "5f3a9c2e71b04d86a1c9e7f2b3d4c5a6e7f8091a"
MLFLOW_TOKEN = "mlflowtok-Zq8XwPn3RtYu6VbKm2LsDf"
SECRET_BLOCK_VALUE = "blockvalue-Hj7KmN2pQr5StUv8WxYz"
WEBHOOK = "https://alerts.example.com/hooks/tpurl-Ab3Cd5Ef7Gh9Jk2Mn4"
SECRETS = (CANARY, WANDB_KEY, MLFLOW_TOKEN, SECRET_BLOCK_VALUE, WEBHOOK)


def test_the_bundle_redacts_every_referenced_secret_and_holds_only_the_profiles_logs(
        prefect_api: None, cloud: Cloud, gcs: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The W&B key, the MLflow token, a registry token from a Prefect Secret block and the
    notification block's webhook URL are printed by the run's programs into its logs; the
    bundle shows none of them in any form. And the bucket also holds another profile's logs
    (another model, another training configuration of the same model: its own key): the
    bundle holds this profile's logs only."""
    import uuid

    from prefect.blocks.notifications import CustomWebhookNotificationBlock
    from prefect.blocks.system import Secret

    from flows.core.layout import Layout

    suffix = uuid.uuid4().hex[:8]
    Secret(value=SECRET_BLOCK_VALUE).save(f"hub-{suffix}")
    CustomWebhookNotificationBlock(name="alerts", url=WEBHOOK).save(f"hook-{suffix}")
    monkeypatch.setenv("TPURL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_TOKEN", CANARY)
    monkeypatch.setenv("TPURL_TEST_WANDB", WANDB_KEY)
    monkeypatch.setenv("TPURL_TEST_MLFLOW", MLFLOW_TOKEN)
    overrides = {**SMOKE_REQUIRED, "gke.bucket": BUCKET, "eval.batches": "1",
                 "gke.max_usd_per_run": "50",
                 "tracking.wandb.project": "tpurl", "tracking.wandb.api_key.env": "TPURL_TEST_WANDB",
                 "tracking.mlflow.tracking_uri": "http://127.0.0.1:9",
                 "tracking.mlflow.token.env": "TPURL_TEST_MLFLOW",
                 "promotion.register.hub.repo_id": "my-org/qwen3-grpo",
                 "promotion.register.hub.token.secret_block": f"hub-{suffix}",
                 "notify.block": f"custom-webhook/hook-{suffix}"}
    profile = smoke_profile(**overrides)
    provision(settings_from_profile(profile), cloud.apis, gcs, Log(),
              planned=planned_for(profile))
    bucket = gcs.bucket(BUCKET)
    own = Layout(profile).log(Layout(profile).train_run_dir, "train-grpo")
    own_name = own.removeprefix(f"gs://{BUCKET}/")
    printed = "\n".join(f"leaked {s}" for s in SECRETS)
    bucket.blob(own_name).upload_from_string(f"own run\n{printed}\n")
    others = ["qwen3-0.6b/trained/rl-ffffffffffff/tpurl-logs/train-grpo.log",
              "qwen3-30b-a3b/max-text-format/0123456789ab/tpurl-logs/convert.log",
              f"{own_name.rsplit('/tpurl-logs/', 1)[0]}-other/tpurl-logs/train-grpo.log"]
    for name in others:
        bucket.blob(name).upload_from_string("another profile's log\n")
    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, gcs))

    def unreachable(profile: Any) -> Any:
        raise RuntimeError("no cluster in this test")
    monkeypatch.setattr(kube_client, "connect", unreachable)
    out = tmp_path / "bundle.tar.gz"
    code = main(["support-bundle", SMOKE, *[f"--set={k}={v}" for k, v in overrides.items()],
                 "--out", str(out)])
    assert code == 0, capsys.readouterr()
    with tarfile.open(out) as tar:
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
                 for m in tar.getmembers() if m.isfile()}
    stage_logs = {name for name in files if name.startswith("logs/stages/")}
    leaks = {(name, secret[:12]) for name, text in files.items() for secret in SECRETS
             if any(f in text for f in forms(secret))}
    assert (stage_logs, leaks) == ({f"logs/stages/{own_name}"}, set())
    assert files[f"logs/stages/{own_name}"].count("leaked ***") == len(SECRETS)
