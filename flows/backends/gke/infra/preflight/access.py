"""Pre-flight checks of what a fresh project refuses: the operator's permissions, the image
repository, the Pathways images, and whether Kueue and the CPU pool take our pods.

Pure functions from facts (read by flows/backends/gke/infra/preflight/checks.py ``gather``) and the
plan (``Planned``: what the pipeline will submit, computed from the profile by infra_stage.py) to
``CheckResult``s. Each result names the live object it read (``target``) and its fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from flows.backends.gke.infra.admission import (
    GKE_DEFAULT_DISK_GB,
    PodSet,
    admission_problems,
    capacity_problems,
    placement_problems,
    pool_allocatable,
)
from flows.backends.gke.infra.preflight.results import Status
from flows.backends.gke.infra.settings import InfraSettings

# What the infra identity needs on the project (the operator, or tpurl-infra@PROJECT:
# flows/backends/gke/identity.py; never a scheduled run's runtime identity), and the predefined
# role that grants it. Cluster Toolkit's examples/gke-tpu-v6e/README.md lists editor,
# container.clusterAdmin and iam.serviceAccountAdmin, but its kubectl-apply module
# helm-installs Kueue, JobSet and cert-manager with the deploying identity's own access token
# (modules/management/kubectl-apply/providers.tf:17-35, cluster-toolkit develop c765092f4),
# and those charts create ClusterRoles and ClusterRoleBindings, which GKE's IAM authorizer
# allows only with container.clusterRoles.create / container.clusterRoleBindings.create:
# in roles/container.admin (container.*), not in container.clusterAdmin (clusters and
# operations only) nor in editor (a project editor's ClusterRoleBinding create is refused:
# velero-io/velero#7384). So container.admin, which also carries clusters.create/get, takes
# clusterAdmin's place. Plus projectIamAdmin (the blueprint's service-account modules and the
# infra stage bind project roles: editor lacks setIamPolicy), artifactregistry.admin and
# storage.admin (the repository and the buckets the runtime identity may not create), and the
# reads of pre-flight itself.
OPERATOR_PERMISSIONS: dict[str, str] = {
    "container.clusters.create": "roles/container.admin",
    "container.clusters.get": "roles/container.admin",
    "container.clusterRoles.create": "roles/container.admin",
    "container.clusterRoleBindings.create": "roles/container.admin",
    "compute.networks.create": "roles/editor",
    "compute.reservations.get": "roles/editor",
    "compute.regions.get": "roles/editor",
    "iam.serviceAccounts.create": "roles/iam.serviceAccountAdmin",
    "iam.serviceAccounts.actAs": "roles/iam.serviceAccountUser",
    "resourcemanager.projects.setIamPolicy": "roles/resourcemanager.projectIamAdmin",
    "resourcemanager.projects.getIamPolicy": "roles/resourcemanager.projectIamAdmin",
    "storage.buckets.create": "roles/storage.admin",
    "artifactregistry.repositories.create": "roles/artifactregistry.admin",
    "artifactregistry.repositories.get": "roles/artifactregistry.admin",
    "serviceusage.services.list": "roles/serviceusage.serviceUsageViewer",
}
# The JAX of the post-training images whose version we know: MaxText 0.2.4's
# tpu-post-train extra requires jax>=0.11.0 and the 0.2.4 environment resolves 0.11.0.
KNOWN_IMAGE_JAX = {
    "us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_post_training:0.2.4": "0.11.0",
}
AR_HOST = re.compile(r"^(?P<location>[a-z0-9-]+)-docker\.pkg\.dev/(?P<project>[^/]+)/"
                     r"(?P<repo>[^/]+)/")


@dataclass(frozen=True)
class Planned:
    """What the pipeline will submit, from the profile (no cloud)."""

    pod_sets: list[PodSet] = field(default_factory=list)
    image_repository: str = ""  # where the image stage pushes (host/path, no tag)
    pathways_images: tuple[str, ...] = ()
    base_image: str = ""
    image_builder: str = "auto"  # image.builder: whether Cloud Build may build the image


def ar_repository(image_repository: str) -> tuple[str, str, str] | None:
    """(project, location, repository) of an Artifact Registry image path, else None."""
    match = AR_HOST.match(image_repository + "/")
    return (match["project"], match["location"], match["repo"]) if match else None


def _grant(s: InfraSettings, roles: list[str]) -> str:
    return "; ".join(f"gcloud projects add-iam-policy-binding {s.gke.project} "
                     f"--member=user:YOU --role={role}" for role in roles)


INFRA_IDENTITY_FIX = ("deploying is the infra identity's step, not a scheduled run's: run it "
                      "once as an operator holding these roles or as tpurl-infra@{project} "
                      "(`tpurl flow-identity PROFILE --identity infra | sh`); the runtime "
                      "identity tpurl-flow lacks them on purpose")


def check_operator_permissions(s: InfraSettings, held: Any) -> tuple[Status, str, str, str]:
    """(status, found, fix, target)."""
    target = f"projects/{s.gke.project} (Resource Manager testIamPermissions)"
    if isinstance(held, Exception) or not isinstance(held, set):
        return ("unknown", f"could not be read ({held})",
                f"check your roles on {s.gke.project} by hand: "
                f"{', '.join(sorted(set(OPERATOR_PERMISSIONS.values())))}", target)
    missing = [p for p in OPERATOR_PERMISSIONS if p not in held]
    if missing:
        roles = sorted({OPERATOR_PERMISSIONS[p] for p in missing})
        return ("fail", f"you lack {', '.join(missing)}", f"ask a project owner for "
                f"{', '.join(roles)}: {_grant(s, roles)}; "
                + INFRA_IDENTITY_FIX.format(project=s.gke.project), target)
    return ("ok", f"you hold all {len(OPERATOR_PERMISSIONS)} permissions the run needs", "",
            target)


def check_artifact_registry(planned: Planned, repo: Any,
                            can_create: bool) -> tuple[Status, str, str, str]:
    where = ar_repository(planned.image_repository)
    if where is None:
        return ("ok", f"{planned.image_repository} is not in Artifact Registry: not checked",
                "", planned.image_repository)
    project, location, name = where
    target = f"projects/{project}/locations/{location}/repositories/{name}"
    create = (f"gcloud artifacts repositories create {name} --repository-format=docker "
              f"--location={location} --project={project}")
    if isinstance(repo, Exception):
        return ("unknown", f"could not be read ({repo})", f"check it: gcloud artifacts "
                f"repositories describe {name} --location={location} --project={project}",
                target)
    if repo is None:
        if can_create:
            return ("ok", "missing; the image stage creates it (DOCKER format)", create, target)
        return ("fail", "missing, and you may not create it (artifactregistry.repositories"
                ".create)", f"get roles/artifactregistry.admin, or have it created: {create}",
                target)
    if repo.get("format", "DOCKER") != "DOCKER":
        return ("fail", f"exists with format {repo.get('format')}, not DOCKER",
                "set image.repository to a Docker repository", target)
    return ("ok", "exists (DOCKER)", "", target)


def check_pathways_images(s: InfraSettings, planned: Planned,
                          found: dict[str, Any]) -> tuple[Status, str, str, str]:
    target = ", ".join(planned.pathways_images)
    tag = s.gke.pathways_tag
    missing = [ref for ref in planned.pathways_images if found.get(ref) is False]
    errors = [f"{ref}: {v}" for ref, v in found.items() if isinstance(v, Exception)]
    if missing:
        return ("fail", f"no such image: {', '.join(missing)}", "set gke.pathways_tag to a "
                "tag published for both server and proxy_server (gcloud artifacts docker tags "
                "list us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server)", target)
    if errors:
        return ("unknown", f"could not be read ({'; '.join(errors)})",
                "check the tag by hand: docker manifest inspect " + planned.pathways_images[0],
                target)
    jax = KNOWN_IMAGE_JAX.get(planned.base_image)
    if jax is None:
        return ("unknown", f"images exist; the JAX of {planned.base_image} is not known here, "
                f"so {tag!r} was not compared with it", "make gke.pathways_tag jax-<the JAX "
                "version of image.base> (python -c 'import jax; print(jax.__version__)' in it)",
                target)
    if tag != f"jax-{jax}":
        return ("fail", f"{tag} does not match the post-training image's JAX {jax}",
                f"set gke.pathways_tag: jax-{jax}", target)
    return ("ok", f"both images exist at {tag}, matching the post-training image's JAX {jax}",
            "", target)


def kueue_fix(s: InfraSettings) -> str:
    return ("`tpurl run` re-applies the blueprint with tpurl's Kueue configuration "
            "(deployments/blueprints/kueue-configuration.yaml.tftpl: a cpu/memory/"
            f"ephemeral-storage resource group on {s.gke.cpu_pool}) when it deployed the "
            "cluster; otherwise add such a resource group to the ClusterQueue yourself "
            "(kubectl edit clusterqueue)")


def check_kueue_admission(s: InfraSettings, planned: Planned,
                          kueue: dict[str, Any]) -> tuple[Status, str, str, str]:
    lq = kueue.get("local_queue")
    target = f"LocalQueue {s.gke.namespace}/{s.queue}"
    if lq is None:
        return ("fail", "does not exist: every JobSet would wait unadmitted",
                ("re-apply the blueprint: it creates the team's LocalQueue and ClusterQueue "
                 "from deployments/teams.yaml" if s.team_queue else
                 f"set gke.kueue_queue to a LocalQueue of namespace {s.gke.namespace} "
                 "(kubectl get localqueues -A), or re-apply the blueprint"), target)
    cq_name = (lq.get("spec") or {}).get("clusterQueue")
    cq = kueue.get("cluster_queue")
    target += f" → ClusterQueue {cq_name}"
    if cq is None:
        return ("fail", f"ClusterQueue {cq_name} does not exist", kueue_fix(s), target)
    flavors = kueue.get("flavors") or {}
    problems = (admission_problems(planned.pod_sets, cq, flavors)
                or placement_problems(planned.pod_sets, cq, flavors))
    if problems:
        return ("fail", "; ".join(problems), kueue_fix(s), target)
    return ("ok", f"admits all {len(planned.pod_sets)} pod sets (convert, train, export)",
            "", target)


def check_cpu_pool(s: InfraSettings, planned: Planned,
                   pools: list[dict[str, Any]]) -> tuple[Status, str, str, str]:
    names = sorted({ps.node_selector.get("cloud.google.com/gke-nodepool", "")
                    for ps in planned.pod_sets} - {""})
    target = "node pool(s) " + ", ".join(names)
    unknown = [p.get("name") for p in pools if p.get("name") in names
               and pool_allocatable(p) is None]
    problems = capacity_problems(planned.pod_sets, pools)
    fix = ("lower gke.conversion_memory / conversion_scratch_memory / conversion_cpu / "
           f"conversion_ephemeral_storage to fit one {s.gke.cpu_pool} node (GKE cannot change "
           "its boot disk; keep large files on the memory-backed scratch volume)")
    if problems:
        return ("fail", "; ".join(problems), fix, target)
    if unknown:
        return ("unknown", f"machine type of {', '.join(map(str, unknown))} unknown here",
                "compare the pods' requests with `kubectl describe node` allocatable", target)
    return ("ok", "every pinned pod fits one node (allocatable estimated from machine type "
            f"and boot disk, {GKE_DEFAULT_DISK_GB} GB when unset)", "", target)
