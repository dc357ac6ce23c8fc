"""Every RestGoogleApis call the pre-flight, provisioning and readiness checks make, over a real
HTTP server and a real google-auth session (a service-account key whose tokens come from
tests/fakes/oauth_token.py): the request each sends, and which fields of the answer it reads.

The server answers by (method, path) as Google's REST APIs do, per their discovery documents:
- Cloud Resource Manager v1 ``projects.get`` (``projectNumber``, a string),
  ``projects.getIamPolicy`` (POST, ``options.requestedPolicyVersion`` in the body);
- Service Usage v1 ``services.list`` (``filter``, ``pageSize``, ``pageToken``; ``services[]``
  each with ``config.name``; ``nextPageToken`` until the last page);
- Compute v1 ``regions.get`` (``quotas[]``);
- Cloud Storage JSON v1 ``buckets.getIamPolicy`` (GET ``b/BUCKET/iam``,
  ``optionsRequestedPolicyVersion``) and ``buckets.testIamPermissions`` (GET
  ``b/BUCKET/iam/testPermissions``, one ``permissions`` parameter per permission);
- Artifact Registry v1 ``repositories.create`` (POST, ``repositoryId`` in the query, a
  google.longrunning.Operation back), ``operations.get``, ``repositories.getIamPolicy`` (GET
  ``…:getIamPolicy``) and ``repositories.testIamPermissions`` (POST ``…:testIamPermissions``);
- Cloud Build v1 ``projects.locations.getDefaultServiceAccount`` (``serviceAccountEmail``,
  ``projects/P/serviceAccounts/EMAIL``; absent when the project has none);
- on the cluster's API server, Kueue's Workload list (``/apis/kueue.x-k8s.io/VERSION/workloads``,
  404 for a version Kueue does not serve) and the controllers' Deployments (their image tags).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from google.auth.transport.requests import AuthorizedSession
from google.oauth2 import service_account

from flows.backends.gke.infra.cloud import ApiDenied, ApiNotFound, RestGoogleApis
from flows.core.redaction import redact
from tests.fakes.adc_key import key_identity, write_adc_key
from tests.fakes.oauth_token import TokenEndpoint, token_endpoint
from tests.support.local_http import serving
from tests.support.net import send_json

Answer = tuple[int, Any]
Route = Callable[[dict[str, list[str]], Any], Answer]
CLUSTER = {"endpoint": "203.0.113.7", "masterAuth": {"clusterCaCertificate": "Y2E="}}


@dataclass
class Google:
    """The routes the test sets, and every request that came: (method, path, query, body,
    the Authorization header)."""

    routes: dict[tuple[str, str], Route] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, list[str]], Any, str]] = field(default_factory=list)

    def answer(self, method: str, raw_path: str, body: bytes, authorization: str) -> Answer:
        parts = urlsplit(raw_path)
        query = parse_qs(parts.query)
        decoded = json.loads(body) if body else None
        self.requests.append((method, parts.path, query, decoded, authorization))
        route = self.routes.get((method, parts.path))
        return route(query, decoded) if route else (404, {"error": {"code": 404}})


class _Rewritten(AuthorizedSession):
    """google-auth's session (it refreshes the token and sends it), with every
    https://HOST/PATH sent to the local server, the path kept."""

    def __init__(self, credentials: Any, base: str) -> None:
        super().__init__(credentials)
        self.base = base
        self.timeouts: list[Any] = []  # each call's, as the caller gave it
        self.trusted: list[bytes] = []  # the CA file each cluster call verified against

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        self.timeouts.append(kwargs.get("timeout"))
        # a cluster call verifies against the cluster's CA file: read while it exists (the
        # local server speaks plain HTTP, so the file itself is not used)
        if isinstance(verify := kwargs.pop("verify", None), str):
            self.trusted.append(Path(verify).read_bytes())
        parts = urlsplit(url)
        query = f"?{parts.query}" if parts.query else ""
        return super().request(method, f"{self.base}{parts.path}{query}", *args, **kwargs)


@pytest.fixture
def endpoint() -> Iterator[TokenEndpoint]:
    with token_endpoint() as running:
        yield running


@pytest.fixture
def google() -> Iterator[tuple[Google, str]]:
    state = Google()

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            send_json(self, *state.answer(self.command, self.path, self.rfile.read(length),
                                          self.headers.get("Authorization") or ""))

        do_GET = do_POST = _any

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield state, url


