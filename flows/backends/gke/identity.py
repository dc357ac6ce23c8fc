"""The flow's own Google identity on the Kubernetes work pool (issue 18.5): a dedicated
``tpurl-flow`` Google service account, bound to the ``tpurl-flow`` Kubernetes service account
(deployments/work-pool/rbac.yaml) through Workload Identity, holding the roles each stage
calls for and no more.

Why not the blueprint's ``CLUSTER-gke-wl-sa``: the toolkit example grants it logging,
monitoring, storage, artifactregistry.reader and container.admin only, so from a pod running
as it pre-flight (compute, IAM, Service Usage), Cloud Build (``cloudbuild.builds.create``) and
creating the image repository are all refused. And it is the TPU workloads' identity: the
flow's broader rights do not belong on the training pods.

What each stage calls with the flow's credentials (read from the code):
- image: Cloud Build (builds.create/get, the default build account's name), its staging
  bucket (created when missing, the source uploaded), the Artifact Registry repository (get,
  create when missing);
- infra: everything the operator needs (preflight_access.OPERATOR_PERMISSIONS: gcluster
  creates the network, cluster, node pools, service accounts and bindings) plus the reads of
  pre-flight;
- convert, train, export: the bucket (lineage records, results, logs). Their JobSets are
  Kubernetes calls, authorised by the Role, not by Google IAM.

Pure: the needs, the one setup command, and the issues of a set of held permissions.
"""

from __future__ import annotations

from dataclasses import dataclass

from flows.backends.gke.infra.preflight_access import OPERATOR_PERMISSIONS
from flows.common.issues import Issue
from flows.config.gke import GkeSection

FLOW_ACCOUNT = "tpurl-flow"  # the Google and the Kubernetes service account's name


@dataclass(frozen=True)
class Need:
    stage: str
    permission: str
    role: str
    # Where a grant may also sit: "project" only, or the profile's "bucket" / the image
    # "repository" as well (then a grant on that resource alone is enough: least privilege).
    scope: str = "project"


_IMAGE = {
    "cloudbuild.builds.create": "roles/cloudbuild.builds.editor",
    "cloudbuild.builds.get": "roles/cloudbuild.builds.editor",
    "storage.buckets.create": "roles/storage.admin",     # Cloud Build's staging bucket
    "storage.objects.create": "roles/storage.admin",
    "artifactregistry.repositories.get": "roles/artifactregistry.admin",
    "artifactregistry.repositories.create": "roles/artifactregistry.admin",
}
_READS = {  # pre-flight's reads (infra/cloud.py) beyond what the operator's roles carry
    "compute.regions.get": "roles/compute.viewer",
    "resourcemanager.projects.getIamPolicy": "roles/resourcemanager.projectIamAdmin",
}
_PROGRAMS = {
    "storage.buckets.get": "roles/storage.bucketViewer",
    "storage.objects.get": "roles/storage.objectUser",
    "storage.objects.create": "roles/storage.objectUser",
    "storage.objects.list": "roles/storage.objectUser",
    "storage.objects.delete": "roles/storage.objectUser",
}
NEEDS: tuple[Need, ...] = (
    *(Need("image", p, r, "repository" if p == "artifactregistry.repositories.get" else
           "project") for p, r in _IMAGE.items()),
    *(Need("infra", p, r) for p, r in {**OPERATOR_PERMISSIONS, **_READS}.items()),
    *(Need(stage, p, r, "bucket") for stage in ("convert", "train", "export")
      for p, r in _PROGRAMS.items()),
)


# The needs a grant on the resource itself satisfies, read there with testIamPermissions
# (which answers the effective permissions: inherited from the project or granted on it).
BUCKET_PERMISSIONS = frozenset(n.permission for n in NEEDS if n.scope == "bucket")
REPOSITORY_PERMISSIONS = frozenset(n.permission for n in NEEDS if n.scope == "repository")


