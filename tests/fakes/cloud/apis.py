"""The fake GoogleApis (the seam of flows/backends/gke/infra/cloud.py): reads the same state file the fake
gcloud/gcluster executables write, plus facts a test sets (services, reservation, quotas)."""

from __future__ import annotations

import copy
from typing import Any

from flows.backends.gke.infra.preflight import REQUIRED_APIS
from tests.fakes.cloud import fakecloud_state as fc


class FakeGoogleApis:
    def __init__(self) -> None:
        self.number = "0"  # fake-gcs-server reports projectNumber 0
        self.services: set[str] = set(REQUIRED_APIS)
        self.reservation: dict[str, Any] | None = {
            "name": "my-v6e-res", "status": "READY", "specificReservationRequired": True,
            "specificReservation": {"count": "8", "inUseCount": "0", "instanceProperties": {
                "machineType": "ct6e-standard-4t"}}}
        self.quotas: list[dict[str, Any]] = [
            {"metric": "TPU_V6E_SLICE_CHIPS", "limit": 64.0, "usage": 0.0},
            {"metric": "CPUS", "limit": 1000.0, "usage": 10.0}]
        self.addons: dict[str, Any] = {"jobset": "v0.10.1", "jobset_api_versions": ["v1alpha2"],
                                       "kueue": "v0.15.2"}
        self.denied: set[str] = set()  # method names that raise PermissionError
        self.calls: list[str] = []

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
        res = self.reservation
        return copy.deepcopy(res) if res and res.get("name") == name else None

    def region_quotas(self, project: str, region: str) -> list[dict[str, Any]]:
        self._call("region_quotas")
        return copy.deepcopy(self.quotas)

    def project_iam_policy(self, project: str) -> dict[str, Any]:
        self._call("project_iam_policy")
        return fc.load()["project_policy"]

    def bucket_iam_policy(self, bucket: str) -> dict[str, Any]:
        self._call("bucket_iam_policy")
        return fc.load()["bucket_policies"].get(bucket, {"bindings": []})

    def addon_versions(self, cluster: dict[str, Any]) -> dict[str, Any]:
        self._call("addon_versions")
        return dict(self.addons)