@pytest.fixture
def apis(google: tuple[Google, str], endpoint: TokenEndpoint,
         tmp_path: Path) -> Iterator[RestGoogleApis]:
    """RestGoogleApis on a service account's key, as Application Default Credentials give it.
    Every call it made had a bound: a pre-flight that waits on an unanswering API forever
    would hold the run before anything is spent, saying nothing."""
    key = write_adc_key(tmp_path / "adc.json", token_uri=endpoint.url)
    endpoint.know(*key_identity(key))
    credentials = service_account.Credentials.from_service_account_file(
        str(key), scopes=["https://www.googleapis.com/auth/cloud-platform"])
    session = _Rewritten(credentials, google[1])
    yield RestGoogleApis(session=session)
    assert all(t is not None and 0 < t <= 60 for t in session.timeouts), session.timeouts


def test_every_call_carries_the_token_the_key_was_issued(apis, google, endpoint) -> None:
    state, _ = google
    state.routes[("GET", "/v1/projects/p")] = lambda q, b: (200, {
        "projectNumber": "123456789012", "projectId": "p", "lifecycleState": "ACTIVE"})
    assert apis.project_number("p") == "123456789012"
    assert endpoint.issued and state.requests[-1][4] == f"Bearer {endpoint.issued[-1]}"


def test_the_enabled_services_are_read_from_every_page(apis, google) -> None:
    state, _ = google
    path = "/v1/projects/p/services"

    def page(query: dict[str, list[str]], _body: Any) -> Answer:
        if len(state.requests) > 3:  # a client that lost the token would ask forever
            return 400, {"error": {"code": 400, "message": "asked for page 1 again"}}
        if not 0 < int(query.get("pageSize", ["50"])[0]) <= 200:  # the API's bound
            return 400, {"error": {"code": 400, "message": "Invalid page size"}}
        if query.get("pageToken") == ["page-3"]:
            return 200, {}  # an empty page: proto3 JSON leaves the empty list out
        if query.get("pageToken") == ["page-2"]:
            return 200, {"services": [{"config": {"name": "storage.googleapis.com"},
                                       "state": "ENABLED"}], "nextPageToken": "page-3"}
        return 200, {"services": [{"config": {"name": "compute.googleapis.com"},
                                   "state": "ENABLED"},
                                  {"config": {"name": "container.googleapis.com"},
                                   "state": "ENABLED"}], "nextPageToken": "page-2"}

    state.routes[("GET", path)] = page
    assert apis.enabled_services("p") == {"compute.googleapis.com", "container.googleapis.com",
                                          "storage.googleapis.com"}
    asked = [q for m, p, q, _b, _a in state.requests if p == path]
    assert len(asked) == 3 and all(q["filter"] == ["state:ENABLED"] for q in asked)
    assert "pageToken" not in asked[0] and asked[1]["pageToken"] == ["page-2"]


def test_a_region_without_quotas_has_none(apis, google) -> None:
    state, _ = google
    path = "/compute/v1/projects/p/regions/us-east5"
    quota = {"metric": "CPUS", "limit": 24.0, "usage": 0.0}
    state.routes[("GET", path)] = lambda q, b: (200, {"name": "us-east5", "quotas": [quota]})
    assert apis.region_quotas("p", "us-east5") == [quota]
    state.routes[("GET", path)] = lambda q, b: (200, {"name": "us-east5"})
    assert apis.region_quotas("p", "us-east5") == []


def test_iam_policies_are_asked_for_in_version_3(apis, google) -> None:
    """Version 3 returns conditional bindings as they are; a lower version would refuse a
    policy that holds one (the pre-flight reads the flow identity's grants from them)."""
    state, _ = google
    policy = {"version": 3, "etag": "BwX=", "bindings": [
        {"role": "roles/storage.objectAdmin", "members": ["serviceAccount:f@p.iam.gserviceaccount.com"]}]}
    state.routes[("POST", "/v1/projects/p:getIamPolicy")] = lambda q, b: (200, policy)
    state.routes[("GET", "/storage/v1/b/bkt/iam")] = lambda q, b: (200, {
        "kind": "storage#policy", **policy})
    repository = "/v1/projects/p/locations/us-east5/repositories/repo:getIamPolicy"
    state.routes[("GET", repository)] = lambda q, b: (200, policy)
    assert apis.project_iam_policy("p")["bindings"] == policy["bindings"]
    assert apis.bucket_iam_policy("bkt")["bindings"] == policy["bindings"]
    assert apis.repository_iam_policy("p", "us-east5", "repo") == policy
    sent = {(m, p): (q, b) for m, p, q, b, _a in state.requests}
    assert sent[("POST", "/v1/projects/p:getIamPolicy")][1] == {
        "options": {"requestedPolicyVersion": 3}}
    assert sent[("GET", "/storage/v1/b/bkt/iam")][0] == {"optionsRequestedPolicyVersion": ["3"]}


