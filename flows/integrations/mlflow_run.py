"""One MLflow run per pipeline run: named as the flow run, tagged with what
identifies it, holding the training metrics per step, the stage walls, chip-hours and
dollars, the evaluation scores and the artifacts' URIs.

The metrics are the ones the run page shows: the result's ``metrics.steps``, decoded from
the training's TensorBoard events (flows/runpage/metrics.py), so the two never disagree.
A retried report finds the run it made before by the flow run's id (tag
``tpurl.flow_run_id``) and logs the same rows again with the same timestamps, which MLflow
stores once; a retry never makes a second run.

The recipe: each reward function's mean per step is also logged under the function's own
name (``reward.<name>``), so a team compares one function across runs without knowing
Tunix's tag; the recipe's digest and function names are params (what the run was made
with, which MLflow's run comparison lines up) and tags (which its search filters on). A
param is written once and never changed, and a retry writes the same values, which MLflow
accepts.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from flows.config.tracking import MlflowTracking
from flows.integrations.mlflow_client import mlflow_client
from flows.run.result import PipelineResult
from flows.runpage.metrics import logged_tags, reward_function_tag, reward_functions_logged

BATCH = 1000  # MLflow's log_batch takes at most 1000 metrics (mlflow/utils/validation.py)
_KEY = re.compile(r"[^A-Za-z0-9_\-./ ]")
SCORES = ("accuracy", "format_accuracy", "mean_reward")


@dataclass(frozen=True)
class RunFacts:
    """What names and identifies a pipeline run, beside its result."""

    run_name: str
    flow_run_id: str
    tags: dict[str, str] = field(default_factory=dict)


def metric_key(name: str) -> str:
    """A TensorBoard tag as an MLflow metric key (letters, digits, _ - . / and space)."""
    return _KEY.sub("_", name)


def reward_function_keys(result: PipelineResult) -> dict[str, str]:
    """TensorBoard tag → MLflow key (``reward.<function name>``) of each reward function's
    mean per step (the recipe's functions first, then any other the events name). Pure."""
    functions = [str(f) for f in result.recipe.get("reward_functions") or []]
    return {reward_function_tag(name): metric_key(f"reward.{name}")
            for name in reward_functions_logged(logged_tags(result.metrics), functions)}


def metric_rows(result: PipelineResult) -> Iterator[tuple[str, float, int]]:
    """(key, value, step) for everything numeric the run has. Pure."""
    by_function = reward_function_keys(result)
    for row in result.metrics.get("steps", []):
        step = int(row.get("step", 0))
        for tag, value in row.items():
            if tag != "step" and isinstance(value, int | float):
                yield metric_key(tag), float(value), step
                if tag in by_function:
                    yield by_function[tag], float(value), step
    for stage in result.stages:
        yield f"stage.{stage.stage}.wall_s", stage.duration_s, 0
        yield f"stage.{stage.stage}.chip_hours", stage.chip_hours, 0
        yield f"stage.{stage.stage}.usd", stage.usd, 0
    yield "run.wall_s", result.wall_s, 0
    yield "run.chip_hours", result.chip_hours, 0
    yield "run.usd", result.usd, 0
    for model in ("trained", "base"):
        scores = (result.evaluation or {}).get(model) or {}
        for name in SCORES:
            if isinstance(scores.get(name), dict):
                yield f"eval.{model}.{name}", float(scores[name]["value"]), 0


def run_tags(result: PipelineResult, facts: RunFacts) -> dict[str, str]:
    """The identifying tags, the artifacts' URIs and the promotion decision. Pure."""
    tags = {"tpurl.flow_run_id": facts.flow_run_id, "tpurl.profile": result.profile,
            "tpurl.backend": result.backend, **facts.tags}
    tags.update({f"tpurl.artifact.{name}": uri for name, uri in result.artifacts.items()})
    if result.tensorboard_logdir:
        tags["tpurl.tensorboard_logdir"] = result.tensorboard_logdir
    recipe = result.recipe
    if recipe.get("digest"):
        tags["tpurl.recipe"] = str(recipe["digest"])
        tags["tpurl.reward_functions"] = ",".join(
            map(str, recipe.get("reward_functions", []))) or "builtin"
    decision = (result.evaluation or {}).get("decision") or {}
    if decision:
        tags["tpurl.decision"] = "promoted" if decision.get("promoted") else "rejected"
        tags["tpurl.decision_reason"] = str(decision.get("reason", ""))[:5000]
    return tags


def run_params(result: PipelineResult) -> dict[str, str]:
    """What the run was made with, as MLflow params: the recipe's digest, its reward
    functions in order, and each file's digest (its path is the owner's machine's, a tag
    would not compare). Empty for a result made before recipes were recorded. Pure."""
    recipe = result.recipe
    if not recipe.get("digest"):
        return {}
    params = {"recipe_digest": str(recipe["digest"]),
              "reward_functions": ",".join(map(str, recipe.get("reward_functions", [])))
              or "builtin"}
    for role, file in (recipe.get("files") or {}).items():
        params[f"recipe_{role}_digest"] = str(file.get("digest", ""))
    return params


def log_pipeline_run(config: MlflowTracking, result: PipelineResult, facts: RunFacts,
                     project: str | None = None) -> tuple[str, str]:
    """Create (or find) the run, log everything, mark it finished; returns the experiment's
    and the run's ids.
    Idempotent, so reporting.report may call it again after a failure."""
    from mlflow.entities import Metric, Param, RunTag

    client = mlflow_client(config.tracking_uri, config.token, project)
    experiment = client.get_experiment_by_name(config.experiment)
    experiment_id = (experiment.experiment_id if experiment is not None
                     else client.create_experiment(config.experiment))
    found = client.search_runs([experiment_id], filter_string=(
        f"tags.`tpurl.flow_run_id` = '{facts.flow_run_id}'"), max_results=1)
    run_id = (found[0].info.run_id if found else
              client.create_run(experiment_id, run_name=facts.run_name,
                                start_time=_ms(result.started_at)).info.run_id)
    at = _ms(result.finished_at)
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in run_tags(result, facts).items()],
                     params=[Param(k, v) for k, v in run_params(result).items()])
    metrics = [Metric(key, value, at, step) for key, value, step in metric_rows(result)]
    for start in range(0, len(metrics), BATCH):
        client.log_batch(run_id, metrics=metrics[start:start + BATCH])
    client.set_terminated(run_id, "FINISHED", end_time=at)
    return str(experiment_id), str(run_id)


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)
