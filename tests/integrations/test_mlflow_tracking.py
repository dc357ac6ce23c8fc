"""One MLflow run per pipeline run, against a real `mlflow server` (SQLite)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from flows.config import load_profile
from flows.core.storage import LocalStorage
from flows.integrations.mlflow_run import RunFacts
from flows.integrations.tracking import report_run
from flows.run.result import PipelineResult, StageReport
from flows.runpage.metrics import summarize_run
from tests.fakes.gke_programs import tensorboard_events
from tests.support.mlflow_server import MlflowServer
from tests.support.scores import summary

pytestmark = [pytest.mark.services, pytest.mark.realtime]
LOSSES = {1: 0.9, 2: 0.5, 3: 0.25}


def _result(tmp_path: Path) -> PipelineResult:
    """A result whose metrics come from TensorBoard events the way the train stage reads
    them (flows/runpage/metrics.py), so MLflow gets what the run page shows."""
    run_dir = tmp_path / "train" / "rl-k"
    (run_dir / "tensorboard").mkdir(parents=True)
    (run_dir / "tensorboard" / "events.out.tfevents.1.host").write_bytes(
        tensorboard_events(LOSSES))
    metrics = summarize_run(LocalStorage(), run_dir.as_uri())
    stages = [StageReport(stage=s, status="ran", duration_s=10.0 + i, chip_hours=0.5 * i,
                          uris={}, usd=1.25 * i) for i, s in enumerate(("image", "train"))]
    return PipelineResult(
        profile="rehearsal", backend="local", stages=stages, chip_hours=0.5, usd=1.25,
        artifacts={"hf_export": "file:///out/export", "trained_checkpoint": "file:///out/c"},
        metrics=metrics, wall_s=42.0, tensorboard_logdir=run_dir.as_uri(),
        evaluation={"trained": summary(0.6).model_dump(), "base": summary(0.4).model_dump(),
                    "decision": {"promoted": True, "reason": "better"}},
        started_at="2026-12-03T10:00:00+00:00", finished_at="2026-12-03T10:05:00+00:00")


def _profile(server: MlflowServer, experiment: str, attempts: int = 2):
    return load_profile("rehearsal", {"tracking.mlflow.tracking_uri": server.uri,
                                      "tracking.mlflow.experiment": experiment,
                                      "tracking.mlflow.attempts": str(attempts)})


FACTS = RunFacts("rehearsal-20261203-100000", "3b1e-flow-run", {
    "tpurl.deployment": "rehearsal", "tpurl.dataset": "hub:openai/gsm8k",
    "tpurl.revision": "main", "tpurl.image": "venv:.venvs/rehearsal", "tpurl.key": "k-export"})


def test_a_pipeline_run_becomes_one_mlflow_run_with_everything_it_measured(
        mlflow_server: MlflowServer, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    result = _result(tmp_path)
    where = report_run(_profile(mlflow_server, "runs"), result, FACTS, delays_s=(0.1,))
    again = report_run(_profile(mlflow_server, "runs"), result, FACTS, delays_s=(0.1,))
    assert where == again and where["mlflow"].startswith(mlflow_server.uri)  # one run

    client = MlflowClient(mlflow_server.uri)
    [run] = client.search_runs([client.get_experiment_by_name("runs").experiment_id])
    assert run.info.run_name == FACTS.run_name and run.info.status == "FINISHED"
    tags = run.data.tags
    assert {k: tags[k] for k in FACTS.tags} == FACTS.tags
    assert tags["tpurl.profile"] == "rehearsal" and tags["tpurl.decision"] == "promoted"
    assert tags["tpurl.artifact.hf_export"] == "file:///out/export"
    assert tags["tpurl.tensorboard_logdir"] == result.tensorboard_logdir
    loss = client.get_metric_history(run.info.run_id, "actor/train/loss")
    assert sorted((m.step, round(m.value, 4)) for m in loss) == sorted(LOSSES.items())
    metrics = run.data.metrics
    assert metrics["stage.train.wall_s"] == 11.0 and metrics["stage.train.usd"] == 1.25
    assert metrics["run.chip_hours"] == 0.5 and metrics["run.usd"] == 1.25
    assert metrics["eval.trained.mean_reward"] == pytest.approx(0.6)


def test_a_server_that_is_down_is_a_warning_and_a_retry_never_a_failure(
        mlflow_server: MlflowServer, prefect_api, tmp_path: Path,
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real server stopped while the run trains: the run completes with its result
    kept, the report's tries are warnings; the server back mid-retries: the report lands on
    a later try."""
    from flows import pipeline
    from flows.run.result import result_uris
    from tests.integrations.stand_in_stages import stand_ins

    root = tmp_path / "root"
    monkeypatch.setattr(pipeline, "STAGE_BY_NAME", stand_ins(root, during_train=mlflow_server.stop))
    overrides = {"local.root": str(root), "tracking.mlflow.tracking_uri": mlflow_server.uri,
                 "tracking.mlflow.attempts": "2"}
    state = pipeline.rl_post_training(profile="rehearsal", overrides=overrides,
                                      return_state=True)
    assert state.is_completed(), state  # the training is not failed for its report
    assert state.result().tracking == {}
    assert not mlflow_server.answers()
    profile = load_profile("rehearsal", overrides)
    kept = LocalStorage().read_text(result_uris(profile, _run_name(state))[0])
    assert kept is not None and '"tracking": {}' in kept

    result = _result(tmp_path)
    warnings: list[str] = []
    assert report_run(_profile(mlflow_server, "down"), result, FACTS, warnings.append,
                      delays_s=(0.1,)) == {}
    assert len(warnings) == 2 and "retrying" in warnings[0] and "given up" in warnings[1]

    landed: dict[str, str] = {}
    # ten tries, at 0, 10, 20, 30, 45, 60, 90, 120, 150 and 210 s: past the longest restart
    # (START_TIMEOUT_S); the report lands no later than with tries 30 s apart for a restart
    # under 150 s, and 10 to 20 s sooner for a quick one
    worker = threading.Thread(target=lambda: landed.update(report_run(
        _profile(mlflow_server, "down", attempts=10), result, FACTS, warnings.append,
        delays_s=(10.0, 10.0, 10.0, 15.0, 15.0, 30.0, 30.0, 30.0, 60.0))))
    with caplog.at_level(logging.WARNING):
        worker.start()
        mlflow_server.start()  # back while the report retries
        worker.join(timeout=400)
    assert landed.get("mlflow", "").startswith(mlflow_server.uri), warnings


