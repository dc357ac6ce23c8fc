"""A run that holds announcements trains exactly what they announce: its dataset and
revision are the announced ones (or the deployment's, for a kind it does not serve), its
overrides the deployment's (pure; the retrain run's refusal is test_direct_runs.py)."""

from __future__ import annotations

import pytest

from flows.announcements.model import Announcement, RunAnnouncement

DATA = Announcement.of("dataset", "gs://b/d/v2.parquet", "e-data", "2026-01-01T00:00:00")
REV = Announcement.of("base-model", "ab" * 20, "e-rev", "2026-01-01T00:01:00")
BOTH = RunAnnouncement({"dataset": DATA, "base-model": REV})
GIVEN = {"dataset_uri": DATA.value, "model_revision": REV.value, "overrides": None}


def test_the_announced_values_pass() -> None:
    assert BOTH.parameters_problem(GIVEN, {}) is None
    assert BOTH.parameters_problem({**GIVEN, "overrides": {}}, {"overrides": {}}) is None
    # a kind it does not serve is the deployment's own, as the dispatcher's run has it
    data_only = RunAnnouncement({"dataset": DATA})
    assert data_only.parameters_problem({**GIVEN, "model_revision": "cd" * 20},
                                        {"model_revision": "cd" * 20}) is None
    assert data_only.parameters_problem({**GIVEN, "model_revision": None}, {}) is None


@pytest.mark.parametrize(("change", "says"), [
    ({"dataset_uri": "gs://b/d/v1.parquet"}, "dataset_uri: differs from the announced dataset"),
    ({"dataset_uri": None}, "dataset_uri: differs from the announced dataset"),
    ({"model_revision": "cd" * 20}, "model_revision: differs from the announced revision"),
    ({"overrides": {"data.train_files": "gs://b/d/v1.parquet"}},
     "overrides: differs from the deployment's"),
])
def test_anything_else_is_refused_naming_the_parameter_never_its_value(change, says) -> None:
    problem = BOTH.parameters_problem({**GIVEN, **change}, {})
    assert problem is not None and problem.startswith(says)
    assert "e-data, e-rev" in problem and "fix: leave" in problem
    assert "v1.parquet" not in problem and "cd" * 20 not in problem


def test_a_kind_it_does_not_serve_may_not_be_set_by_the_run() -> None:
    data_only = RunAnnouncement({"dataset": DATA})
    problem = data_only.parameters_problem({**GIVEN, "model_revision": "cd" * 20}, {})
    assert problem is not None and problem.startswith(
        "model_revision: differs from the deployment's")
    deployed = {"overrides": {"train.steps": "4"}}
    assert data_only.parameters_problem({**GIVEN, "model_revision": None,
                                         "overrides": {"train.steps": "4"}}, deployed) is None
    assert data_only.parameters_problem({**GIVEN, "model_revision": None}, deployed)
