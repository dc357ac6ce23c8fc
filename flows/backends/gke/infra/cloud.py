"""The one seam to Google's APIs: every cloud *read* of flows/backends/gke/infra goes through ``GoogleApis``.

Why a seam of plain dicts: pre-flight checks and the "is the cluster already right?" decision
are pure functions of what these calls return, so tests fake this small protocol (and only
this) while the decisions run for real. The production implementation speaks the public REST
APIs with Application Default Credentials (google-auth, already a dependency of
google-cloud-storage), so no client library per API is needed. Writes go through gcloud /
gcluster (flows/backends/gke/infra/commands.py) or google-cloud-storage (flows/backends/gke/infra/bucket.py).
"""

from __future__ import annotations

import base64
import contextlib
import re
import tempfile
from collections.abc import Iterator
from typing import Any, Protocol

from flows.backends.gke.infra.preflight.team_queues import (
    KUEUE_MANAGER_CONFIG,
    KUEUE_MANAGER_CONFIG_KEY,
    KUEUE_SYSTEM,
)
from flows.backends.gke.watch.kueue import KUEUE_VERSIONS  # one order for watch and pre-flight
from flows.core.redaction import register
from flows.core.retry import RetryPolicy

ADDONS = {  # what to read on the cluster: (namespace, deployment) of each controller
    "jobset": ("jobset-system", "jobset-controller-manager"),
    "kueue": ("kueue-system", "kueue-controller-manager"),
}
JOBSET_CRD = "jobsets.jobset.x-k8s.io"

def running_workloads(workloads: list[dict[str, Any]]) -> list[str]:
    """``namespace/name`` of each Workload whose ``Admitted`` condition is True and whose
    ``Finished`` is not (Kueue's workload_types.go conditions). Pure."""
    def true(workload: dict[str, Any], kind: str) -> bool:
        return any(c.get("type") == kind and c.get("status") == "True"
                   for c in (workload.get("status") or {}).get("conditions") or [])
    return sorted(f"{(w.get('metadata') or {}).get('namespace')}/"
                  f"{(w.get('metadata') or {}).get('name')}" for w in workloads
                  if true(w, "Admitted") and not true(w, "Finished"))


class ApiNotFound(LookupError):
    """The resource does not exist (HTTP 404)."""


class ApiDenied(PermissionError):
    """The caller may not read it (HTTP 403)."""


class GoogleApis(Protocol):
    def project_number(self, project: str) -> str: ...
    def enabled_services(self, project: str) -> set[str]: ...
    def get_cluster(self, project: str, location: str, cluster: str) -> dict[str, Any] | None: ...
    def get_reservation(self, project: str, zone: str, name: str) -> dict[str, Any] | None: ...
    def region_quotas(self, project: str, region: str) -> list[dict[str, Any]]: ...
    def zones_offering(self, project: str, machine_type: str) -> set[str]:
        """The zones whose Compute Engine lists ``machine_type`` (``gcloud compute
        machine-types list --filter=name=MACHINE``): where a pool of it can exist at all."""
        ...
    def project_iam_policy(self, project: str) -> dict[str, Any]: ...
    def bucket_iam_policy(self, bucket: str) -> dict[str, Any]: ...
    def addon_versions(self, cluster: dict[str, Any]) -> dict[str, Any]:
        """{"jobset": "v0.10.1" | None, "jobset_api_versions": [...], "kueue": "v0.15.2" | None}"""
        ...
    def kueue_objects(self, cluster: dict[str, Any], namespace: str,
                      local_queue: str) -> dict[str, Any]:
        """The live Kueue objects jobs are admitted by: {"local_queue": obj | None,
        "cluster_queue": obj | None, "flavors": {name: obj}} (Kubernetes API objects)."""
        ...
    def admitted_workloads(self, cluster: dict[str, Any]) -> list[str]:
        """Kueue's Workloads of every namespace that are admitted and not finished
        (``namespace/name``): what runs now under Kueue, which a reinstall of Kueue
        would stop."""
        ...
    def test_iam_permissions(self, project: str, permissions: list[str]) -> set[str]:
        """The subset of ``permissions`` the caller holds on the project."""
        ...
    def get_repository(self, project: str, location: str,
                       repository: str) -> dict[str, Any] | None: ...
    def create_repository(self, project: str, location: str, repository: str) -> dict[str, Any]:
        """Create a DOCKER-format Artifact Registry repository (the one write of this seam):
        the google.longrunning.Operation that creates it."""
        ...
    def repository_operation(self, name: str) -> dict[str, Any]:
        """The operation ``create_repository`` answered, as it stands now (GetOperation)."""
        ...
    def image_exists(self, ref: str) -> bool:
        """Whether ``host/path:tag`` resolves to a manifest in its registry."""
        ...
    def cloud_build_account(self, project: str, location: str) -> str:
        """Cloud Build's default service account (``projects/P/serviceAccounts/EMAIL``, or
        "" when none is set)."""
        ...
    def repository_iam_policy(self, project: str, location: str,
                              repository: str) -> dict[str, Any]: ...
    def bucket_test_iam_permissions(self, bucket: str, permissions: list[str]) -> set[str]:
        """The subset of ``permissions`` the caller holds on the bucket, inherited from the
        project or granted on the bucket (ApiNotFound when there is no such bucket)."""
        ...
    def repository_test_iam_permissions(self, project: str, location: str, repository: str,
                                        permissions: list[str]) -> set[str]:
        """The same on an Artifact Registry repository (ApiNotFound when it is missing)."""
        ...


