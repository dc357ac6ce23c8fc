"""Vertex AI's model service as its REST surface answers (google/cloud/aiplatform/v1/
model_service.proto of googleapis: ``GetModel`` GET v1/{name=projects/*/locations/*/models/*},
404 for a model that does not exist; ``UploadModel`` POST v1/{parent}/models:upload →
a google.longrunning.Operation {name, done} whose response is an UploadModelResponse {model,
modelVersionId}; the Operation read back with GET v1/{name}). Versions count from 1 per
model; the upload of a version names its model in ``parentModel``, a new model's in
``modelId``. ``ListModelVersions`` GET v1/{name}:listVersions → {models: [Model with name,
versionId, labels], nextPageToken}, filtered by ``labels.KEY="VALUE"`` (the filter syntax
ListModelVersionsRequest documents; only that form is modelled) and paged (pageSize, 100
unless set here, nextPageToken sent back as pageToken). Responses behave like
requests.Response (status_code, json, raise_for_status), as google.auth's AuthorizedSession
returns them.

``answers_lost``: that many uploads are carried out by the service and then their answer
never reaches the client, which sees requests' ReadTimeout (what AuthorizedSession, a
requests.Session, raises when the server is slower than the timeout): the failure a retry
must not turn into a second version."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from requests.exceptions import ReadTimeout

VERSIONS_PAGE = 100


@dataclass
class Response:
    status_code: int
    body: dict[str, Any]

    def json(self) -> dict[str, Any]:
        return self.body

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            raise RuntimeError(f"{self.status_code}: {self.body}")


@dataclass
class VertexModels:
    models: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # name → versions
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, Any] | None]] = field(default_factory=list)
    answers_lost: int = 0
    page_size: int = VERSIONS_PAGE

    def get(self, url: str, params: dict[str, Any] | None = None, **_: Any) -> Response:
        self.requests.append(("GET", url, None))
        name = url.split("/v1/", 1)[1]
        if name.endswith(":listVersions"):
            return self._versions(name.removesuffix(":listVersions"), params or {})
        if name in self.operations:
            operation = self.operations[name]
            operation["done"] = True  # done when read back
            return Response(200, dict(operation))
        if name in self.models:
            return Response(200, {"name": name, **self.models[name][-1]})
        return Response(404, {"error": {"code": 404, "status": "NOT_FOUND"}})

    def post(self, url: str, json: dict[str, Any] | None = None, **_: Any) -> Response:
        self.requests.append(("POST", url, json))
        assert url.endswith("/models:upload") and json is not None
        parent = url.split("/v1/", 1)[1].removesuffix("/models:upload")
        if "parentModel" in json:
            name = json["parentModel"]
            if name not in self.models:
                return Response(404, {"error": {"code": 404, "status": "NOT_FOUND"}})
        else:
            name = f"{parent}/models/{json['modelId']}"
            if name in self.models:
                return Response(409, {"error": {"code": 409, "status": "ALREADY_EXISTS"}})
        for required in ("displayName", "artifactUri", "containerSpec"):
            if required not in json["model"]:
                return Response(400, {"error": {"code": 400, "message": f"{required} missing"}})
        self.models.setdefault(name, []).append(json["model"])
        op = f"{parent}/operations/{len(self.operations) + 1}"
        self.operations[op] = {"name": op, "done": False, "response": {
            "@type": "type.googleapis.com/google.cloud.aiplatform.v1.UploadModelResponse",
            "model": name, "modelVersionId": str(len(self.models[name]))}}
        if self.answers_lost:
            self.answers_lost -= 1
            raise ReadTimeout(f"HTTPSConnectionPool: Read timed out. ({url})")
        return Response(200, {"name": op, "done": False})

    def _versions(self, name: str, params: dict[str, Any]) -> Response:
        if name not in self.models:
            return Response(404, {"error": {"code": 404, "status": "NOT_FOUND"}})
        versions = [{"name": name, "versionId": str(n), **model}
                    for n, model in enumerate(self.models[name], start=1)]
        if wanted := params.get("filter"):
            key, _, value = wanted.removeprefix("labels.").partition("=")
            assert wanted.startswith("labels.") and value.startswith('"'), wanted
            versions = [v for v in versions if v.get("labels", {}).get(key) == value.strip('"')]
        token = params.get("pageToken")
        start = int(base64.urlsafe_b64decode(token).decode()) if token else 0
        size = int(params.get("pageSize") or self.page_size)
        page: dict[str, Any] = {"models": versions[start:start + size]}
        if start + size < len(versions):
            page["nextPageToken"] = base64.urlsafe_b64encode(str(start + size).encode()).decode()
        return Response(200, page)
