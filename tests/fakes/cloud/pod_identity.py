"""Which Google identity a GKE pod's calls carry, and whether a bucket's IAM lets it write:
GKE's and Cloud Storage's behaviour, as their documentation states it, for pods rendered here.

- A pod on the host's network (``hostNetwork: true``) reaches the node's Compute Engine
  metadata server, not the GKE metadata server, and acts as the node pool's service account:
  "Workload Identity Federation for GKE can't be used with Pods running on the host network"
  (GKE, "About Workload Identity Federation for GKE", Limitations). The
  node's account is its pool's ``service_account`` (gke-node-pool main.tf
  ``service_account = var.service_account_email``).
- A privileged container is root on the node (Kubernetes, "Pod Security Standards",
  Privileged: "Privileged Pods disable most security mechanisms"); it can enter the host's
  network namespace, so it is counted as the node's account too.
- Any other pod on a node pool with the GKE metadata server (GKE_METADATA, which Cluster
  Toolkit's gke-node-pool sets on every pool it makes: modules/compute/gke-node-pool/main.tf
  ``workload_metadata_config { mode = "GKE_METADATA" }``, read at 104708037, v1.95.0) acts
  as its Kubernetes service account's principal,
  ``principal://iam.googleapis.com/projects/NUMBER/locations/global/workloadIdentityPools/
  PROJECT.svc.id.goog/subject/ns/NAMESPACE/sa/ACCOUNT``; no ``serviceAccountName`` is the
  namespace's ``default`` (Kubernetes ServiceAccount admission, plugin/pkg/admission/
  serviceaccount/admission.go: "If the pod does not specify a ServiceAccount, it is set to
  default").
- Writing an object takes ``storage.objects.create``; the predefined roles that carry it
  (Cloud Storage IAM roles page) are below. A binding with a condition is not counted (it
  may not apply), as the infra code counts it (flows/backends/gke/infra/iam.py granted).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

WRITE_ROLES = frozenset({"roles/storage.admin", "roles/storage.objectAdmin",
                         "roles/storage.objectUser", "roles/storage.objectCreator",
                         "roles/storage.legacyBucketWriter", "roles/storage.legacyBucketOwner",
                         "roles/owner", "roles/editor"})


def pods(jobset: dict[str, Any]) -> list[dict[str, Any]]:
    """Every pod template of a JobSet (one per replicated job)."""
    return [rj["template"]["spec"]["template"]["spec"] for rj in jobset["spec"]["replicatedJobs"]]


def acting_member(pod: dict[str, Any], *, node_account: str, project: str, namespace: str,
                  project_number: str) -> str:
    """The IAM member a pod's Google calls carry (module docstring says why)."""
    containers = [*pod.get("initContainers", []), *pod.get("containers", [])]
    if pod.get("hostNetwork") or any((c.get("securityContext") or {}).get("privileged")
                                     for c in containers):
        return f"serviceAccount:{node_account}"
    account = pod.get("serviceAccountName") or "default"
    return (f"principal://iam.googleapis.com/projects/{project_number}/locations/global/"
            f"workloadIdentityPools/{project}.svc.id.goog/subject/ns/{namespace}/sa/{account}")


def may_write(member: str, bucket: str, bindings: Iterable[tuple[str, str, str]]) -> bool:
    """Whether ``member`` may create objects in ``bucket``, given (resource, member, role)
    bindings, a resource being ``bucket NAME`` or ``project ID`` (a project grant covers
    every bucket of the project)."""
    return any(who == member and role in WRITE_ROLES
               and (resource == f"bucket {bucket}" or resource.startswith("project "))
               for resource, who, role in bindings)