def image_version(image: str) -> str | None:
    """``registry.k8s.io/kueue/kueue:v0.15.2@sha256:…`` → ``v0.15.2``."""
    match = re.search(r":(v?\d+\.\d+(?:\.\d+)?[^@/]*)(?:@|$)", image)
    return match.group(1) if match else None


class RestGoogleApis:
    """GoogleApis over the public REST endpoints with Application Default Credentials."""

    def __init__(self, session: Any | None = None) -> None:
        if session is None:
            import google.auth
            from google.auth.transport.requests import AuthorizedSession

            credentials, _ = google.auth.default(
                scopes=["https://www.googleapis.com/auth/cloud-platform"])
            session = AuthorizedSession(credentials)
        self.session = session

    def _get(self, url: str, **kwargs: Any) -> dict[str, Any]:
        response = self.session.get(url, timeout=30, **kwargs)
        return self._json(response, url)

    def _get_or_none(self, url: str, **kwargs: Any) -> dict[str, Any] | None:
        """A GET whose 404 means "not there" (a cluster, reservation, repository, object)."""
        try:
            return self._get(url, **kwargs)
        except ApiNotFound:
            return None

    @staticmethod
    def _json(response: Any, url: str) -> dict[str, Any]:
        if response.status_code == 404:
            raise ApiNotFound(url)
        if response.status_code == 403:
            raise ApiDenied(f"{url}: {response.text[:300]}")
        response.raise_for_status()
        return response.json()

    def project_number(self, project: str) -> str:
        url = f"https://cloudresourcemanager.googleapis.com/v1/projects/{project}"
        return str(self._get(url)["projectNumber"])

    def enabled_services(self, project: str) -> set[str]:
        url = f"https://serviceusage.googleapis.com/v1/projects/{project}/services"
        names: set[str] = set()
        token = None
        while True:
            params = {"filter": "state:ENABLED", "pageSize": 200}
            if token:
                params["pageToken"] = token
            page = self._get(url, params=params)
            names |= {s["config"]["name"] for s in page.get("services", [])}
            token = page.get("nextPageToken")
            if not token:
                return names

    def get_cluster(self, project: str, location: str, cluster: str) -> dict[str, Any] | None:
        url = (f"https://container.googleapis.com/v1/projects/{project}/locations/{location}/"
               f"clusters/{cluster}")
        return self._get_or_none(url)

    def get_reservation(self, project: str, zone: str, name: str) -> dict[str, Any] | None:
        url = (f"https://compute.googleapis.com/compute/v1/projects/{project}/zones/{zone}/"
               f"reservations/{name}")
        return self._get_or_none(url)

    def region_quotas(self, project: str, region: str) -> list[dict[str, Any]]:
        url = f"https://compute.googleapis.com/compute/v1/projects/{project}/regions/{region}"
        return list(self._get(url).get("quotas", []))

    def zones_offering(self, project: str, machine_type: str) -> set[str]:
        # compute v1 machineTypes.aggregatedList: items is keyed "zones/ZONE", each scope
        # with its machineTypes or, where the filter matched none, a NO_RESULTS_ON_PAGE
        # warning instead; paged by nextPageToken
        url = (f"https://compute.googleapis.com/compute/v1/projects/{project}/aggregated/"
               "machineTypes")
        zones: set[str] = set()
        token = None
        while True:
            params = {"filter": f"name = {machine_type}", "maxResults": 500}
            if token:
                params["pageToken"] = token
            page = self._get(url, params=params)
            for scope, found in (page.get("items") or {}).items():
                if any(m.get("name") == machine_type for m in found.get("machineTypes") or []):
                    zones.add(scope.removeprefix("zones/"))
            token = page.get("nextPageToken")
            if not token:
                return zones

    def project_iam_policy(self, project: str) -> dict[str, Any]:
        url = f"https://cloudresourcemanager.googleapis.com/v1/projects/{project}:getIamPolicy"
        response = self.session.post(url, json={"options": {"requestedPolicyVersion": 3}},
                                     timeout=30)
        return self._json(response, url)

    def bucket_iam_policy(self, bucket: str) -> dict[str, Any]:
        return self._get(f"https://storage.googleapis.com/storage/v1/b/{bucket}/iam",
                         params={"optionsRequestedPolicyVersion": 3})

    @contextlib.contextmanager
    def _kube(self, cluster: dict[str, Any]) -> Iterator[Any]:
        """A GET on the cluster's API server (its CA from the GKE API): path → object | None."""
        ca = base64.b64decode(cluster["masterAuth"]["clusterCaCertificate"])
        with tempfile.NamedTemporaryFile(suffix=".crt") as ca_file:
            ca_file.write(ca)
            ca_file.flush()
            base = f"https://{cluster['endpoint']}"

            yield lambda path: self._get_or_none(base + path, verify=ca_file.name)

    def addon_versions(self, cluster: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        with self._kube(cluster) as get:
            for name, (namespace, deployment) in ADDONS.items():
                found = get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}")
                spec = found["spec"]["template"]["spec"] if found else {}
                images = [c.get("image", "") for c in spec.get("containers", [])]
                out[name] = next((v for i in images if (v := image_version(i))), None)
            crd = get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{JOBSET_CRD}")
            out["jobset_api_versions"] = [v["name"] for v in crd["spec"]["versions"]
                                          if v.get("served")] if crd else []
        return out

    def kueue_objects(self, cluster: dict[str, Any], namespace: str,
                      local_queue: str) -> dict[str, Any]:
        with self._kube(cluster) as get:
            for version in KUEUE_VERSIONS:
                api = f"/apis/kueue.x-k8s.io/{version}"
                if get(api) is None:
                    continue
                lq = get(f"{api}/namespaces/{namespace}/localqueues/{local_queue}")
                cq_name = ((lq or {}).get("spec") or {}).get("clusterQueue")
                cq = get(f"{api}/clusterqueues/{cq_name}") if cq_name else None
                flavors = {}
                for group in ((cq or {}).get("spec") or {}).get("resourceGroups") or []:
                    for flavor in group.get("flavors") or []:
                        if (found := get(f"{api}/resourceflavors/{flavor['name']}")) is not None:
                            flavors[flavor["name"]] = found
                # Kueue's own configuration: whether fair sharing is on (team_queues.py)
                config_map = get(f"/api/v1/namespaces/{KUEUE_SYSTEM}/configmaps/"
                                 f"{KUEUE_MANAGER_CONFIG}")
                manager_config = ((config_map or {}).get("data") or {}).get(
                    KUEUE_MANAGER_CONFIG_KEY)
                return {"local_queue": lq, "cluster_queue": cq, "flavors": flavors,
                        "manager_config": manager_config}
        return {"local_queue": None, "cluster_queue": None, "flavors": {}}

    def admitted_workloads(self, cluster: dict[str, Any]) -> list[str]:
        with self._kube(cluster) as get:
            for version in KUEUE_VERSIONS:
                found = get(f"/apis/kueue.x-k8s.io/{version}/workloads")
                if found is not None:
                    return running_workloads(found.get("items") or [])
        return []

    def test_iam_permissions(self, project: str, permissions: list[str]) -> set[str]:
        url = (f"https://cloudresourcemanager.googleapis.com/v1/projects/{project}"
               ":testIamPermissions")
        response = self.session.post(url, json={"permissions": permissions}, timeout=30)
        return set(self._json(response, url).get("permissions", []))

    def _repository_url(self, project: str, location: str) -> str:
        return (f"https://artifactregistry.googleapis.com/v1/projects/{project}/locations/"
                f"{location}/repositories")

    def get_repository(self, project: str, location: str,
                       repository: str) -> dict[str, Any] | None:
        return self._get_or_none(f"{self._repository_url(project, location)}/{repository}")

    def create_repository(self, project: str, location: str, repository: str) -> dict[str, Any]:
        url = self._repository_url(project, location)
        response = self.session.post(url, params={"repositoryId": repository}, timeout=60,
                                     json={"format": "DOCKER", "description":
                                           "tpurl post-training images"})
        return self._json(response, url)  # an Operation: image/repository.py waits for it

    def repository_operation(self, name: str) -> dict[str, Any]:
        # artifactregistry_v1.yaml: google.longrunning.Operations.GetOperation at
        # get /v1/{name=projects/*/locations/*/operations/*}
        return self._get(f"https://artifactregistry.googleapis.com/v1/{name}")

    def image_exists(self, ref: str) -> bool:
        """Asked through the one registry HEAD client (image/registry_http.py, the image
        stage's too), once: pre-flight reports a failure as a fact, it does not retry."""
        from flows.backends.gke.image.registry_http import RegistryApi

        return RegistryApi(self._access_token).digest(ref, RetryPolicy(attempts=1)) is not None

    def _access_token(self) -> str | None:
        """This session's Google access token, for the registry's token flow (None for a
        session without credentials: the registry is asked anonymously)."""
        credentials = getattr(self.session, "credentials", None)
        if credentials is None:
            return None
        if not credentials.valid:
            from google.auth.transport.requests import Request

            credentials.refresh(Request())
        register(str(credentials.token))  # out of every text, as the HF token is
        return str(credentials.token)

    def cloud_build_account(self, project: str, location: str) -> str:
        url = (f"https://cloudbuild.googleapis.com/v1/projects/{project}/locations/{location}/"
               "defaultServiceAccount")  # projects.locations.getDefaultServiceAccount
        return str(self._get(url).get("serviceAccountEmail") or "")

    def repository_iam_policy(self, project: str, location: str,
                              repository: str) -> dict[str, Any]:
        url = f"{self._repository_url(project, location)}/{repository}:getIamPolicy"
        return self._get(url)

    def bucket_test_iam_permissions(self, bucket: str, permissions: list[str]) -> set[str]:
        # storage JSON API buckets.testIamPermissions (google-cloud-storage's
        # Bucket.test_iam_permissions: GET {bucket}/iam/testPermissions?permissions=...)
        url = f"https://storage.googleapis.com/storage/v1/b/{bucket}/iam/testPermissions"
        return set(self._get(url, params={"permissions": permissions}).get("permissions", []))

    def repository_test_iam_permissions(self, project: str, location: str, repository: str,
                                        permissions: list[str]) -> set[str]:
        # Artifact Registry v1 projects.locations.repositories.testIamPermissions
        url = f"{self._repository_url(project, location)}/{repository}:testIamPermissions"
        response = self.session.post(url, json={"permissions": permissions}, timeout=30)
        return set(self._json(response, url).get("permissions", []))
