"""Vertex AI's TensorboardService as its REST surface answers (googleapis google/cloud/
aiplatform/v1/tensorboard_service.proto: CreateTensorboardExperiment POST
v1/{parent=…/tensorboards/*}/experiments?tensorboardExperimentId= and CreateTensorboardRun
POST v1/{parent=…/experiments/*}/runs?tensorboardRunId=, each 409 ALREADY_EXISTS when the id
is taken; CreateTensorboardTimeSeries POST v1/{parent=…/runs/*}/timeSeries, the server
choosing the id, 409 ALREADY_EXISTS for a display name the run already has (the aiplatform
SDK's uploader relies on it: google/cloud/aiplatform/tensorboard/uploader_utils.py
TimeSeriesResourceManager.get_or_create catches AlreadyExists and lists by display name);
ListTensorboardTimeSeries GET v1/{parent}/timeSeries, paged: "If unspecified, at most 50
TensorboardTimeSeries are returned. The maximum value is 1000; values above 1000 are
coerced to 1000", the rest behind ``nextPageToken``, sent back as ``pageToken`` (the
ListTensorboardTimeSeriesRequest of tensorboard_service.proto; the SDK's
ListTensorboardTimeSeriesPager follows ``next_page_token`` until it is empty);
WriteTensorboardRunData POST v1/{tensorboard_run=…/runs/*}:write, at most 5000 points, a
repeated step overwriting the point). Responses behave like requests.Response."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.vertex_models import Response

DEFAULT_PAGE = 50
MAX_PAGE = 1000


@dataclass
class VertexTensorboard:
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    points: dict[str, dict[int, float]] = field(default_factory=dict)  # series name → step → v
    writes: list[dict[str, Any]] = field(default_factory=list)

    lists: int = 0

    def get(self, url: str, params: dict[str, Any] | None = None, **_: Any) -> Response:
        self.lists += 1
        parent = url.split("/v1/", 1)[1].removesuffix("/timeSeries")
        found = [r for name, r in self.resources.items()
                 if name.startswith(f"{parent}/timeSeries/")]
        params = params or {}
        size = min(int(params.get("pageSize") or DEFAULT_PAGE), MAX_PAGE)
        token = params.get("pageToken")
        start = int(base64.urlsafe_b64decode(token).decode()) if token else 0
        page: dict[str, Any] = {"tensorboardTimeSeries": found[start:start + size]}
        if start + size < len(found):
            page["nextPageToken"] = base64.urlsafe_b64encode(str(start + size).encode()).decode()
        return Response(200, page)

    def post(self, url: str, params: dict[str, str] | None = None,
             json: dict[str, Any] | None = None, **_: Any) -> Response:
        path = url.split("/v1/", 1)[1]
        body = dict(json or {})
        if path.endswith(":write"):
            run = path.removesuffix(":write")
            data = body["timeSeriesData"]
            if sum(len(d["values"]) for d in data) > 5000:
                return Response(400, {"error": {"message": "more than 5000 points"}})
            for series in data:
                name = f"{run}/timeSeries/{series['tensorboardTimeSeriesId']}"
                if name not in self.resources or series["valueType"] != "SCALAR":
                    return Response(400, {"error": {"message": f"bad series {name}"}})
                for point in series["values"]:
                    self.points.setdefault(name, {})[int(point["step"])] = (
                        point["scalar"]["value"])
            self.writes.append(body)
            return Response(200, {})
        if path.endswith("/timeSeries"):
            if body.get("valueType") != "SCALAR" or not body.get("displayName"):
                return Response(400, {"error": {"message": "displayName and valueType"}})
            if any(n.startswith(f"{path}/") and r.get("displayName") == body["displayName"]
                   for n, r in self.resources.items()):
                return Response(409, {"error": {"status": "ALREADY_EXISTS"}})
            name = f"{path}/{len(self.resources) + 1000}"
            self.resources[name] = {"name": name, **body}
            return Response(200, self.resources[name])
        key = {"experiments": "tensorboardExperimentId", "runs": "tensorboardRunId"}[
            path.rsplit("/", 1)[1]]
        name = f"{path}/{(params or {})[key]}"
        if name in self.resources:
            return Response(409, {"error": {"status": "ALREADY_EXISTS"}})
        parent = path.rsplit("/", 1)[0]
        if "/experiments/" in parent and parent not in self.resources:
            return Response(404, {"error": {"status": "NOT_FOUND"}})
        self.resources[name] = {"name": name, **body}
        return Response(200, self.resources[name])