def _run_name(state) -> str:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return str(client.read_flow_run(state.state_details.flow_run_id).name)


def test_each_reward_function_and_the_recipe_are_logged_by_name(
        mlflow_server: MlflowServer, tmp_path: Path) -> None:
    """A recipe of two functions: each one's mean per step under ``reward.<its name>`` (and
    under Tunix's own tag), the recipe's digest and functions as params and tags."""
    from mlflow import MlflowClient

    from flows.core.recipe_files import recipe_summary
    from tests.support.tfevents import reward_function_events

    run_dir = tmp_path / "train" / "rl-r"
    (run_dir / "tensorboard").mkdir(parents=True)
    (run_dir / "tensorboard" / "events.out.tfevents.1.host").write_bytes(reward_function_events(
        {"exact_answer": [0.0, 0.25, 0.5], "short_answer": [0.5, 0.625, 0.75]}))
    profile = _profile(mlflow_server, "recipes")
    recipe = {**recipe_summary(profile), "reward_functions": ["exact_answer", "short_answer"]}
    result = _result(tmp_path).model_copy(update={
        "metrics": summarize_run(LocalStorage(), run_dir.as_uri()), "recipe": recipe})
    facts = RunFacts("rehearsal-recipe", "flow-run-recipe", {})
    assert report_run(profile, result, facts, delays_s=(0.1,))
    assert report_run(profile, result, facts, delays_s=(0.1,))  # a retry: same params, accepted

    client = MlflowClient(mlflow_server.uri)
    [run] = client.search_runs([client.get_experiment_by_name("recipes").experiment_id])
    for name, means in (("exact_answer", [0.0, 0.25, 0.5]), ("short_answer", [0.5, 0.625, 0.75])):
        history = client.get_metric_history(run.info.run_id, f"reward.{name}")
        assert sorted((m.step, m.value) for m in history) == list(enumerate(means))
        assert len(client.get_metric_history(run.info.run_id, f"rewards/train/{name}")) == 3
    params, tags = run.data.params, run.data.tags
    assert params["recipe_digest"] == tags["tpurl.recipe"] == recipe["digest"] != "builtin"
    assert params["reward_functions"] == tags["tpurl.reward_functions"] == \
        "exact_answer,short_answer"
    assert params["recipe_rewards_digest"] == recipe["files"]["rewards"]["digest"]
