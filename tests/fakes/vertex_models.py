"""Vertex AI's model service as its REST surface answers (google/cloud/aiplatform/v1/
model_service.proto of googleapis: ``GetModel`` GET v1/{name=projects/*/locations/*/models/*},
404 for a model that does not exist; ``UploadModel`` POST v1/{parent}/models:upload →
a google.longrunning.Operation {name, done} whose response is an UploadModelResponse {model,
modelVersionId}; the Operation read back with GET v1/{name}). Versions count from 1 per
model; the upload of a version names its model in ``parentModel``, a new model's in
``modelId``. Responses behave like requests.Response (status_code, json, raise_for_status),
as google.auth's AuthorizedSession returns them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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

    def get(self, url: str, **_: Any) -> Response:
        self.requests.append(("GET", url, None))
        name = url.split("/v1/", 1)[1]
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
        return Response(200, {"name": op, "done": False})
