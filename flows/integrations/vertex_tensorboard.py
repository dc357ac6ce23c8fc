"""The run's training curves into a Vertex AI TensorBoard experiment, when the
profile names one (``tracking.tensorboard.vertex_tensorboard``).

Over Vertex AI's TensorboardService REST surface (googleapis google/cloud/aiplatform/v1/
tensorboard_service.proto and tensorboard_data.proto): create the experiment
(``POST {tensorboard}/experiments?tensorboardExperimentId=``; 409 when it exists) and the
run (``POST {experiment}/runs?tensorboardRunId=``), one SCALAR time series per tag
(``POST {run}/timeSeries`` {displayName, valueType}; a display name the run has is 409),
the run's series read first (``GET {run}/timeSeries``, every page: the service returns 50
a page unless asked otherwise and the rest behind ``nextPageToken``, which is sent back as
``pageToken`` until none comes, as the SDK's ListTensorboardTimeSeriesPager does), then the
points
(``POST {run}:write`` {timeSeriesData: [{tensorboardTimeSeriesId, valueType, values:
[{step, wallTime, scalar: {value}}]}]}, at most 5000 points a request). The points are the
result's per-step metrics, decoded from the same event files the run page reads; repeated
writes of a step overwrite it, so a retried upload changes nothing.
"""

from __future__ import annotations

import re
from typing import Any

from flows.config.tracking import TensorBoardTracking
from flows.integrations.vertex_registry import authorized_session
from flows.run.result import PipelineResult

MAX_POINTS = 5000
_ID = re.compile(r"[^a-z0-9-]")


def resource_id(text: str) -> str:
    """An experiment or run id: [a-z0-9-], at most 128 characters. Pure."""
    return _ID.sub("-", text.lower()).strip("-")[:128] or "run"


def series_points(result: PipelineResult, wall_time: str) -> dict[str, list[dict[str, Any]]]:
    """{tag: [TimeSeriesDataPoint]} from the result's per-step metrics. Pure."""
    points: dict[str, list[dict[str, Any]]] = {}
    for row in result.metrics.get("steps", []):
        for tag, value in row.items():
            if tag != "step" and isinstance(value, int | float):
                points.setdefault(tag, []).append({"step": str(int(row["step"])),
                                                   "wallTime": wall_time,
                                                   "scalar": {"value": float(value)}})
    return points


def upload_run(config: TensorBoardTracking, profile: str, run_name: str,
               result: PipelineResult, session: Any = None) -> str:
    """The TensorboardRun's resource name the curves were written to."""
    assert config.vertex_tensorboard is not None
    session = session or authorized_session()
    location = config.vertex_tensorboard.split("/")[3]
    api = f"https://{location}-aiplatform.googleapis.com/v1"
    experiment = f"{config.vertex_tensorboard}/experiments/" + resource_id(
        config.experiment or profile)
    _create(session, f"{api}/{config.vertex_tensorboard}/experiments",
            {"tensorboardExperimentId": experiment.rsplit("/", 1)[1]}, {"displayName": profile})
    run = f"{experiment}/runs/{resource_id(run_name)}"
    _create(session, f"{api}/{experiment}/runs", {"tensorboardRunId": run.rsplit("/", 1)[1]},
            {"displayName": run_name})
    series = {s["displayName"]: s["name"].rsplit("/", 1)[1]
              for s in _every_series(session, f"{api}/{run}/timeSeries")}
    data = []
    for tag, points in series_points(result, result.finished_at).items():
        if tag not in series:
            made = session.post(f"{api}/{run}/timeSeries",
                                json={"displayName": tag, "valueType": "SCALAR"})
            made.raise_for_status()
            series[tag] = made.json()["name"].rsplit("/", 1)[1]
        data += [(series[tag], points[i:i + MAX_POINTS])
                 for i in range(0, len(points), MAX_POINTS)]
    batch: list[dict[str, Any]] = []
    for series_id, points in data:
        if batch and sum(len(d["values"]) for d in batch) + len(points) > MAX_POINTS:
            _write(session, f"{api}/{run}:write", batch)
            batch = []
        batch.append({"tensorboardTimeSeriesId": series_id, "valueType": "SCALAR",
                      "values": points})
    if batch:
        _write(session, f"{api}/{run}:write", batch)
    return run


def _create(session: Any, url: str, params: dict[str, str], body: dict[str, Any]) -> None:
    response = session.post(url, params=params, json=body)
    if response.status_code != 409:  # already there: a rerun or a retry
        response.raise_for_status()


def _every_series(session: Any, url: str) -> list[dict[str, Any]]:
    """Every page of the run's time series; a retry that saw only the first 50 would create
    the 51st again, which the service refuses."""
    found: list[dict[str, Any]] = []
    params: dict[str, str] = {}
    while True:
        page = session.get(url, params=params)
        page.raise_for_status()
        body = page.json()
        found += body.get("tensorboardTimeSeries", [])
        if not (token := body.get("nextPageToken")):
            return found
        params = {"pageToken": token}


def _write(session: Any, url: str, batch: list[dict[str, Any]]) -> None:
    session.post(url, json={"timeSeriesData": batch}).raise_for_status()
