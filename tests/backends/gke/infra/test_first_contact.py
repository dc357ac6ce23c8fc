"""First contact with the tutorial's cluster and a fresh project: what Kueue, the
CPU pool, Artifact Registry, IAM and the Pathways registry would refuse, refused by
`tpurl plan --check` first, with the fix; and what the deploy creates so they do not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke.infra import clients
from flows.backends.gke.infra.infra_stage import check_text, planned_for
from flows.backends.gke.infra.provision import provision
from flows.backends.gke.infra.settings import InfraSettings
from tests.fakes.cloud import Cloud
from tests.fakes.cloud import fakecloud_state as fc
from tests.fakes.cloud.apis import PATHWAYS
from tests.support.logs import Log
from tests.support.profiles import fake_hf_token
from tests.support.profiles import infra_profile as tutorial_profile

# `plan --check` reads the bucket's results: on fake-gcs-server (conftest.py)
pytestmark = pytest.mark.usefixtures("bucket_reads_answer")

# The shape of the Cluster Toolkit example's Kueue configuration (examples/gke-tpu-v6e/
# kueue-configuration.yaml.tftpl): one resource group, google.com/tpu only. Written here.
TPU_ONLY_KUEUE = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: tpuv6e-flavor}
spec: {nodeLabels: {cloud.google.com/gke-tpu-accelerator: tpu-v6e-slice}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cluster-queue}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [google.com/tpu]
    flavors:
    - name: tpuv6e-flavor
      resources: [{name: google.com/tpu, nominalQuota: 32}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: default, name: user-queue}
spec: {clusterQueue: cluster-queue}
"""
READS = {"project_number", "enabled_services", "get_cluster", "get_reservation",
         "region_quotas", "project_iam_policy", "bucket_iam_policy", "addon_versions",
         "kueue_objects", "test_iam_permissions", "get_repository", "image_exists",
         "cloud_build_account", "repository_iam_policy", "zones_offering"}


class NoBucket:
    def lookup_bucket(self, name: str) -> None:
        return None


def _check(cloud: Cloud, **overrides: str) -> tuple[str, bool]:
    return check_text(tutorial_profile(**overrides), cloud.apis, NoBucket())


def _line(text: str, name: str) -> str:
    start = text.index(f"] {name}:") + 2
    return text[start:text.find("\n[", start)]


def _deployed(settings: InfraSettings, cloud: Cloud, gcs: Any) -> None:
    provision(settings, cloud.apis, gcs, Log(), planned=planned_for(tutorial_profile()))


# --- Kueue admission -----------------------------------------------------------------------

def _covered(text: str) -> list[str]:
    """The ClusterQueue's one resource group's covered resources, in a Kueue configuration
    (staged, with its Terraform placeholders, or rendered)."""
    import yaml

    (cq,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "ClusterQueue"]
    (group,) = cq["spec"]["resourceGroups"]
    return list(group["coveredResources"])


def test_the_deploy_stages_a_kueue_configuration_that_admits_every_pod(
        settings: InfraSettings, cloud: Cloud, gcs: Any) -> None:
    _deployed(settings, cloud, gcs)
    staged = settings.workdir / "tpurl-kueue-configuration.yaml.tftpl"
    assert _covered(staged.read_text()) == ["google.com/tpu", "cpu", "memory",
                                            "ephemeral-storage"]
    text, ok = _check(cloud)
    line = _line(text, "kueue-admission")
    assert ok and line.startswith("kueue-admission: admits all 4 pod sets"), text
    assert "LocalQueue default/user-queue → ClusterQueue cluster-queue" in line
    assert "kueue_objects" in cloud.apis.calls  # read from the live cluster


def test_a_cluster_queue_covering_only_tpu_is_refused_in_kueues_words(
        settings: InfraSettings, cloud: Cloud, gcs: Any) -> None:
    _deployed(settings, cloud, gcs)
    state = fc.load()
    state["kueue_config"] = TPU_ONLY_KUEUE
    fc.save(state)
    text, ok = _check(cloud)
    assert not ok
    line = _line(text, "kueue-admission")
    assert "[FAIL   ] kueue-admission" in text
    assert ("train: couldn't assign flavors to pod set pathways-head: resource cpu "
            "unavailable in ClusterQueue") in line
    assert "convert: couldn't assign flavors to pod set main-job: resource cpu" in line
    assert "kueue-configuration.yaml.tftpl" in line  # the fix


def test_the_run_reapplies_a_deployment_whose_kueue_does_not_admit_our_pods(
        settings: InfraSettings, cloud: Cloud, gcs: Any) -> None:
    _deployed(settings, cloud, gcs)
    state = fc.load()
    state["kueue_config"] = TPU_ONLY_KUEUE  # the tutorial's cluster, deployed by tpurl
    fc.save(state)
    report = provision(settings, cloud.apis, gcs, Log(), planned=planned_for(tutorial_profile()))
    assert report.deployed and len(cloud.calls("gcluster")) == 2
    assert _covered(fc.load()["kueue_config"]) == ["google.com/tpu", "cpu", "memory",
                                                   "ephemeral-storage"]


