"""The two Google identities of a GKE deployment and what each must hold.

- The **runtime** identity, ``tpurl-flow-TEAM@PROJECT``: every scheduled run of the team
  uses it (the team's Kubernetes work pool's pod, bound to the team's Kubernetes service
  account ``tpurl-flow-TEAM`` of deployments/work-pool/teams/TEAM/rbac.yaml through
  Workload Identity; flows/backends/gke/flow_pools.py says why one per team). A profile in
  no team: ``tpurl-flow@PROJECT``, the shared pool's, of deployments/work-pool/rbac.yaml.
  It holds what a run calls and no more: its team's buckets, Cloud Build and its staging
  bucket, a read of its image repository, a read of the cluster. Its JobSets, Secrets and
  ConfigMaps are Kubernetes calls, authorised by the namespaced Role, not by Google IAM.
- The **infra** identity, ``tpurl-infra@PROJECT``: deploys the cluster (gcluster: network,
  cluster, node pools, service accounts, their project bindings, and the helm charts of
  Kueue, JobSet and cert-manager) and grants IAM. Used once by an operator (or by a separate
  infra/teardown deployment on a process worker), never by a scheduled run: its roles
  (editor, container.admin, projectIamAdmin, which can grant owner) must not sit on a pod
  whose command, image or environment a flow run's job variables reach.

Why not the blueprint's ``CLUSTER-gke-wl-sa`` for the runtime: the toolkit example grants it
container.admin and storage.admin (the TPU workloads' rights), and lacks Cloud Build.

How a run meets the split: the infra stage of a scheduled run skips on its lineage record
once the cluster exists (a read: ``container.clusters.get``); when it must deploy, its
pre-flight tests the infra permissions of whoever runs it (preflight/access.py
``OPERATOR_PERMISSIONS``) and refuses, naming the infra identity, before anything changes.
So readiness (flows/backends/gke/readiness.py) tests :data:`NEEDS` (runtime) for every
stage and pre-flight tests the infra identity's.

Pure: the needs, what a set of held permissions lacks, and the grant for each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from flows.backends.gke.flow_pools import google_account
from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.config.gke import GkeSection

INFRA_ACCOUNT = "tpurl-infra"  # the infra identity (Google only: it runs outside the cluster)

Scope = Literal["project", "bucket", "staging", "repository"]


@dataclass(frozen=True)
class Need:
    stage: str
    permission: str
    role: str
    # Where the grant sits: the project, the profile's bucket, Cloud Build's staging bucket or
    # the image repository (a grant on that resource alone: least privilege). A project grant
    # satisfies every scope (testIamPermissions on a resource answers the effective set).
    scope: Scope = "project"


_PROGRAMS = {  # lineage records, results, logs, checkpoints: the profile's bucket
    "storage.buckets.get": "roles/storage.bucketViewer",
    "storage.objects.get": "roles/storage.objectUser",
    "storage.objects.create": "roles/storage.objectUser",
    "storage.objects.list": "roles/storage.objectUser",
    "storage.objects.delete": "roles/storage.objectUser",
}
NEEDS: tuple[Need, ...] = (
    # image: Cloud Build builds and pushes (with its own account, checked by pre-flight's
    # cloud-build-account); the flow creates the build, uploads the context to the staging
    # bucket (exists() first) and reads the repository (a docker push authenticates with the
    # daemon's credentials). Creating the staging bucket or the repository is infra's.
    # legacyBucketWriter: storage.buckets.get, objects.list/create/delete on that bucket only
    # (google-cloud-storage StorageRoles.legacyBucketWriter, the client library's role list).
    Need("image", "cloudbuild.builds.create", "roles/cloudbuild.builds.editor"),
    Need("image", "cloudbuild.builds.get", "roles/cloudbuild.builds.editor"),
    Need("image", "storage.buckets.get", "roles/storage.legacyBucketWriter", "staging"),
    Need("image", "storage.objects.create", "roles/storage.legacyBucketWriter", "staging"),
    Need("image", "artifactregistry.repositories.get", "roles/artifactregistry.reader",
         "repository"),
    # infra, as a scheduled run meets it: the record says done and the cluster still exists
    # with the profile's pool (infra/infra_stage.py gke_outputs_present)
    Need("infra", "container.clusters.get", "roles/container.clusterViewer"),
    *(Need(stage, p, r, "bucket") for stage in ("convert", "train", "export")
      for p, r in _PROGRAMS.items()),
)
SCOPED_PERMISSIONS: dict[str, frozenset[str]] = {
    scope: frozenset(n.permission for n in NEEDS if n.scope == scope)
    for scope in ("bucket", "staging", "repository")}


def held_with_resources(project: set[str] | frozenset[str], bucket: set[str] | None,
                        repository: set[str] | None,
                        staging: set[str] | None = None) -> frozenset[str]:
    """Pure: what the identity holds: the project's answer as permission names, each
    resource's as ``SCOPE:NAME``, which satisfies only the needs of that scope (a grant on the
    profile's bucket is no grant on Cloud Build's staging bucket). None: the resource does
    not exist yet."""
    answers = {"bucket": bucket, "staging": staging, "repository": repository}
    return frozenset({*project, *(f"{scope}:{p}" for scope, found in answers.items()
                                  for p in found or () if p in SCOPED_PERMISSIONS[scope])})


def _holds(need: Need, held: frozenset[str] | set[str]) -> bool:
    return need.permission in held or f"{need.scope}:{need.permission}" in held


def flow_account(gke: GkeSection, team: str | None = None) -> str:
    """The runtime identity of a run of ``team`` (None: a profile in no team): its pool's
    flow pods act as it (flows/backends/gke/flow_pools.py)."""
    return google_account(team, gke.project)


def infra_account(gke: GkeSection) -> str:
    return f"{INFRA_ACCOUNT}@{gke.project}.iam.gserviceaccount.com"


def permissions(scope: Scope = "project") -> list[str]:
    """What to ask testIamPermissions for on the project (every need: a project grant
    satisfies all) or on one resource (the needs of that scope)."""
    return sorted({n.permission for n in NEEDS if scope == "project" or n.scope == scope})


def roles(scope: Scope | None = None) -> list[str]:
    return sorted({n.role for n in NEEDS if scope is None or n.scope == scope})


def grant_command(gke: GkeSection, need: Need, resource: str, member: str = "") -> str:
    """The one gcloud line that grants ``need``'s role where its scope says; ``resource``
    is the staging bucket or the ``PROJECT/LOCATION/NAME`` of the repository when the scope
    is one of those (the image's repository may live in another project than the cluster)."""
    who = f"--member=serviceAccount:{member or flow_account(gke)} --role={need.role}"
    if need.scope == "bucket":
        return f"gcloud storage buckets add-iam-policy-binding gs://{gke.bucket} {who}"
    if need.scope == "staging":
        return f"gcloud storage buckets add-iam-policy-binding gs://{resource} {who}"
    if need.scope == "repository":
        project, location, name = resource.split("/", 2)
        return (f"gcloud artifacts repositories add-iam-policy-binding {name} "
                f"--location={location} --project={project} {who}")
    return (f"gcloud projects add-iam-policy-binding {gke.project} {who} --condition=None")


def _needed(need: Need, builder: str) -> bool:
    """Cloud Build's permissions only where Cloud Build builds (a docker push authenticates
    with the daemon's credentials, and only the repository is read)."""
    return not (need.stage == "image" and builder == "docker"
                and not need.permission.startswith("artifactregistry."))


def identity_issues(gke: GkeSection, who: str, held: frozenset[str] | set[str],
                    builder: str = "cloud-build", staging: str = "",
                    repository: str = "", team: str | None = None) -> list[Issue]:
    """Pure: one issue per stage whose runtime permissions ``who`` (the identity the flow
    runs as) lacks, naming each permission, its role and the command that grants it where
    least privilege puts it, to the runtime identity of the run's ``team`` (None: a profile
    in no team). ``builder`` is the one the image stage will use (docker or cloud-build);
    ``staging`` and ``repository`` (``PROJECT/LOCATION/NAME``) name the resources."""
    out = []
    for stage in ("image", "infra", "convert", "train", "export"):
        missing = [n for n in NEEDS if n.stage == stage and not _holds(n, held)
                   and _needed(n, builder)]
        if not missing:
            continue
        lacks = ", ".join(f"{n.permission} (role {n.role}{_on(n, gke, staging, repository)})"
                          for n in missing)
        grants = "; ".join(dict.fromkeys(
            grant_command(gke, n, staging if n.scope == "staging" else repository,
                          flow_account(gke, team))
            for n in missing))
        out.append(Issue(f"stage {stage}", f"the flow runs as {who}, which lacks {lacks}",
                         f"grant them: {grants} (or create the runtime identity with "
                         "`tpurl flow-identity PROFILE --identity runtime | sh`)",
                         Failure.ENVIRONMENT_FLOW_IDENTITY))
    return out


def _on(need: Need, gke: GkeSection, staging: str, repository: str) -> str:
    where = {"project": f"project {gke.project}", "bucket": f"gs://{gke.bucket}",
             "staging": f"gs://{staging or 'PROJECT_cloudbuild'}",
             "repository": f"repository {repository or 'of image.repository'}"}[need.scope]
    return f" on {where}"
