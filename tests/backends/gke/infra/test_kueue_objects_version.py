"""Pre-flight reads Kueue's queues at the version the cluster serves, v1beta2 first, the same
order as the watch (KUEUE_VERSIONS in flows/backends/gke/watch/kueue.py): the
real RestGoogleApis.kueue_objects against the fake Kubernetes API, which serves only the
versions it is told to and 404s the others, as an API server does for an unserved CRD
version. The session routes the cluster endpoint to the fake (no TLS here)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from flows.backends.gke.infra.cloud import RestGoogleApis
from tests.fakes.kube_api import FakeApiServer, FakeKube

ENDPOINT = "cluster.invalid"
CLUSTER = {"endpoint": ENDPOINT,
           "masterAuth": {"clusterCaCertificate": base64.b64encode(b"not a CA").decode()}}


class Routed:
    """The one thing RestGoogleApis needs of an AuthorizedSession here: get()."""

    def __init__(self, url: str) -> None:
        self.url, self.session = url, requests.Session()

    def get(self, url: str, timeout: float = 30, verify: Any = None, **kwargs: Any) -> Any:
        return self.session.get(url.replace(f"https://{ENDPOINT}", self.url), timeout=timeout,
                                **kwargs)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    kube = FakeKube()
    kube.create("localqueues", "default", {"metadata": {"name": "user-queue"},
                                           "spec": {"clusterQueue": "cluster-queue"}})
    kube.create("clusterqueues", "", {"metadata": {"name": "cluster-queue"}, "spec": {
        "resourceGroups": [{"coveredResources": ["google.com/tpu"],
                            "flavors": [{"name": "tpu", "resources": []}]}]}})
    kube.create("resourceflavors", "", {"metadata": {"name": "tpu"}, "spec": {}})
    with FakeApiServer(kube) as srv:
        yield srv


@pytest.mark.parametrize("served", [("v1beta2", "v1beta1"), ("v1beta2",), ("v1beta1",)])
def test_preflight_reads_the_queues_at_the_served_version(server: FakeApiServer,
                                                          served: tuple[str, ...]) -> None:
    server.kube.served["kueue.x-k8s.io"] = served
    found = RestGoogleApis(Routed(server.url)).kueue_objects(CLUSTER, "default", "user-queue")
    assert found["local_queue"]["spec"]["clusterQueue"] == "cluster-queue"
    assert found["cluster_queue"] is not None and set(found["flavors"]) == {"tpu"}
    want = "v1beta2" if "v1beta2" in served else "v1beta1"
    reads = [p for _, _, p in server.kube.requests if "/localqueues/" in p or "queues/" in p]
    assert reads and all(f"/apis/kueue.x-k8s.io/{want}/" in p for p in reads), reads