def test_permission_tests_return_the_held_subset_and_a_missing_bucket_is_not_found(
        apis, google) -> None:
    state, _ = google
    wanted = ["storage.objects.get", "storage.objects.create", "storage.objects.delete"]
    bucket = "/storage/v1/b/bkt/iam/testPermissions"
    state.routes[("GET", bucket)] = lambda q, b: (200, {
        "kind": "storage#testIamPermissionsResponse",
        "permissions": [p for p in q["permissions"] if p != "storage.objects.delete"]})
    assert apis.bucket_test_iam_permissions("bkt", wanted) == set(wanted[:2])
    assert next(q for m, p, q, _b, _a in state.requests if p == bucket)["permissions"] == wanted
    state.routes[("GET", "/storage/v1/b/none/iam/testPermissions")] = lambda q, b: (200, {
        "kind": "storage#testIamPermissionsResponse"})  # none held: the field left out
    assert apis.bucket_test_iam_permissions("none", wanted) == set()
    with pytest.raises(ApiNotFound, match="/b/gone/iam/testPermissions"):
        apis.bucket_test_iam_permissions("gone", wanted)
    repository = "/v1/projects/p/locations/us-east5/repositories/repo:testIamPermissions"
    upload = "artifactregistry.repositories.uploadArtifacts"
    state.routes[("POST", repository)] = lambda q, b: (200, {"permissions": b["permissions"][:1]})
    assert apis.repository_test_iam_permissions("p", "us-east5", "repo",
                                                [upload, "artifactregistry.repositories.get"]
                                                ) == {upload}
    assert state.requests[-1][3] == {"permissions": [upload, "artifactregistry.repositories.get"]}
    state.routes[("POST", repository)] = lambda q, b: (200, {})  # none held: no field at all
    assert apis.repository_test_iam_permissions("p", "us-east5", "repo", [upload]) == set()
    state.routes[("POST", repository)] = lambda q, b: (403, {"error": {"code": 403,
                                                                       "message": "no"}})
    with pytest.raises(ApiDenied, match=r"repo:testIamPermissions: .*no"):
        apis.repository_test_iam_permissions("p", "us-east5", "repo", ["x.y.z"])


def test_the_callers_project_permissions_are_the_held_subset(apis, google) -> None:
    """Cloud Resource Manager v1 projects.testIamPermissions: POST, the permissions in the
    body, the held ones back (the field left out when none is)."""
    state, _ = google
    path = "/v1/projects/p:testIamPermissions"
    state.routes[("POST", path)] = lambda q, b: (200, {"permissions": [
        p for p in b["permissions"] if p.startswith("container.")]})
    wanted = ["container.clusters.get", "iam.serviceAccounts.actAs"]
    assert apis.test_iam_permissions("p", wanted) == {"container.clusters.get"}
    assert state.requests[-1][:2] == ("POST", path) and state.requests[-1][3] == {
        "permissions": wanted}
    state.routes[("POST", path)] = lambda q, b: (200, {})
    assert apis.test_iam_permissions("p", wanted) == set()
    with pytest.raises(ApiNotFound, match="projects/gone:testIamPermissions"):
        apis.test_iam_permissions("gone", wanted)


def test_a_repository_is_created_for_docker_and_its_operation_read_by_name(apis, google) -> None:
    state, _ = google
    operation = "projects/p/locations/us-east5/operations/6a1c"
    state.routes[("POST", "/v1/projects/p/locations/us-east5/repositories")] = \
        lambda q, b: (200, {"name": operation, "done": False})
    state.routes[("GET", f"/v1/{operation}")] = lambda q, b: (200, {
        "name": operation, "done": True, "response": {"name": "projects/p/locations/us-east5/"
                                                              "repositories/repo"}})
    assert apis.create_repository("p", "us-east5", "repo")["name"] == operation
    _m, _p, query, body, _a = state.requests[-1]
    assert query == {"repositoryId": ["repo"]} and body["format"] == "DOCKER"
    assert apis.repository_operation(operation)["done"] is True


