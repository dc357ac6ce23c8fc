"""The event directory linked from the run page and the result, and the curves
uploaded to a Vertex AI TensorBoard experiment at its client seam."""

from __future__ import annotations

from flows.config import load_profile
from flows.integrations.vertex_tensorboard import MAX_POINTS, upload_run
from flows.run.result import PipelineResult
from flows.runpage.artifacts import tracking_links
from tests.fakes.vertex_tensorboard import DEFAULT_PAGE, VertexTensorboard

BOARD = "projects/my-proj-123/locations/us-east5/tensorboards/42"


def _result(steps: int, logdir: str = "gs://bucket/trained/rl-k") -> PipelineResult:
    return PipelineResult(
        profile="smoke", backend="gke", artifacts={}, stages=[], chip_hours=0.0, wall_s=1.0,
        metrics={"steps": [{"step": s, "actor/train/loss": 1 / s, "rewards/train/mean": None}
                           for s in range(1, steps + 1)]},
        tensorboard_logdir=logdir, tracking={"mlflow": "http://mlflow:5000/#/experiments/1/runs/x"},
        started_at="2026-12-03T10:00:00+00:00", finished_at="2026-12-03T10:05:00+00:00")


def test_the_run_page_links_the_event_directory_and_the_trackers() -> None:
    links = tracking_links(_result(2))
    assert links["tensorboard"][0] == ("https://console.cloud.google.com/storage/browser/"
                                       "bucket/trained/rl-k")
    assert "tensorboard --logdir gs://bucket/trained/rl-k" in links["tensorboard"][1]
    assert links["mlflow"][0] == "http://mlflow:5000/#/experiments/1/runs/x"
    assert tracking_links(_result(1, "file:///r/rl-k"))["tensorboard"][0] == "file:///r/rl-k"


def test_the_curves_go_to_a_vertex_tensorboard_experiment_and_a_retry_changes_nothing() -> None:
    profile = load_profile("rehearsal", {"tracking.tensorboard.vertex_tensorboard": BOARD})
    config = profile.tracking.tensorboard
    service = VertexTensorboard()
    steps = MAX_POINTS + 7  # more points than one write takes
    run = upload_run(config, "smoke", "smoke-20261203-100000", _result(steps), service)
    assert run == f"{BOARD}/experiments/smoke/runs/smoke-20261203-100000"
    [series] = [r for name, r in service.resources.items() if "/timeSeries/" in name]
    assert series["displayName"] == "actor/train/loss"  # the None-valued tag has no points
    assert service.points[series["name"]] == {s: 1 / s for s in range(1, steps + 1)}
    writes = len(service.writes)
    assert writes == 2
    upload_run(config, "smoke", "smoke-20261203-100000", _result(steps), service)  # a retry
    assert len([n for n in service.resources if "/timeSeries/" in n]) == 1
    assert service.points[series["name"]] == {s: 1 / s for s in range(1, steps + 1)}


def _many_tags(steps: int, tags: int) -> PipelineResult:
    return PipelineResult(
        profile="smoke", backend="gke", artifacts={}, stages=[], chip_hours=0.0, wall_s=1.0,
        metrics={"steps": [{"step": s, **{f"tag/{t:03d}": t + 1 / s for t in range(tags)}}
                           for s in range(1, steps + 1)]},
        tensorboard_logdir="gs://bucket/trained/rl-k", tracking={},
        started_at="2026-12-03T10:00:00+00:00", finished_at="2026-12-03T10:05:00+00:00")


def test_more_series_than_one_page_are_all_found_again_by_a_retry() -> None:
    """A run with more tags than the service lists on one page (50): a retried upload reads
    every page, so it neither creates a series twice (refused) nor loses a point."""
    profile = load_profile("rehearsal", {"tracking.tensorboard.vertex_tensorboard": BOARD})
    config = profile.tracking.tensorboard
    service = VertexTensorboard()
    tags = 2 * DEFAULT_PAGE + 7
    upload_run(config, "smoke", "smoke-20261203-100000", _many_tags(3, tags), service)
    made = {r["displayName"]: n for n, r in service.resources.items() if "/timeSeries/" in n}
    assert len(made) == tags
    lists = service.lists
    upload_run(config, "smoke", "smoke-20261203-100000", _many_tags(3, tags), service)  # retry
    assert service.lists - lists == 3  # pages of 50, 50 and 7
    again = {r["displayName"]: n for n, r in service.resources.items() if "/timeSeries/" in n}
    assert again == made
    assert all(service.points[made[f"tag/{t:03d}"]] == {s: t + 1 / s for s in (1, 2, 3)}
               for t in range(tags))
