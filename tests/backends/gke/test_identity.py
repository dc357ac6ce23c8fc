"""The two Google identities (18.5 before it): the runtime identity every
scheduled run uses holds its bucket, Cloud Build, its repository and a read of the cluster,
and none of the roles that deploy or grant; the infra identity holds those. One command
creates them; at start the flow's identity is checked against the runtime needs, a lack
refused naming the permission, the role and the grant where least privilege puts it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flows.backends.gke import flow_pools, identity
from flows.backends.gke.identity_setup import infra_roles, setup_commands
from flows.backends.gke.infra.preflight.access import OPERATOR_PERMISSIONS
from flows.backends.gke.readiness import Environment, held_permissions, start_issues
from flows.cli import main
from tests.fakes.cloud.apis import FakeGoogleApis
from tests.support.profiles import INFRA_OVERRIDES, infra_profile

ROOT = Path(__file__).resolve().parents[3]
READY = dict(on_path=frozenset({"gcloud"}), docker_daemon=False, docker_host="unix:///x",
             infra_credentials=None, cloud_build_credentials=None, in_kubernetes=True)
WHO = "tpurl-flow@my-proj-123.iam.gserviceaccount.com"
REPO = "my-proj-123/us-east5/tpurl"
STAGING = "my-proj-123_cloudbuild"
WL_SA = {  # what the toolkit example grants CLUSTER-gke-wl-sa, as permissions
    "storage.buckets.get", "storage.objects.get", "storage.objects.create",
    "storage.objects.list", "storage.objects.delete", "artifactregistry.repositories.get",
    "container.clusters.get", "container.clusters.create"}
# Roles that deploy, grant or reach beyond the run's own resources: none is the runtime's.
POWERFUL = {"roles/editor", "roles/owner", "roles/container.admin",
            "roles/container.clusterAdmin", "roles/resourcemanager.projectIamAdmin",
            "roles/storage.admin", "roles/artifactregistry.admin",
            "roles/iam.serviceAccountAdmin", "roles/iam.serviceAccountUser"}


def _issues(profile, held) -> list:
    env = Environment(**READY, flow_permissions=frozenset(held), flow_identity=WHO)
    return [i for i in start_issues(profile, env) if i.category == "environment/flow-identity"]


def test_the_runtime_identity_holds_nothing_that_deploys_or_grants() -> None:
    assert not set(identity.roles()) & POWERFUL
    runtime = {n.permission for n in identity.NEEDS}
    for deploys in ("container.clusters.create", "container.clusterRoles.create",
                    "container.clusterRoleBindings.create",
                    "resourcemanager.projects.setIamPolicy", "iam.serviceAccounts.create",
                    "iam.serviceAccounts.actAs", "compute.networks.create",
                    "storage.buckets.create", "artifactregistry.repositories.create"):
        assert deploys in OPERATOR_PERMISSIONS and deploys not in runtime, deploys
    # and the infra identity holds what deploying needs (container.admin)
    assert {"roles/container.admin", "roles/resourcemanager.projectIamAdmin"} <= set(
        infra_roles())
    assert "roles/container.clusterAdmin" not in infra_roles()


@pytest.mark.parametrize("builder", ("auto", "cloud-build", "docker"))
def test_the_workload_account_is_refused_at_start_naming_permission_role_and_grant(
        builder: str) -> None:
    profile = infra_profile(**{"image.builder": builder})
    issues = _issues(profile, WL_SA)
    if builder == "docker":  # a docker push needs no Cloud Build: the rest it holds
        assert issues == []
        return
    (issue,) = issues
    assert issue.field == "stage image"
    text = issue.render()
    assert "cloudbuild.builds.create (role roles/cloudbuild.builds.editor on project" in text
    assert (f"gcloud projects add-iam-policy-binding my-proj-123 "
            f"--member=serviceAccount:{WHO} --role=roles/cloudbuild.builds.editor") in text
    # the staging bucket's grant is offered on that bucket, not on the project
    assert "project-wide" not in text and "roles/storage.admin" not in text
    assert "--identity runtime" in text


def test_the_runtime_identity_holding_its_needs_passes_and_unknown_refuses_nothing() -> None:
    profile = infra_profile()
    assert _issues(profile, identity.permissions()) == []
    env = Environment(**READY, flow_permissions=None, flow_identity=WHO)
    assert not [i for i in start_issues(profile, env)
                if i.category == "environment/flow-identity"]


def test_grants_on_the_resources_alone_are_seen_and_pass() -> None:
    """Least privilege: the bucket's, the staging bucket's and the repository's own grants,
    read with each resource's testIamPermissions (the project's cannot see them)."""
    profile = infra_profile()
    fake = FakeGoogleApis()
    fake.permissions = {n.permission for n in identity.NEEDS if n.scope == "project"}
    before = {i.field for i in _issues(profile, held_permissions(fake, profile))}
    assert before == {"stage image", "stage convert", "stage train", "stage export"}
    fake.bucket_grants[profile.gke.bucket] = set(identity.permissions("bucket"))
    fake.bucket_grants[STAGING] = set(identity.permissions("staging"))
    fake.repositories[REPO] = {"name": "tpurl"}
    fake.repository_grants[REPO] = set(identity.permissions("repository"))
    assert _issues(profile, held_permissions(fake, profile)) == []
    assert fake.calls.count("bucket_test_iam_permissions") >= 2
    assert "repository_test_iam_permissions" in fake.calls


def test_a_grant_on_one_resource_never_stands_in_for_another() -> None:
    """The profile's bucket grants storage.objects.create; Cloud Build's staging bucket is
    another resource and still lacks it (and a project permission named on a resource is
    not a project grant)."""
    held = identity.held_with_resources(
        {"container.clusters.get"}, {"storage.objects.create", "compute.networks.create"},
        {"artifactregistry.repositories.create"}, None)
    assert held == {"container.clusters.get", "bucket:storage.objects.create"}
    profile = infra_profile(**{"image.builder": "cloud-build"})
    lacking = {n.permission for n in identity.NEEDS if n.scope == "project"}
    fake = FakeGoogleApis()
    fake.permissions = set(lacking)
    fake.bucket_grants[profile.gke.bucket] = set(identity.permissions("bucket"))
    fake.bucket_grants[STAGING] = {"storage.buckets.get"}
    fake.repositories[REPO] = {"name": "tpurl"}
    fake.repository_grants[REPO] = {"artifactregistry.repositories.get"}
    (issue,) = _issues(profile, held_permissions(fake, profile))
    assert issue.field == "stage image"
    text = issue.render()
    assert f"storage.objects.create (role roles/storage.legacyBucketWriter on gs://{STAGING})" \
        in text and "storage.buckets.get" not in text
    assert (f"gcloud storage buckets add-iam-policy-binding gs://{STAGING} "
            f"--member=serviceAccount:{WHO} --role=roles/storage.legacyBucketWriter") in text


def test_a_bucket_without_the_grants_is_refused_with_the_bucket_level_command() -> None:
    profile = infra_profile()
    fake = FakeGoogleApis()
    fake.permissions = {n.permission for n in identity.NEEDS if n.scope == "project"}
    fake.bucket_grants[profile.gke.bucket] = {"storage.objects.get"}  # read-only on the bucket
    fake.bucket_grants[STAGING] = set(identity.permissions("staging"))
    fake.repositories[REPO] = {"name": "tpurl"}
    fake.repository_grants[REPO] = set(identity.permissions("repository"))
    issues = _issues(profile, held_permissions(fake, profile))
    assert {i.field for i in issues} == {"stage convert", "stage train", "stage export"}
    text = issues[0].render()
    assert "storage.objects.get " not in text.split("lacks", 1)[1].split("fix", 1)[0]
    assert (f"gcloud storage buckets add-iam-policy-binding gs://{profile.gke.bucket} "
            f"--member=serviceAccount:{WHO} --role=roles/storage.objectUser") in text


def _script(capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    argv = ["flow-identity", "qwen3-30b-a3b-v6e-32", *extra,
            *[f"--set={k}={v}" for k, v in INFRA_OVERRIDES.items()]]
    assert main(argv) == 0
    return capsys.readouterr().out


def test_one_command_creates_both_identities_each_with_its_own_roles(
        capsys: pytest.CaptureFixture[str]) -> None:
    script = _script(capsys)
    project = INFRA_OVERRIDES["gke.project"]
    runtime, infra = f"tpurl-flow@{project}", f"tpurl-infra@{project}"
    lines = script.splitlines()
    assert lines[0] == "set -e"
    for account in (runtime, infra):  # idempotent: a second run creates nothing twice
        (create,) = [ln for ln in lines if f"service-accounts describe {account}" in ln]
        assert " || gcloud iam service-accounts create " in create
    for role in infra_roles():
        assert (f"add-iam-policy-binding {project} --member=serviceAccount:"
                f"{infra}.iam.gserviceaccount.com --role={role} ") in script
    grants = [ln for ln in lines if f"--member=serviceAccount:{runtime}" in ln]
    assert {r for r in POWERFUL if any(f"--role={r}" in g for g in grants)} == set()
    for need in identity.NEEDS:  # each runtime role sits where its scope says, only there
        where = {"project": f"projects add-iam-policy-binding {project} ",
                 "bucket": f"buckets add-iam-policy-binding gs://{INFRA_OVERRIDES['gke.bucket']} ",
                 "staging": f"buckets add-iam-policy-binding gs://{STAGING} ",
                 "repository": "repositories add-iam-policy-binding tpurl --location=us-east5 "
                 }[need.scope]
        assert any(where in g and f"--role={need.role}" in g for g in grants), need
        assert not any(where not in g and g.endswith(f"--role={need.role}")
                       for g in grants if need.scope != "project"), need
    assert (f"--member='serviceAccount:{project}.svc.id.goog[default/tpurl-flow]'" in script
            and "roles/iam.workloadIdentityUser" in script)
    # the resources the runtime grants sit on exist first (created only when missing)
    first_grant = next(i for i, ln in enumerate(lines) if "add-iam-policy-binding gs://" in ln)
    assert all(any(f"|| gcloud {what} create" in ln for ln in lines[:first_grant])
               for what in ("storage buckets", "artifacts repositories"))


def test_a_flag_chooses_one_identity(capsys: pytest.CaptureFixture[str]) -> None:
    runtime = _script(capsys, "--identity", "runtime")
    assert "tpurl-infra" not in runtime and "tpurl-flow" in runtime
    infra = _script(capsys, "--identity", "infra")
    assert "tpurl-flow" not in infra and "roles/container.admin" in infra
    profile = infra_profile()
    assert setup_commands(profile, "both")[1:] == [
        *setup_commands(profile, "infra")[1:], *setup_commands(profile, "runtime")[1:]]


def test_the_kubernetes_service_account_is_annotated_with_the_runtime_account() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deployments/work-pool/rbac.yaml").read_text()))
    (sa,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    assert sa["metadata"]["name"] == flow_pools.SHARED_ACCOUNT
    assert sa["metadata"]["annotations"]["iam.gke.io/gcp-service-account"] == \
        "tpurl-flow@PROJECT.iam.gserviceaccount.com"


def test_a_teams_run_is_offered_the_grant_on_its_teams_flow_account() -> None:
    """A run of a team lacking a runtime grant: the fix grants it to the team's flow account
    (flows/backends/gke/flow_pools.py), the one its pool's pods act as, not tpurl-flow."""
    profile = infra_profile()
    assert profile.gke is not None
    (issue,) = identity.identity_issues(profile.gke, "tpurl-flow-team-a@my-proj-123."
                                        "iam.gserviceaccount.com",
                                        set(identity.permissions()) - {
                                            "cloudbuild.builds.create"}, team="team-a")
    assert ("--member=serviceAccount:tpurl-flow-team-a@my-proj-123.iam.gserviceaccount.com "
            "--role=roles/cloudbuild.builds.editor") in issue.render()


def test_the_fix_for_a_repository_of_another_project_grants_there() -> None:
    """Images pushed to another project's repository: the start check's fix grants the read
    on that repository, in its own project, not in the cluster's (where no such repository
    exists: gcloud answers NOT_FOUND and the operator is stuck)."""
    profile = infra_profile(**{
        "image.repository": "europe-west4-docker.pkg.dev/images-proj-7/shared/post-training"})
    env = Environment(**READY, flow_permissions=frozenset(set(identity.permissions()) - {
        "artifactregistry.repositories.get"}), flow_identity=WHO)
    (issue,) = [i for i in start_issues(profile, env)
                if i.category == "environment/flow-identity"]
    assert ("gcloud artifacts repositories add-iam-policy-binding shared "
            "--location=europe-west4 --project=images-proj-7 ") in issue.render()
    assert "repository images-proj-7/europe-west4/shared" in issue.render()
