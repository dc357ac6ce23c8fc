"""The evaluate stage's lineage in milliseconds: the real stage, records, manifests and score
checks over a temporary directory; only the programs are instant (tests/fakes/stage_backend.py
writes what images/rehearsal/evaluate_rl.py writes). The rehearsal end to end runs the real
program (tests/e2e/test_rehearsal_e2e.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.core.eval_programs import base_eval_key, eval_dir, scores_uri
from flows.core.failures import FailureCategory, StageFailed
from flows.stages import EVALUATE
from tests.fakes.stage_backend import backend_at, local, run_all, statuses

SIX = ["image", "infra", "convert", "train", "export", "evaluate"]


def test_first_run_scores_trained_and_base_with_intervals(tmp_path: Path) -> None:
    backend = backend_at(tmp_path)
    outputs = run_all(backend, with_eval=True)
    assert list(statuses(outputs)) == SIX and outputs["evaluate"].status == "ran"
    assert backend.runs["evaluate-base"] == 1 and backend.runs["evaluate-trained"] == 1
    details = outputs["evaluate"].details
    trained, base = details["trained"], details["base"]
    assert trained["mean_reward"]["value"] == pytest.approx(0.55)
    assert base["mean_reward"]["value"] == pytest.approx(0.40)
    assert trained["samples"] == 4 and trained["reward_samples"] == 4
    for summary in (trained, base):
        for metric in ("accuracy", "format_accuracy", "mean_reward"):
            interval = summary[metric]
            assert interval["low"] <= interval["value"] <= interval["high"]
    # the trained model was scored on the trained checkpoint, the base on the converted one
    assert trained["checkpoint"].rstrip("/") == \
        backend.layout.actor_params(2).removeprefix("file://")
    assert base["checkpoint"].rstrip("/") == \
        backend.layout.converted_checkpoint.removeprefix("file://")
    layout = backend.layout
    for which in ("trained", "base"):
        assert local(layout.record(eval_dir(layout, which))).is_file()


def test_unchanged_rerun_skips_evaluate_and_runs_nothing(tmp_path: Path) -> None:
    run_all(backend_at(tmp_path), with_eval=True)
    again = backend_at(tmp_path)
    assert statuses(run_all(again, with_eval=True)) == dict.fromkeys(SIX, "skipped")
    assert sum(again.runs.values()) == 0


def test_a_changed_eval_set_reruns_only_evaluate(tmp_path: Path) -> None:
    run_all(backend_at(tmp_path), with_eval=True)
    changed = backend_at(tmp_path, **{"eval.batches": "3"})
    assert statuses(run_all(changed, with_eval=True)) == {
        **dict.fromkeys(SIX[:-1], "skipped"), "evaluate": "ran"}
    assert changed.runs["evaluate-base"] == 1  # the base's key holds the eval set too


def test_the_base_score_is_computed_once_per_base(tmp_path: Path) -> None:
    first = backend_at(tmp_path)
    run_all(first, with_eval=True)
    retrained = backend_at(tmp_path, **{"train.args.learning_rate": "2e-6"})
    outputs = run_all(retrained, with_eval=True)
    assert statuses(outputs)["train"] == "ran" and statuses(outputs)["evaluate"] == "ran"
    assert retrained.runs["evaluate-base"] == 0 and retrained.runs["evaluate-trained"] == 1
    assert outputs["evaluate"].details["base_cached"] is True
    assert base_eval_key(retrained.profile) == base_eval_key(first.profile)


@pytest.mark.parametrize(("which", "base_runs"), [("trained", 0), ("base", 1)])
def test_a_damaged_score_file_is_noticed(tmp_path: Path, which: str, base_runs: int) -> None:
    backend = backend_at(tmp_path)
    run_all(backend, with_eval=True)
    path = local(scores_uri(backend.layout, which))
    path.write_text(path.read_text().replace("0.", "9.", 1))
    again = backend_at(tmp_path)
    outputs = run_all(again, with_eval=True)
    assert statuses(outputs) == {**dict.fromkeys(SIX[:-1], "skipped"), "evaluate": "ran"}
    assert again.runs["evaluate-base"] == base_runs and again.runs["evaluate-trained"] == 1
    assert json.loads(path.read_text())["mean_reward"] in (0.40, 0.55)


def test_unreadable_scores_fail_verification_and_write_no_record(tmp_path: Path) -> None:
    backend = backend_at(tmp_path)
    backend.damage.add("evaluate-trained")
    with pytest.raises(StageFailed) as failed:
        run_all(backend, with_eval=True)
    assert failed.value.stage == "evaluate"
    assert failed.value.diagnosis.category is FailureCategory.USER_ERROR
    assert "left no usable scores" in failed.value.diagnosis.summary
    layout = backend.layout
    assert not local(layout.record(eval_dir(layout, "trained"))).exists()
    repaired = backend_at(tmp_path)
    assert statuses(run_all(repaired, with_eval=True))["evaluate"] == "ran"
    assert repaired.runs["evaluate-base"] == 0  # the verified base score stayed


def test_a_program_refusing_overlap_is_a_user_error_naming_the_rows(tmp_path: Path) -> None:
    backend = backend_at(tmp_path)
    line = "EVAL-OVERLAP 2 of 4 evaluation rows were trained on, e.g. 'What is $2 + 3$?'"
    real = backend.run_workload

    def refuse(workload, log_uri):
        if workload.name == "evaluate-trained":
            from flows.core.failures import user_error
            raise user_error("evaluate", "evaluate-trained exited with code 3", line, "read it")
        return real(workload, log_uri)

    backend.run_workload = refuse  # type: ignore[method-assign]
    with pytest.raises(StageFailed) as failed:
        run_all(backend, with_eval=True)
    assert failed.value.diagnosis.code == "eval/overlap"
    assert failed.value.diagnosis.detail == line


def test_the_plan_shows_both_evaluations(tmp_path: Path) -> None:
    backend = backend_at(tmp_path / "root")
    plan = EVALUATE.plan(backend.profile, backend)
    assert [w.name for w in plan.workloads] == ["evaluate-base", "evaluate-trained"]
    assert all("evaluate_rl.py" in w.command and "num_test_batches=2" in w.command
               for w in plan.workloads)
    assert "num_test_batches=0" not in plan.workloads[0].command  # the training's is replaced
    assert not (tmp_path / "root").exists()


def test_a_worse_retrained_model_is_rejected_and_the_pointer_stays(tmp_path: Path) -> None:
    """Two runs through the real stages, the second trained worse (its evaluation scores
    below the promoted model): rejected, the pointer and the history unchanged, the export
    kept."""
    from flows.core.eval_programs import score_key
    from flows.core.promotion_store import pointer_uris, read_history
    from flows.core.storage import LocalStorage
    from flows.runpage.promotion import promote_or_reject

    def judged(backend, run: str):
        outputs = run_all(backend, with_eval=True)
        artifacts = {"hf_export": outputs["export"].uris["hf_export"],
                     "trained_checkpoint": outputs["train"].uris["actor_checkpoint"]}
        decision, model = promote_or_reject(LocalStorage(), backend.profile, run,
                                            outputs["evaluate"].details, artifacts, None,
                                            outputs["evaluate"].key,
                                            score_key(backend.profile))
        return decision, model, artifacts

    first, promoted, _ = judged(backend_at(tmp_path), "run-1")
    assert first.promoted and first.reference_kind == "base" and promoted is not None
    pointer = local(pointer_uris(backend_at(tmp_path).profile)[0])
    before = pointer.read_text()

    worse = backend_at(tmp_path, **{"train.args.learning_rate": "5e-1"})
    worse.scores["evaluate-trained"] = 0.30  # a run that made the model worse
    decision, still, artifacts = judged(worse, "run-2")
    assert not decision.promoted and decision.reference_kind == "promoted"
    assert decision.trained == pytest.approx(0.30) and decision.reference == pytest.approx(0.55)
    assert still is not None and still.run == "run-1" and pointer.read_text() == before
    assert [m.run for m in read_history(LocalStorage(), worse.profile)] == ["run-1"]
    assert local(artifacts["hf_export"]).is_dir()  # the rejected export is kept


@pytest.mark.parametrize("together", [False, True], ids=["in-turn", "together"])
def test_a_base_score_that_finished_is_kept_when_the_trained_one_failed(
        tmp_path: Path, together: bool) -> None:
    """Both ways a backend runs the two programs (GKE in turn, the rehearsal at once): the
    trained evaluation's failure fails the stage, the base's finished score is kept with its
    record, and the rerun scores only the trained model."""
    from flows.core.failures import diagnose_exit

    backend = backend_at(tmp_path)
    real = backend.run_workload

    def trained_fails(workload, log_uri):
        if workload.name == "evaluate-trained":
            raise StageFailed("evaluate", diagnose_exit(workload.name, 1, ["oom"], False, 60))
        return real(workload, log_uri)

    backend.run_workload = trained_fails  # type: ignore[method-assign]
    if together:  # a run together: every program to its end, the trained one failing first

        def at_once(runs):
            outcomes = []
            for workload, log_uri in reversed(runs):
                try:
                    outcomes.append(trained_fails(workload, log_uri))
                except StageFailed as exc:
                    outcomes.append(exc)
            return outcomes[::-1]

        backend.run_workloads = at_once  # type: ignore[attr-defined]
    with pytest.raises(StageFailed):
        run_all(backend, with_eval=True)
    assert backend.runs["evaluate-base"] == 1
    layout = backend.layout
    assert local(layout.record(eval_dir(layout, "base"))).is_file()
    again = backend_at(tmp_path)
    assert statuses(run_all(again, with_eval=True))["evaluate"] == "ran"
    assert again.runs["evaluate-base"] == 0 and again.runs["evaluate-trained"] == 1
