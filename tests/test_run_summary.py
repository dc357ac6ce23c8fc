"""What a finished `tpurl run` ends with: the result file, the logs, the three
artifact URIs and the final reward and loss; no link to an API that dies with the command."""

from __future__ import annotations

import logging
from pathlib import Path

from flows.console.output import _RepeatsOfDiagnosed, final_lines
from flows.run.result import PipelineResult

ARTIFACTS = {"maxtext_checkpoint": "file:///r/convert/0/items",
             "trained_checkpoint": "file:///r/train/actor", "hf_export": "file:///r/export"}


def _result(steps: list[dict]) -> PipelineResult:
    return PipelineResult(profile="rehearsal", backend="local", artifacts=ARTIFACTS, stages=[],
                          chip_hours=0.0, metrics={"steps": steps}, wall_s=1.0,
                          started_at="s", finished_at="f")


def test_final_lines_name_everything_a_user_looks_for():
    steps = [{"step": 0, "rewards/train/mean": 0.25}, {"step": 1, "rewards/train/mean": 0.5,
                                                       "actor/train/loss": 0.1},
             {"step": 2, "actor/train/loss": 0.05}]
    lines = "\n".join(final_lines(_result(steps), "file:///r/tpurl-results/x/latest.json",
                                  Path("/c/logs/run.log")))
    assert all(uri in lines for uri in ARTIFACTS.values())
    assert "reward 0.5 (step 1), loss 0.05 (step 2)" in lines
    assert "result: file:///r/tpurl-results/x/latest.json" in lines
    assert "logs: /c/logs/run.log" in lines and "http" not in lines


def test_no_metrics_no_training_line():
    assert not any("training ended" in line for line in final_lines(_result([]), "u", None))


def test_the_ui_link_of_a_private_api_is_not_printed():
    record = logging.LogRecord("prefect.flow_runs", logging.INFO, "", 0,
                               "View at http://127.0.0.1:8936/runs/flow-run/x", None, None)
    assert not _RepeatsOfDiagnosed(private_api=True).filter(record)
    assert _RepeatsOfDiagnosed(private_api=False).filter(record)  # a server that stays


def test_each_reward_function_prints_its_curve_by_its_own_name():
    """Tunix logs a recipe's functions beside its totals (rewards/train/mean, …/score/mean):
    the functions print, the totals do not."""
    steps = [{"step": 0, "rewards/train/mean": 0.25, "rewards/train/exact_match": 0.0,
              "rewards/train/length_penalty": -0.0125, "rewards/train/score/mean": 0.25},
             {"step": 1, "rewards/train/mean": 0.5, "rewards/train/exact_match": 0.5,
              "rewards/train/length_penalty": -0.01, "actor/train/loss": 0.1}]
    lines = final_lines(_result(steps), "u", None)
    assert "  exact_match per step: 0, 0.5" in lines
    assert "  length_penalty per step: -0.0125, -0.01" in lines
    assert not any(line.lstrip().startswith(("mean ", "score", "sum ")) for line in lines)