def held_with_resources(project: set[str] | frozenset[str], bucket: set[str] | None,
                        repository: set[str] | None) -> frozenset[str]:
    """Pure: what the identity holds: the project's answer as permission names, and the
    bucket's and the repository's as ``bucket:NAME`` / ``repository:NAME``, which satisfy
    only the needs of that scope (a grant on the profile's bucket is no grant on Cloud
    Build's staging bucket). None: the resource does not exist yet."""
    return frozenset({*project, *(f"bucket:{p}" for p in bucket or () if p in BUCKET_PERMISSIONS),
                      *(f"repository:{p}" for p in repository or ()
                        if p in REPOSITORY_PERMISSIONS)})


def _holds(need: Need, held: frozenset[str] | set[str]) -> bool:
    return need.permission in held or f"{need.scope}:{need.permission}" in held


def bucket_grant_command(gke: GkeSection, role: str) -> str:
    return (f"gcloud storage buckets add-iam-policy-binding gs://{gke.bucket} "
            f"--member=serviceAccount:{flow_account(gke)} --role={role}")


def flow_account(gke: GkeSection) -> str:
    return f"{FLOW_ACCOUNT}@{gke.project}.iam.gserviceaccount.com"


def permissions() -> list[str]:
    """Every permission the flow's identity must hold on the project (testIamPermissions)."""
    return sorted({n.permission for n in NEEDS})


def roles() -> list[str]:
    return sorted({n.role for n in NEEDS})


def grant_command(gke: GkeSection, role: str) -> str:
    return (f"gcloud projects add-iam-policy-binding {gke.project} "
            f"--member=serviceAccount:{flow_account(gke)} --role={role} --condition=None")


def setup_commands(gke: GkeSection) -> list[str]:
    """The one setup (printed by ``tpurl flow-identity PROFILE``; pipe it to sh): the Google
    service account, its roles on the project, and the Workload Identity binding of the
    Kubernetes service account ``NAMESPACE/tpurl-flow`` to it."""
    account = flow_account(gke)
    return [
        "set -e",
        f"gcloud iam service-accounts create {FLOW_ACCOUNT} --project={gke.project} "
        "--display-name='tpurl flow (Kubernetes work pool)'",
        *(grant_command(gke, role) for role in roles()),
        f"gcloud iam service-accounts add-iam-policy-binding {account} "
        f"--project={gke.project} --role=roles/iam.workloadIdentityUser "
        f"--member='serviceAccount:{gke.project}.svc.id.goog[{gke.namespace}/{FLOW_ACCOUNT}]'",
    ]


def _needed(need: Need, builder: str) -> bool:
    """Cloud Build's permissions only where Cloud Build builds (a docker push authenticates
    with the daemon's credentials, and only the repository is read or created)."""
    return not (need.stage == "image" and builder == "docker"
                and not need.permission.startswith("artifactregistry."))


def identity_issues(gke: GkeSection, who: str, held: frozenset[str] | set[str],
                    builder: str = "cloud-build") -> list[Issue]:
    """Pure: one issue per stage whose permissions ``who`` (the flow's identity) lacks,
    naming each permission, its role and the command that grants it. ``builder`` is the one
    the image stage will use (docker or cloud-build)."""
    out = []
    for stage in ("image", "infra", "convert", "train", "export"):
        missing = [n for n in NEEDS if n.stage == stage and not _holds(n, held)
                   and _needed(n, builder)]
        if not missing:
            continue
        lacks = ", ".join(f"{n.permission} (role {n.role})" for n in missing)
        missing_roles = sorted({n.role for n in missing})
        grants = "; ".join(grant_command(gke, r) for r in missing_roles)
        on_bucket = all(n.scope == "bucket" for n in missing)
        where = (f"project {gke.project} or bucket gs://{gke.bucket}" if on_bucket
                 else f"project {gke.project}")
        least = ("; or, on the bucket only: " + "; ".join(
            bucket_grant_command(gke, r) for r in missing_roles)) if on_bucket else ""
        out.append(Issue(f"stage {stage}", f"the flow runs as {who}, which lacks {lacks} on "
                         f"{where}", f"grant them: {grants}{least} (or create the "
                         f"flow's own account with `tpurl flow-identity PROFILE | sh`)",
                         "environment/flow-identity"))
    return out