def test_a_missing_local_queue_is_refused(settings: InfraSettings, cloud: Cloud,
                                          gcs: Any) -> None:
    _deployed(settings, cloud, gcs)
    text, ok = _check(cloud, **{"gke.kueue_queue": "other-queue"})
    assert not ok and "LocalQueue default/other-queue" in _line(text, "kueue-admission")


# --- CPU pool capacity ---------------------------------------------------------------------

def test_requests_fit_the_cpu_pool_the_toolkit_creates(settings: InfraSettings, cloud: Cloud,
                                                       gcs: Any) -> None:
    text, ok = _check(cloud)  # before the deploy: the pool as the toolkit will create it
    assert ok and "(to be deployed) every pinned pod fits" in _line(text, "cpu-pool-capacity")
    _deployed(settings, cloud, gcs)
    text, ok = _check(cloud)
    assert ok and "[OK     ] cpu-pool-capacity" in text


def test_200Gi_of_ephemeral_storage_is_refused_on_a_100GB_boot_disk(
        settings: InfraSettings, cloud: Cloud, gcs: Any) -> None:
    _deployed(settings, cloud, gcs)
    text, ok = _check(cloud, **{"gke.conversion_ephemeral_storage": "200Gi"})
    line = _line(text, "cpu-pool-capacity")
    assert not ok and "convert/main-job requests ephemeral-storage 200Gi" in line
    assert "n4-standard-64, 100 GB boot disk" in line and "fix:" in line
    text, ok = _check(cloud, **{"gke.conversion_memory": "300Gi"})
    assert not ok and "requests memory 300Gi" in _line(text, "cpu-pool-capacity")


def test_the_convert_scratch_is_memory_backed_and_within_the_memory_limit() -> None:
    from flows.backends.gke.jobs.render import render_jobset
    from flows.config import ProfileError
    from flows.operations.plan import planned_workloads

    profile = tutorial_profile()
    jobset = render_jobset(planned_workloads(profile)["convert"], profile, run="r",
                           stage="convert")
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
    with pytest.raises(ProfileError, match="conversion_scratch_memory"):
        tutorial_profile(**{"gke.conversion_scratch_memory": "200Gi"})
    with pytest.raises(ProfileError, match="not a Kubernetes quantity"):
        tutorial_profile(**{"gke.conversion_memory": "lots"})


# --- Artifact Registry ---------------------------------------------------------------------

def test_preflight_refuses_a_missing_repository_it_may_not_create(cloud: Cloud) -> None:
    text, ok = _check(cloud)
    assert ok and "missing; the image stage creates it" in _line(text, "artifact-registry")
    assert "projects/my-proj-123/locations/us-east5/repositories/tpurl" in text
    cloud.apis.permissions.discard("artifactregistry.repositories.create")
    text, ok = _check(cloud)
    line = _line(text, "artifact-registry")
    assert not ok and "[FAIL   ] artifact-registry" in text
    assert "gcloud artifacts repositories create tpurl --repository-format=docker" in line


def test_the_image_stage_creates_the_repository_once(cloud: Cloud) -> None:
    from flows.backends.gke.image.repository import RepositoryUnavailable, ensure_repository

    repo = "us-east5-docker.pkg.dev/my-proj-123/tpurl/tpu-post-training"
    lines: list[str] = []
    assert ensure_repository(cloud.apis, repo, lines.append) is True
    assert cloud.apis.repositories["my-proj-123/us-east5/tpurl"]["format"] == "DOCKER"
    assert ensure_repository(cloud.apis, repo, lines.append) is False  # exists: no create
    assert cloud.apis.calls.count("create_repository") == 1
    assert ensure_repository(cloud.apis, "127.0.0.1:5000/x/y", lines.append) is False
    cloud.apis.repositories.clear()
    cloud.apis.permissions.discard("artifactregistry.repositories.create")
    with pytest.raises(RepositoryUnavailable) as err:
        ensure_repository(cloud.apis, repo, lines.append)
    assert "roles/artifactregistry.admin" in err.value.diagnosis.fix


# --- operator permissions ------------------------------------------------------------------

def test_missing_operator_permissions_are_named_with_their_role(cloud: Cloud) -> None:
    cloud.apis.permissions -= {"resourcemanager.projects.setIamPolicy",
                               "container.clusters.create"}
    text, ok = _check(cloud)
    line = _line(text, "operator-permissions")
    assert not ok
    assert "container.clusters.create, resourcemanager.projects.setIamPolicy" in line
    assert "roles/container.admin, roles/resourcemanager.projectIamAdmin" in line
    # whose step it is: the infra identity's, never the runtime one's
    assert "--identity infra" in line and "tpurl-flow lacks them on purpose" in line
    assert "projects/my-proj-123 (Resource Manager testIamPermissions)" in line