def test_the_cloud_build_account_is_its_resource_name_or_empty(apis, google) -> None:
    state, _ = google
    path = "/v1/projects/p/locations/us-east5/defaultServiceAccount"
    account = "projects/p/serviceAccounts/123456789012-compute@developer.gserviceaccount.com"
    state.routes[("GET", path)] = lambda q, b: (200, {
        "name": "projects/p/locations/us-east5/defaultServiceAccount",
        "serviceAccountEmail": account})
    assert apis.cloud_build_account("p", "us-east5") == account
    state.routes[("GET", path)] = lambda q, b: (200, {
        "name": "projects/p/locations/us-east5/defaultServiceAccount"})
    assert apis.cloud_build_account("p", "us-east5") == ""


def _workload(name: str, **conditions: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "team-a", "name": name},
            "status": {"conditions": [{"type": kind, "status": status}
                                      for kind, status in conditions.items()]}}


def test_the_admitted_workloads_are_the_unfinished_ones_of_the_version_kueue_serves(
        apis, google) -> None:
    """A Kueue that serves only v1beta1 answers 404 for v1beta2's list; each Workload counts
    while Admitted is True and Finished is not (Kueue's workload_types.go conditions)."""
    state, _ = google
    state.routes[("GET", "/apis/kueue.x-k8s.io/v1beta1/workloads")] = lambda q, b: (200, {
        "kind": "WorkloadList", "items": [
            _workload("running", QuotaReserved="True", Admitted="True"),
            _workload("done", Admitted="True", Finished="True"),
            _workload("waiting", QuotaReserved="False", Admitted="False"),
            _workload("evicted", Admitted="False", Evicted="True"),
            {"metadata": {"namespace": "team-b", "name": "new"}}]})
    assert apis.admitted_workloads(CLUSTER) == ["team-a/running"]
    session = apis.session
    assert isinstance(session, _Rewritten) and session.trusted == [b"ca", b"ca"]
    assert [p for _m, p, *_ in state.requests] == ["/apis/kueue.x-k8s.io/v1beta2/workloads",
                                                   "/apis/kueue.x-k8s.io/v1beta1/workloads"]


def test_a_cluster_without_kueue_runs_no_workload(apis, google) -> None:
    assert apis.admitted_workloads(CLUSTER) == []


def test_the_controllers_versions_are_their_images_tags(apis, google) -> None:
    state, _ = google

    def deployment(*images: str) -> Route:
        return lambda q, b: (200, {"spec": {"template": {"spec": {"containers": [
            {"name": f"c{n}", "image": image} for n, image in enumerate(images)]}}}})

    state.routes[("GET", "/apis/apps/v1/namespaces/jobset-system/deployments/"
                         "jobset-controller-manager")] = deployment(
        "registry.k8s.io/jobset/jobset:v0.10.1@sha256:" + "a" * 64)
    state.routes[("GET", "/apis/apps/v1/namespaces/kueue-system/deployments/"
                         "kueue-controller-manager")] = deployment(
        "gcr.io/kubebuilder/kube-rbac-proxy@sha256:" + "b" * 64,
        "registry.k8s.io/kueue/kueue:v0.15.2")
    state.routes[("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                         "jobsets.jobset.x-k8s.io")] = lambda q, b: (200, {"spec": {"versions": [
        {"name": "v1alpha2", "served": True, "storage": True},
        {"name": "v1alpha1", "served": False}]}})
    assert apis.addon_versions(CLUSTER) == {"jobset": "v0.10.1", "kueue": "v0.15.2",
                                            "jobset_api_versions": ["v1alpha2"]}


def test_the_registry_token_is_the_sessions_and_is_redacted_everywhere(apis, endpoint) -> None:
    """The registry's token flow gets the session's own access token (refreshed when it has
    none yet), and from then on that token is cut out of every text the pipeline writes."""
    import base64

    token = apis._access_token()
    assert token is not None and token == endpoint.issued[-1]
    assert token not in redact(f"Authorization: Bearer {token}")
    # registered as a secret, so its other forms go too (not only its token shape)
    encoded = base64.b64encode(f"oauth2accesstoken:{token}".encode()).decode()
    assert encoded not in redact(f"Authorization: Basic {encoded}")
    assert apis._access_token() == token and len(endpoint.issued) == 1  # still valid: kept


def test_a_session_without_credentials_asks_the_registry_anonymously(google) -> None:
    import requests

    assert RestGoogleApis(session=requests.Session())._access_token() is None
