"""`tpurl run` with nothing to run answers without an API server (flows/console/finished.py):
the stages' upstream is the flow's, and anything not known to be done goes to the flow. The
rerun of a real rehearsal is in tests/e2e/test_rehearsal_e2e.py."""

from __future__ import annotations

import inspect
from pathlib import Path

from flows import pipeline
from flows.config import load_profile
from flows.console.finished import UPSTREAM, finished_result
from flows.stages import EVALUATE, STAGES

# the stage tasks' parameter names for their upstream outputs (flows/pipeline.py)
PARAMETER_STAGE = {"image": "image", "infra": "infra", "converted": "convert",
                   "trained": "train", "exported": "export"}


def test_each_stages_upstream_is_what_the_flow_passes() -> None:
    tasks = {"image": pipeline.build_image, "infra": pipeline.provision_infrastructure,
             "convert": pipeline.convert_checkpoint, "train": pipeline.train_grpo,
             "export": pipeline.export_hf, "evaluate": pipeline.evaluate_models}
    assert set(tasks) == {stage.name for stage in (*STAGES, EVALUATE)} == set(UPSTREAM)
    for stage, task in tasks.items():
        parameters = [name for name in inspect.signature(task.fn).parameters
                      if name not in ("profile", "backend")]  # the run's, not a stage's
        assert tuple(PARAMETER_STAGE[name] for name in parameters) == UPSTREAM[stage], stage


def test_a_profile_with_no_output_yet_goes_to_the_flow(tmp_path: Path) -> None:
    profile = load_profile("rehearsal", {"local.root": str(tmp_path / "root")})
    assert finished_result(profile) is None
    assert not (tmp_path / "root" / "tpurl-results").exists()  # it wrote nothing