def test_editor_and_cluster_admin_alone_cannot_install_the_charts(cloud: Cloud) -> None:
    """Cluster Toolkit's kubectl-apply helm-installs Kueue, JobSet and
    cert-manager with the deploying identity's token (modules/management/kubectl-apply/
    providers.tf:17-35), and their ClusterRoles/ClusterRoleBindings need
    container.clusterRoles.create / container.clusterRoleBindings.create, which
    roles/container.admin carries (container.*) and editor + container.clusterAdmin (the
    toolkit example README's list) do not: pre-flight refuses before gcluster runs."""
    cloud.apis.permissions -= {"container.clusterRoles.create",
                               "container.clusterRoleBindings.create"}
    text, ok = _check(cloud)
    line = _line(text, "operator-permissions")
    assert not ok
    assert "container.clusterRoles.create, container.clusterRoleBindings.create" in line
    assert "ask a project owner for roles/container.admin:" in line


# --- the Pathways tag ----------------------------------------------------------------------

def test_the_pathways_tag_must_exist_and_match_the_images_jax(cloud: Cloud) -> None:
    text, ok = _check(cloud)
    assert ok and "matching the post-training image's JAX 0.11.0" in text
    text, ok = _check(cloud, **{"gke.pathways_tag": "jax-0.10.9"})
    assert not ok and "no such image: " + PATHWAYS + "/server:jax-0.10.9" in text
    cloud.apis.images |= {f"{PATHWAYS}/server:jax-0.10.9", f"{PATHWAYS}/proxy_server:jax-0.10.9"}
    text, ok = _check(cloud, **{"gke.pathways_tag": "jax-0.10.9"})
    assert not ok and "set gke.pathways_tag: jax-0.11.0" in _line(text, "pathways-images")


# --- every check says what it read; --check exits non-zero and mutates nothing ---------------

def test_every_check_names_its_live_object_and_the_check_reads_only(
        settings: InfraSettings, cloud: Cloud, gcs: Any) -> None:
    _deployed(settings, cloud, gcs)
    before = (fc.load(), cloud.calls())
    cloud.apis.calls.clear()
    cloud.apis.permissions.discard("container.clusters.get")
    text, ok = _check(cloud)
    assert not ok
    blocks = text.split("\n[")[1:]
    assert len(blocks) == 14 and all("\n          checked: " in b for b in blocks), text
    assert all("fix: " in b for b in blocks if b.startswith("FAIL"))
    assert set(cloud.apis.calls) <= READS
    assert (fc.load(), cloud.calls()) == before  # no gcloud, gcluster or state change


def _plan_check(cloud: Cloud, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                *extra: str) -> int:
    """`tpurl plan --check` where no Docker daemon answers (DOCKER_HOST names a socket
    nothing listens on), so the machine's own daemon, or its absence, decides nothing."""
    from flows.cli import main
    from tests.support.profiles import INFRA_OVERRIDES as OVERRIDES

    monkeypatch.setattr(clients, "default_clients", lambda s: (cloud.apis, NoBucket()))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("firstcontact"))
    return main(["plan", "qwen3-30b-a3b-v6e-32",
                 *[f"--set={k}={v}" for k, v in OVERRIDES.items()], *extra, "--check"])


def test_cli_plan_check_exits_non_zero_on_a_failure(cloud: Cloud, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    from tests.fakes.adc_key import write_adc_key

    # no daemon, so image.builder auto builds with Cloud Build: credentials for it are there
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(write_adc_key(tmp_path / "adc")))
    assert _plan_check(cloud, monkeypatch, tmp_path) == 0
    cloud.apis.permissions.clear()
    assert _plan_check(cloud, monkeypatch, tmp_path) == 1
    assert "[FAIL   ] operator-permissions" in capsys.readouterr().out


@pytest.mark.parametrize(("builder", "says"), [
    ("auto", "no Docker daemon answers, so image.builder auto chose Cloud Build, and Cloud "
             "Build cannot be reached: no Google credentials for Cloud Build"),
    ("docker", "builder docker, but no Docker daemon answers at unix://"),
])
def test_cli_plan_check_reports_a_missing_daemon_as_a_failure(
        cloud: Cloud, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path, builder: str, says: str) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-adc.json"))
    assert _plan_check(cloud, monkeypatch, tmp_path, f"--set=image.builder={builder}") == 1
    out = capsys.readouterr().out
    [line] = [x for x in out.splitlines() if x.startswith("FAIL start")]
    assert says in line and "image.builder" in line
    assert "Traceback" not in out


def test_cli_plan_check_without_google_credentials_ends_in_its_fail_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """The real client factory, with Application Default Credentials pointing at nothing: the
    check reads nothing and says so as a check, with the fix, not as google.auth's traceback."""
    from flows.cli import main
    from tests.support.profiles import INFRA_OVERRIDES as OVERRIDES

    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-adc.json"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("nocredentials"))
    code = main(["plan", "qwen3-30b-a3b-v6e-32",
                 *[f"--set={k}={v}" for k, v in OVERRIDES.items()], "--check"])
    out = capsys.readouterr().out
    assert code == 1
    assert "Traceback" not in out
    [line] = [x for x in out.splitlines() if x.startswith("[FAIL   ] credentials:")]
    assert "no Google credentials" in line
    assert "fix: run `gcloud auth application-default login`" in out
