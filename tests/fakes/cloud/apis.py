"""The fake GoogleApis (the seam of flows/backends/gke/infra/cloud.py): reads the same state file the fake
gcloud/gcluster executables write, plus facts a test sets (services, reservation, quotas)."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from flows.backends.gke.infra.cloud import ApiDenied, ApiNotFound
from tests.fakes.cloud import fakecloud_state as fc
from tests.fakes.cloud.ar_operations import Creations
from tests.fakes.cloud.iam_propagation import Propagation

PATHWAYS = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways"
CLOUD_BUILD_API = "cloudbuild.googleapis.com"
# The fake's own facts, written from Google's documentation and never imported from the
# product, so that a check the product gets wrong (an API or permission it forgets, or asks
# for needlessly) can disagree with the project these describe.
# A project set up as the tutorial sets it up: Cluster Toolkit's GKE blueprints enable
# Compute Engine, GKE, Cloud Storage, IAM and Resource Manager (modules/project/service-
# enablement, the blueprints' `services`), the image stage Artifact Registry and Cloud Build.
TUTORIAL_PROJECT_SERVICES = frozenset({
    "compute.googleapis.com", "container.googleapis.com", "storage.googleapis.com",
    "iam.googleapis.com", "cloudresourcemanager.googleapis.com",
    "artifactregistry.googleapis.com", CLOUD_BUILD_API})
# What the tutorial's operator (project Owner) is found to hold when testIamPermissions asks
# for what a deploy does: create the cluster and its RBAC, the network, the service accounts
# and their grants, the bucket and the image repository (IAM's permission reference,
# cloud.google.com/iam/docs/permissions-reference, each permission's name as listed there).
OWNER_HOLDS = frozenset({
    "container.clusters.create", "container.clusters.get", "container.clusterRoles.create",
    "container.clusterRoleBindings.create", "compute.networks.create",
    "compute.reservations.get", "compute.regions.get", "iam.serviceAccounts.create",
    "iam.serviceAccounts.actAs", "resourcemanager.projects.setIamPolicy",
    "resourcemanager.projects.getIamPolicy", "storage.buckets.create",
    "artifactregistry.repositories.create", "artifactregistry.repositories.get",
    "serviceusage.services.list"})


class FakeGoogleApis:
    def __init__(self) -> None:
        self.number = "0"  # fake-gcs-server reports projectNumber 0
        self.services: set[str] = set(TUTORIAL_PROJECT_SERVICES)
        # Cloud Build's default account (projects.locations.getDefaultServiceAccount): the
        # legacy one, which Cloud Build grants roles/cloudbuild.builds.builder on the project
        # when the API is enabled; a test may name another (the Compute default account of
        # newer projects, granted nothing here) or "" (none set).
        self.cloud_build_sa: str | None = None  # None: the legacy account of self.number
        self.repository_policies: dict[str, dict[str, Any]] = {}  # "project/location/name"
        self.reservation: dict[str, Any] | None = {
            "name": "my-v6e-res", "status": "READY", "specificReservationRequired": True,
            "specificReservation": {"count": "8", "inUseCount": "0", "instanceProperties": {
                "machineType": "ct6e-standard-4t"}}}
        # A region's quotas (compute v1 regions.get): as projects report the listing, it
        # carries the older TPU metrics only (v5e's, with GCE's PREEMPTIBLE_ prefix for the
        # preemptible one) and none of v6e, v5p or TPU7x, whose quotas Cloud Quotas alone
        # answers (flows/backends/gke/infra/preflight/quota_names.py has the reports). A test
        # that lists a generation's metric sets ``quotas`` itself.
        self.quotas: list[dict[str, Any]] = [
            {"metric": "TPU_LITE_PODSLICE_V5", "limit": 32.0, "usage": 0.0},
            {"metric": "PREEMPTIBLE_TPU_LITE_PODSLICE_V5", "limit": 1536.0, "usage": 0.0},
            {"metric": "CPUS", "limit": 1000.0, "usage": 10.0}]
        # Which zones list each machine type (compute v1 machineTypes.aggregatedList with a
        # name filter): ct6e-standard-4t where Cloud TPU documents v6e ("TPU regions and
        # zones", cloud.google.com/tpu/docs/regions-zones, read 2026-12-05), plus us-east5-c,
        # which the API lists while the documentation marks its v6e single-tenant
        self.machine_type_zones: dict[str, set[str]] = {
            machine: {"us-central1-b", "us-east1-d", "us-east5-a", "us-east5-b", "us-east5-c",
                      "europe-west4-a", "asia-northeast1-b"}
            for machine in ("ct6e-standard-1t", "ct6e-standard-4t", "ct6e-standard-8t")}
        self.addons: dict[str, Any] = {"jobset": "v0.10.1", "jobset_api_versions": ["v1alpha2"],
                                       "kueue": "v0.15.2"}
        self.denied: set[str] = set()  # method names that raise PermissionError
        self.calls: list[str] = []
        # testIamPermissions answers the subset held (cloudresourcemanager v1
        # projects.testIamPermissions); the operator holds all of them unless a test says so
        self.permissions: set[str] = set(OWNER_HOLDS)
        self.repositories: dict[str, dict[str, Any]] = {}  # "project/location/name" → repo
        # CreateRepository's long-running operations (tests/fakes/cloud/ar_operations.py)
        self.creations = Creations()
        # IAM's enforcement of a grant, delay_s after it was made (tests/fakes/cloud/
        # iam_propagation.py): what a pod running as a granted account is refused meanwhile
        self.iam = Propagation()
        # Resource-level testIamPermissions (storage JSON API buckets.testIamPermissions,
        # Artifact Registry repositories.testIamPermissions) answer the *effective*
        # permissions: what the project grants plus what the resource's own policy grants; a
        # missing resource is a 404. Keys: bucket name, "project/location/name".
        self.bucket_grants: dict[str, set[str]] = {}  # a bucket that exists → its own grants
        self.repository_grants: dict[str, set[str]] = {}
        self.images: set[str] = {f"{PATHWAYS}/{name}:jax-0.11.0"
                                 for name in ("server", "proxy_server")}

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.denied:
            raise PermissionError(f"403 caller lacks permission for {name}")

    def project_number(self, project: str) -> str:
        self._call("project_number")
        return self.number

    def enabled_services(self, project: str) -> set[str]:
        self._call("enabled_services")
        return set(self.services)

    def get_cluster(self, project: str, location: str, cluster: str) -> dict[str, Any] | None:
        self._call("get_cluster")
        found = fc.load()["clusters"].get(cluster)
        return copy.deepcopy(found)

    def get_reservation(self, project: str, zone: str, name: str) -> dict[str, Any] | None:
        self._call("get_reservation")
        res = copy.deepcopy(self.reservation)
        if not res or res.get("name") != name:
            return None
        # Compute Engine counts the reservation's VMs in use: the hosts of every deployed
        # pool that consumes it (the static pool's nodes, gke-node-pool's node_count)
        consumed = sum(int(pool.get("initialNodeCount") or 0)
                       for cluster in fc.load()["clusters"].values()
                       for pool in cluster.get("nodePools", [])
                       if any(v.rsplit("/", 1)[-1] == name for v in (
                           (pool.get("config") or {}).get("reservationAffinity") or {}
                       ).get("values", [])))
        specific = res.setdefault("specificReservation", {})
        specific["inUseCount"] = str(int(specific.get("inUseCount", 0)) + consumed)
        return res

    def region_quotas(self, project: str, region: str) -> list[dict[str, Any]]:
        self._call("region_quotas")
        return copy.deepcopy(self.quotas)

    def zones_offering(self, project: str, machine_type: str) -> set[str]:
        self._call("zones_offering")
        return set(self.machine_type_zones.get(machine_type, set()))

    def legacy_cloud_build_sa(self) -> str:
        return f"{self.number}@cloudbuild.gserviceaccount.com"

    def project_iam_policy(self, project: str) -> dict[str, Any]:
        self._call("project_iam_policy")
        policy = copy.deepcopy(fc.load()["project_policy"])
        if CLOUD_BUILD_API in self.services:
            policy.setdefault("bindings", []).append({
                "role": "roles/cloudbuild.builds.builder",
                "members": [f"serviceAccount:{self.legacy_cloud_build_sa()}"]})
        return policy

    def cloud_build_account(self, project: str, location: str) -> str:
        self._call("cloud_build_account")
        email = self.legacy_cloud_build_sa() if self.cloud_build_sa is None else \
            self.cloud_build_sa
        return f"projects/{project}/serviceAccounts/{email}" if email else ""

    def repository_iam_policy(self, project: str, location: str,
                              repository: str) -> dict[str, Any]:
        self._call("repository_iam_policy")
        key = f"{project}/{location}/{repository}"
        if key not in self.repositories:
            raise LookupError(f"404 repository {repository} not found")
        return copy.deepcopy(self.repository_policies.get(key, {"bindings": []}))

    def bucket_test_iam_permissions(self, bucket: str, permissions: list[str]) -> set[str]:
        self._call("bucket_test_iam_permissions")
        if bucket not in self.bucket_grants:
            raise ApiNotFound(f"https://storage.googleapis.com/storage/v1/b/{bucket}/iam/"
                              "testPermissions")
        return set(permissions) & (self.permissions | self.bucket_grants[bucket])

    def repository_test_iam_permissions(self, project: str, location: str, repository: str,
                                        permissions: list[str]) -> set[str]:
        self._call("repository_test_iam_permissions")
        key = f"{project}/{location}/{repository}"
        if key not in self.repositories:
            raise ApiNotFound(f"repositories/{repository}:testIamPermissions")
        return set(permissions) & (self.permissions | self.repository_grants.get(key, set()))

    def bucket_iam_policy(self, bucket: str) -> dict[str, Any]:
        self._call("bucket_iam_policy")
        return fc.load()["bucket_policies"].get(bucket, {"bindings": []})

    def addon_versions(self, cluster: dict[str, Any]) -> dict[str, Any]:
        self._call("addon_versions")
        return dict(self.addons)

    def kueue_objects(self, cluster: dict[str, Any], namespace: str,
                      local_queue: str) -> dict[str, Any]:
        """What kubectl-apply applied at deploy (the fake gcluster keeps the rendered Kueue
        configuration), read the way RestGoogleApis reads it: LocalQueue → ClusterQueue →
        its ResourceFlavors; a missing object is None, as a 404 is."""
        self._call("kueue_objects")
        docs = [d for d in yaml.safe_load_all(fc.load().get("kueue_config") or "") if d]
        def find(kind: str, name: str, ns: str | None = None) -> dict[str, Any] | None:
            return next((d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name
                         and (ns is None or d["metadata"].get("namespace") == ns)), None)
        lq = find("LocalQueue", local_queue, namespace)
        cq = find("ClusterQueue", lq["spec"]["clusterQueue"]) if lq else None
        names = [f["name"] for g in ((cq or {}).get("spec") or {}).get("resourceGroups", [])
                 for f in g.get("flavors", [])]
        flavors = {n: f for n in names if (f := find("ResourceFlavor", n)) is not None}
        # Kueue's Configuration as the chart rendered it (the fake gcluster keeps it,
        # helm_modules.py); RestGoogleApis reads ConfigMap kueue-system/kueue-manager-config
        return {"local_queue": lq, "cluster_queue": cq, "flavors": flavors,
                "manager_config": fc.load().get("kueue_manager_config")}

    def admitted_workloads(self, cluster: dict[str, Any]) -> list[str]:
        """Kueue's Workloads of the cluster as the test sets them (state ``workloads``:
        Kubernetes objects with their conditions): those Kueue admitted that have not
        finished (kueue apis/kueue/v1beta1/workload_types.go: WorkloadAdmitted,
        WorkloadFinished)."""
        self._call("admitted_workloads")

        def holds(workload: dict[str, Any], kind: str) -> bool:
            return any(c["type"] == kind and c["status"] == "True"
                       for c in workload.get("status", {}).get("conditions", []))
        return sorted(f"{w['metadata']['namespace']}/{w['metadata']['name']}"
                      for w in fc.load().get("workloads") or []
                      if holds(w, "Admitted") and not holds(w, "Finished"))

    def test_iam_permissions(self, project: str, permissions: list[str]) -> set[str]:
        self._call("test_iam_permissions")
        return {p for p in permissions if p in self.permissions}

    def get_repository(self, project: str, location: str,
                       repository: str) -> dict[str, Any] | None:
        self._call("get_repository")
        self.creations.settle(self.repositories)
        found = self.repositories.get(f"{project}/{location}/{repository}")
        return copy.deepcopy(found)

    def create_repository(self, project: str, location: str, repository: str) -> dict[str, Any]:
        """Fails like Artifact Registry: 403 without artifactregistry.repositories.create,
        409 ALREADY_EXISTS for an existing name."""
        self._call("create_repository")
        if "artifactregistry.repositories.create" not in self.permissions:
            raise ApiDenied("Permission 'artifactregistry.repositories.create' denied")
        key = f"{project}/{location}/{repository}"
        self.creations.settle(self.repositories)
        if key in self.repositories or self.creations.being_created(key):
            raise RuntimeError(f"409 ALREADY_EXISTS: the repository {repository} already exists")
        return self.creations.start(self.repositories, key, {
            "name": f"projects/{project}/locations/{location}/repositories/{repository}",
            "format": "DOCKER"})

    def repository_operation(self, name: str) -> dict[str, Any]:
        self._call("repository_operation")
        return self.creations.get(self.repositories, name)

    def image_exists(self, ref: str) -> bool:
        self._call("image_exists")
        return ref in self.images
