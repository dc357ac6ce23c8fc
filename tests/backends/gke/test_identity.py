"""The flow's own Google identity on the Kubernetes pool (issue 18.5): a tpurl-flow service
account with the roles each stage needs, created by one command, checked at start from the
identity the flow has; a lack refuses naming the permission, the role and the grant."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flows.backends.gke import identity
from flows.backends.gke.readiness import Environment, start_issues
from flows.cli import main
from tests.support.profiles import INFRA_OVERRIDES, infra_profile

ROOT = Path(__file__).resolve().parents[3]
READY = dict(on_path=frozenset({"gcloud"}), docker_daemon=False, docker_host="unix:///x",
             infra_credentials=None, cloud_build_credentials=None, in_kubernetes=True)
WHO = "tpurl-flow@my-proj-123.iam.gserviceaccount.com"
WL_SA = {  # what the toolkit example grants CLUSTER-gke-wl-sa (issue 18.5), as permissions
    "storage.buckets.get", "storage.objects.get", "storage.objects.create",
    "storage.objects.list", "storage.objects.delete", "artifactregistry.repositories.get",
    "container.clusters.get", "container.clusters.create"}


def _env(held: frozenset[str] | None) -> Environment:
    return Environment(**READY, flow_permissions=held, flow_identity=WHO)


@pytest.mark.parametrize("builder", ("auto", "cloud-build", "docker"))
def test_the_workload_account_is_refused_at_start_naming_permission_role_and_grant(
        builder: str) -> None:
    profile = infra_profile(**{"image.builder": builder})
    issues = [i for i in start_issues(profile, _env(frozenset(WL_SA)))
              if i.category == "environment/flow-identity"]
    stages = {i.field for i in issues}
    assert {"stage infra", "stage image"} <= stages
    text = "\n".join(i.render() for i in issues)
    for need in identity.NEEDS:
        if need.permission in WL_SA or (builder == "docker" and need.stage == "image"
                                        and not need.permission.startswith("artifact")):
            continue
        assert need.permission in text and f"role {need.role}" in text
        assert f"--member=serviceAccount:{identity.flow_account(profile.gke)} " \
               f"--role={need.role}" in text
    if builder == "docker":  # a docker push needs no Cloud Build permission
        assert "cloudbuild.builds.create" not in text


def test_the_flow_account_holding_every_role_passes_and_unknown_refuses_nothing() -> None:
    profile = infra_profile()
    held = frozenset(identity.permissions())
    assert not [i for i in start_issues(profile, _env(held))
                if i.category == "environment/flow-identity"]
    assert not [i for i in start_issues(profile, _env(None))
                if i.category == "environment/flow-identity"]


def test_one_command_creates_the_account_its_roles_and_the_binding(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["flow-identity", "qwen3-30b-a3b-v6e-32",
            *[f"--set={k}={v}" for k, v in INFRA_OVERRIDES.items()]]
    assert main(argv) == 0
    script = capsys.readouterr().out
    project = INFRA_OVERRIDES["gke.project"]
    assert f"gcloud iam service-accounts create tpurl-flow --project={project}" in script
    for role in identity.roles():
        assert f"--role={role} " in script
    assert (f"--member='serviceAccount:{project}.svc.id.goog[default/tpurl-flow]'"
            in script and "roles/iam.workloadIdentityUser" in script)


def test_the_kubernetes_service_account_is_annotated_with_the_flow_account() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deployments/work-pool/rbac.yaml").read_text()))
    (sa,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    assert sa["metadata"]["name"] == identity.FLOW_ACCOUNT
    assert sa["metadata"]["annotations"]["iam.gke.io/gcp-service-account"] == \
        "tpurl-flow@PROJECT.iam.gserviceaccount.com"


def _held(fake, profile) -> frozenset[str]:
    from flows.backends.gke.readiness import held_permissions

    return held_permissions(fake, profile)


def _issues(profile, held: frozenset[str]) -> list:
    return [i for i in start_issues(profile, _env(held)) if i.category == "environment/flow-identity"]


def test_grants_on_the_bucket_and_the_repository_alone_are_seen_and_pass() -> None:
    """Least privilege (issue 18.5): storage roles granted on the bucket only and read on the
    repository only; the project's testIamPermissions cannot see them, the resources' can."""
    from tests.fakes.cloud.apis import FakeGoogleApis

    profile = infra_profile()
    fake = FakeGoogleApis()
    fake.permissions = {n.permission for n in identity.NEEDS if n.scope == "project"}
    assert {i.field for i in _issues(profile, _held(fake, profile))} == {
        "stage convert", "stage train", "stage export"}  # no bucket yet: the project decides
    fake.bucket_grants[profile.gke.bucket] = set(identity.BUCKET_PERMISSIONS)
    fake.repositories["my-proj-123/us-east5/tpurl"] = {"name": "tpurl"}
    assert not _issues(profile, _held(fake, profile))
    assert {"bucket_test_iam_permissions", "repository_test_iam_permissions"} <= set(fake.calls)
    # the repository's own grant serves the image stage's read, never infra's project need
    get = "artifactregistry.repositories.get"
    fake.permissions.discard(get)
    fake.repository_grants["my-proj-123/us-east5/tpurl"] = {get}
    held = _held(fake, profile)
    assert f"repository:{get}" in held
    assert [i.field for i in _issues(profile, held)] == ["stage infra"]


def test_a_bucket_without_the_grants_is_refused_with_the_bucket_level_command() -> None:
    from tests.fakes.cloud.apis import FakeGoogleApis

    profile = infra_profile()
    fake = FakeGoogleApis()
    fake.permissions = {n.permission for n in identity.NEEDS if n.scope == "project"}
    fake.bucket_grants[profile.gke.bucket] = {"storage.objects.get"}  # read-only on the bucket
    issues = _issues(profile, _held(fake, profile))
    assert {i.field for i in issues} == {"stage convert", "stage train", "stage export"}
    text = issues[0].render()
    assert "storage.objects.get" not in text.split("lacks", 1)[1].split(" on ", 1)[0]
    assert f"on project my-proj-123 or bucket gs://{profile.gke.bucket}" in text
    assert (f"gcloud storage buckets add-iam-policy-binding gs://{profile.gke.bucket} "
            f"--member=serviceAccount:{identity.flow_account(profile.gke)} "
            "--role=roles/storage.objectUser") in text


def test_a_grant_on_the_bucket_never_stands_in_for_a_project_need() -> None:
    held = identity.held_with_resources({"compute.regions.get"},
                                        {"storage.objects.create", "compute.networks.create"},
                                        {"artifactregistry.repositories.create"})
    assert held == {"compute.regions.get", "bucket:storage.objects.create"}
    profile = infra_profile(**{"image.builder": "cloud-build"})
    lacking = {n.permission for n in identity.NEEDS} - {"storage.objects.create"}
    issues = _issues(profile, frozenset(lacking) | held)
    # the profile's bucket grants it, Cloud Build's staging bucket needs it on the project
    assert [i.field for i in issues] == ["stage image"]
    assert "storage.objects.create (role roles/storage.admin)" in issues[0].render()
