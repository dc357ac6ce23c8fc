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
