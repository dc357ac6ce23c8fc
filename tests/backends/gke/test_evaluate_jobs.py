"""The evaluate stage's JobSets against the fake API: how they are named, shipped, reattached
and how their failures reach the stage's own diagnoses (flows/stages/evaluate.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.backends.gke.jobs.manifests import stage_run
from flows.backends.gke.jobs.render import render_jobset
from flows.core.eval_programs import evaluate_workload
from flows.core.failures import FailureCategory, StageFailed
from flows.core.layout import Layout
from flows.core.stage import StageContext
from flows.core.storage import LocalStorage, file_uri
from flows.stages.evaluate import EvaluateStage
from tests.fakes.gke_backend import ListLogger, jobsets_created, make_backend
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.scenarios import NS, admit, exit_with, say, scenario, start, succeed
from tests.support.profiles import fake_hf_token, tutorial_profile

EVALUATING = {"eval.batches": "2"}
OK = [(0.1, admit), (0.05, start), (0.05, say("EVAL-SCORES {}")), (0.1, succeed)]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("CANARYeval"))
    with FakeApiServer(FakeKube()) as srv:
        yield srv


def _run(server: FakeApiServer, tmp_path: Path, which: str = "trained"):
    profile = tutorial_profile(**EVALUATING)
    logger = ListLogger()
    backend = make_backend(server.url, "evaluate", tmp_path, logger, profile=profile)
    layout = Layout(profile)
    checkpoint = (layout.converted_checkpoint if which == "base" else layout.actor_params(50))
    workload = evaluate_workload(profile, layout, backend.runtime, which, checkpoint)  # type: ignore[arg-type]
    ctx = StageContext(profile=profile, layout=layout, backend=backend,
                       storage=LocalStorage(), logger=logger)
    return ctx, workload, backend, logger


def test_each_model_has_its_own_jobset_named_by_its_score_key(server: FakeApiServer,
                                                             tmp_path: Path) -> None:
    kube = scenario(server.kube, OK, OK)
    names = []
    for which in ("base", "trained"):
        _, workload, backend, logger = _run(server, tmp_path, which)
        backend.run_workload(workload, file_uri(tmp_path / f"{which}.log"))
        names.append(backend.submitted[-1])
        (jobset,) = [j for j in kube.find("jobsets") if j["metadata"]["name"] == names[-1]]
        labels = jobset["metadata"]["labels"]
        assert labels["tpurl/stage"] == f"evaluate-{which}"
        assert labels["tpurl/run"] == stage_run(backend.profile, f"evaluate-{which}")
    assert len(set(names)) == 2 and jobsets_created(kube) == 2
    (configmap,) = kube.find("configmaps")  # one object for both: the same program
    assert configmap["immutable"] is True
    assert any("ConfigMap tpurl-programs-" in line for line in logger.lines)


@pytest.mark.parametrize("which", ["base", "trained"])
def test_a_leftover_directory_is_kept_while_either_evaluation_jobset_exists(
        server: FakeApiServer, tmp_path: Path, which: str) -> None:
    """A rerun after the flow process died reattaches to the JobSet it left running: the
    stage's output directory must not be cleared under it, whichever model it scores."""
    _, workload, backend, _ = _run(server, tmp_path, which)
    job = f"evaluate-{which}"
    jobset = render_jobset(workload, backend.profile, run=stage_run(backend.profile, job),
                           stage=job)
    server.kube.create("jobsets", NS, jobset)  # what the dead flow process had submitted
    leftover = tmp_path / "eval-out"
    leftover.mkdir()
    (leftover / "partial.json").write_text("{}")
    assert backend.clear_leftovers("evaluate", file_uri(leftover)) == 0
    assert (leftover / "partial.json").exists()
    server.kube.delete("jobsets", NS, jobset["metadata"]["name"])
    assert backend.clear_leftovers("evaluate", file_uri(leftover)) == 1
    assert not (leftover / "partial.json").exists()


def test_a_held_out_set_that_overlaps_training_is_the_stages_user_error(
        server: FakeApiServer, tmp_path: Path) -> None:
    """The program exits 3 with EVAL-OVERLAP; on GKE that line reaches the stage through the
    JobSet's log tail, which the stage turns into eval/overlap with its fix."""
    scenario(server.kube, [(0.1, admit), (0.05, start),
                           (0.05, say("EVAL-OVERLAP 2 of 4 evaluation rows were trained on, "
                                      "e.g. 'What is 2+2?'")), (0.1, exit_with(3))])
    _, workload, backend, _ = _run(server, tmp_path)
    with pytest.raises(StageFailed) as failed:
        backend.run_workload(workload, file_uri(tmp_path / "trained.log"))
    explained = EvaluateStage()._explained(failed.value)
    assert isinstance(explained, StageFailed) and explained.__cause__ is failed.value
    diagnosis = explained.diagnosis
    assert diagnosis.category is FailureCategory.USER_ERROR
    assert diagnosis.code == "eval/overlap" and "EVAL-OVERLAP 2 of 4" in diagnosis.detail
    assert "eval.files" in diagnosis.fix
