"""The recipe in the train and evaluate stages' lineage records: what the run page, the
result and the trackers read to name the reward functions that made the metrics and the
scores. The real stages and records over the fake backend (tests/fakes/stage_backend.py)."""

from __future__ import annotations

import json
from pathlib import Path

from flows.core.recipe_files import recipe_digest, recipe_summary
from tests.fakes.stage_backend import backend_at, local, run_all


def test_the_train_and_evaluate_records_hold_the_recipe(tmp_path: Path) -> None:
    backend = backend_at(tmp_path)
    outputs = run_all(backend, with_eval=True)
    expected = recipe_summary(backend.profile)
    assert expected["digest"] == recipe_digest(backend.profile) != "builtin"
    assert expected["reward_functions"] == ["ascii_fraction_reward"]
    assert outputs["train"].details["recipe"] == expected
    assert outputs["evaluate"].details["recipe"] == expected
    layout = backend.layout
    record = json.loads(local(layout.record(layout.train_run_dir)).read_text())
    assert record["details"]["recipe"] == expected
    again = run_all(backend_at(tmp_path), with_eval=True)  # a skip reads it back
    assert again["train"].status == "skipped" and again["train"].details["recipe"] == expected
