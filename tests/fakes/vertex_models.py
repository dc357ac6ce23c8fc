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

Version aliases (google/cloud/aiplatform/v1/model.proto ``version_aliases``, unique within
a model): ``GetModel`` of ``name@ALIAS`` or ``name@VERSION`` answers that version, with
its ``versionAliases``; ``MergeVersionAliases`` POST
v1/{name@VERSION}:mergeVersionAliases {versionAliases} adds each alias and removes each
``-alias``, answering the Model. An alias another version holds
is refused (400 FAILED_PRECONDITION): the documentation does not say whether Vertex AI moves
it or refuses, and the stricter answer is the one code must survive.

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
        if "@" in name and (found := self._version(name)) is not None:
            return Response(200, found)
        return Response(404, {"error": {"code": 404, "status": "NOT_FOUND"}})

    def _version(self, reference: str) -> dict[str, Any] | None:
        """The version ``name@ID`` or ``name@ALIAS`` names, as GetModel answers it."""
        name, _, which = reference.partition("@")
        for number, model in enumerate(self.models.get(name, []), start=1):
            if which == str(number) or which in model.get("versionAliases", []):
                return {"name": name, "versionId": str(number),
                        "versionAliases": list(model.get("versionAliases", [])), **model}
        return None

    def _merge_aliases(self, reference: str, aliases: list[str]) -> Response:
        name, _, number = reference.partition("@")
        versions = self.models.get(name, [])
        if not number.isdigit() or not 1 <= int(number) <= len(versions):
            return Response(404, {"error": {"code": 404, "status": "NOT_FOUND"}})
        mine = versions[int(number) - 1].setdefault("versionAliases", [])
        for alias in aliases:
            if alias.startswith("-"):
                if alias[1:] in mine:
                    mine.remove(alias[1:])
                continue
            held = [n for n, v in enumerate(versions, start=1)
                    if alias in v.get("versionAliases", []) and n != int(number)]
            if held:
                return Response(400, {"error": {"code": 400, "status": "FAILED_PRECONDITION",
                                                "message": f"alias {alias} is used by version "
                                                           f"{held[0]}"}})
            if alias not in mine:
                mine.append(alias)
        return Response(200, self._version(reference) or {})

    def post(self, url: str, json: dict[str, Any] | None = None, **_: Any) -> Response:
        self.requests.append(("POST", url, json))
        if url.endswith(":mergeVersionAliases"):
            assert json is not None
            return self._merge_aliases(url.split("/v1/", 1)[1].removesuffix(
                ":mergeVersionAliases"), list(json["versionAliases"]))
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
