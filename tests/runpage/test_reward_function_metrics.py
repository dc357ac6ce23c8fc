"""Each reward function's mean per step, by its own name, on the run page: event files on
disk as Tunix 0.1.8 writes them for a recipe of two functions (rl/reward_manager.py
``_prepare_log_metrics`` logs ``rewards/<fn.__name__>`` beside the sum/mean/min/max
aggregates; rl/rl_cluster.py ``_log_metrics`` and sft/metrics_logger.py ``log`` make the tag
``rewards/train/<fn name>``), read by the real decoder, shown in the step table and drawn
as a chart series named by the function."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

from flows.core.storage import LocalStorage, file_uri
from flows.runpage.artifacts import metric_rows
from flows.runpage.charts import metrics_chart_markdown
from flows.runpage.metrics import reward_function_tag, reward_functions_logged, summarize_run
from tests.support.tfevents import reward_function_events

FUNCTIONS = ("exact_answer", "loss")  # a function named like a column keeps its own values


def tunix_events(run_dir: Path) -> dict[str, Any]:
    """Three steps of a two-function recipe; the summary the train stage keeps."""
    (run_dir / "tensorboard").mkdir(parents=True)
    (run_dir / "tensorboard" / "events.out.tfevents.1.host").write_bytes(reward_function_events(
        {"exact_answer": [0.0, 0.25, 0.5], "loss": [0.5, 0.625, 0.75]}))
    return summarize_run(LocalStorage(), file_uri(run_dir))


def test_the_tag_is_tunix_s() -> None:
    assert reward_function_tag("exact_answer") == "rewards/train/exact_answer"
    tags = ["rewards/train/mean", "rewards/train/sum", "rewards/train/zeta",
            "rewards/train/exact_answer", "rewards/eval/exact_answer", "actor/train/loss"]
    # the recipe's order first, then what else the events name; never an aggregate
    assert reward_functions_logged(tags, ["exact_answer", "absent"]) == ["exact_answer", "zeta"]
    assert reward_functions_logged(tags, mode="eval") == ["exact_answer"]


def test_the_step_table_has_a_column_per_function(tmp_path: Path) -> None:
    metrics = tunix_events(tmp_path)
    rows = metric_rows(metrics, FUNCTIONS)
    assert [(r["step"], r["exact_answer"], r["reward loss"], r["loss"]) for r in rows] == [
        (1, 0.0, 0.5, 1.0), (2, 0.25, 0.625, 0.5), (3, 0.5, 0.75, 0.333333)]
    # without the recipe's names (MaxText's built-in rewards), the events name them
    assert list(metric_rows(metrics)[0])[-2:] == ["exact_answer", "reward loss"]


def test_the_chart_draws_each_function_by_its_name(tmp_path: Path) -> None:
    markdown = metrics_chart_markdown(tunix_events(tmp_path), FUNCTIONS)
    assert markdown
    svg = base64.b64decode(markdown.split(",", 1)[1].rstrip(")")).decode()
    assert "mean reward per function per step" in svg
    assert "■ exact_answer<" in svg and svg.count("■ loss<") == 2  # the function, the actor
    lines = re.findall(r'<polyline[^>]*points="([^"]*)"', svg)
    assert len(lines) == 6  # mean, max, min; the two functions; the actor loss
    xs = [[float(p.split(",")[0]) for p in pts.split()] for pts in lines]
    assert xs[3] == xs[4] == xs[5]  # each function's mean stands above its update's loss


def test_no_function_panel_without_per_function_events() -> None:
    steps = [{"step": s, "rewards/train/mean": 0.1 * s, "actor/train/loss": 1.0} for s in (1, 2)]
    markdown = metrics_chart_markdown({"steps": steps}, ["exact_answer"])
    assert markdown
    assert "per function" not in base64.b64decode(markdown.split(",", 1)[1].rstrip(")")).decode()
    assert "exact_answer" not in metric_rows({"steps": steps}, ["exact_answer"])[0]
