"""Vertex AI's TensorboardService as its REST surface answers (googleapis google/cloud/
aiplatform/v1/tensorboard_service.proto: CreateTensorboardExperiment POST
v1/{parent=…/tensorboards/*}/experiments?tensorboardExperimentId= and CreateTensorboardRun
POST v1/{parent=…/experiments/*}/runs?tensorboardRunId=, each 409 ALREADY_EXISTS when the id
is taken; CreateTensorboardTimeSeries POST v1/{parent=…/runs/*}/timeSeries, the server
choosing the id; ListTensorboardTimeSeries GET v1/{parent}/timeSeries;
WriteTensorboardRunData POST v1/{tensorboard_run=…/runs/*}:write, at most 5000 points, a
repeated step overwriting the point). Responses behave like requests.Response."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.fakes.vertex_models import Response


@dataclass
class VertexTensorboard:
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    points: dict[str, dict[int, float]] = field(default_factory=dict)  # series name → step → v
    writes: list[dict[str, Any]] = field(default_factory=list)

    def get(self, url: str, **_: Any) -> Response:
        parent = url.split("/v1/", 1)[1].removesuffix("/timeSeries")
        found = [r for name, r in self.resources.items()
                 if name.startswith(f"{parent}/timeSeries/")]
        return Response(200, {"tensorboardTimeSeries": found})

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
