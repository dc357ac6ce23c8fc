"""RestGoogleApis over a real HTTP server: a 404 is "not there" (None), a 403 is ApiDenied.

The server stands in for the Google endpoints by path only (the host is rewritten to it), so
the requests session, its status handling and the JSON decoding are the real ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar
from urllib.parse import urlsplit

import pytest
import requests

from flows.backends.gke.infra.cloud import ApiDenied, RestGoogleApis
from tests.support.local_http import serving
from tests.support.net import send_json

CLUSTER = "/v1/projects/p/locations/r/clusters/c"
RESERVATION = "/compute/v1/projects/p/zones/z/reservations/res"
REPOSITORY = "/v1/projects/p/locations/r/repositories/repo"
FOUND: dict[str, Any] = {CLUSTER: {"name": "c"}, RESERVATION: {"name": "res"},
                         REPOSITORY: {"name": "repo"}}


class _Handler(BaseHTTPRequestHandler):
    denied: ClassVar[set[str]] = set()

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        status, body = ((403, {"error": "denied"}) if path in self.denied
                        else (200, FOUND[path]) if path in FOUND else (404, {"error": "nope"}))
        send_json(self, status, body)

    def log_message(self, *args: Any) -> None:
        pass


class _Rewrite(requests.Session):
    """Sends every https://<google host>/<path> to the local server, path kept."""

    def __init__(self, base: str) -> None:
        super().__init__()
        self.base = base

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs.pop("verify", None)
        parts = urlsplit(url)
        return super().request(method, f"{self.base}{parts.path}", *args, **kwargs)


@pytest.fixture
def apis() -> Iterator[RestGoogleApis]:
    try:
        with serving(_Handler) as url:
            yield RestGoogleApis(session=_Rewrite(url))
    finally:
        _Handler.denied = set()


def test_found_objects_come_back_and_a_404_is_none(apis: RestGoogleApis):
    assert apis.get_cluster("p", "r", "c") == {"name": "c"}
    assert apis.get_cluster("p", "r", "other") is None
    assert apis.get_reservation("p", "z", "res") == {"name": "res"}
    assert apis.get_reservation("p", "z", "other") is None
    assert apis.get_repository("p", "r", "repo") == {"name": "repo"}
    assert apis.get_repository("p", "r", "other") is None


def test_a_cluster_without_the_controllers_reads_as_none_installed(apis: RestGoogleApis):
    cluster = {"endpoint": "203.0.113.1", "masterAuth": {"clusterCaCertificate": "Y2E="}}
    versions = apis.addon_versions(cluster)
    assert versions["jobset_api_versions"] == []
    assert all(v is None for k, v in versions.items() if k != "jobset_api_versions")
    assert apis.kueue_objects(cluster, "default", "user-queue") == {
        "local_queue": None, "cluster_queue": None, "flavors": {}}


def test_a_403_is_denied_not_absent(apis: RestGoogleApis):
    _Handler.denied = {CLUSTER}
    with pytest.raises(ApiDenied):
        apis.get_cluster("p", "r", "c")
