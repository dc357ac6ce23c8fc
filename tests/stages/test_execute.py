"""The stage model's skip/run/verify/lineage rule, in milliseconds: real stages, real lineage
records and real output checks over a temporary directory; only the programs are instant
(tests/fakes/stage_backend.py). The end-to-end modules prove the same rule with MaxText."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from flows.core.failures import FailureCategory, StageFailed
from flows.operations.plan import build_plan
from flows.stages import stages_for
from tests.fakes.stage_backend import ORDER, backend_at, local, run_all, statuses


def test_first_run_executes_every_stage_and_records_lineage(tmp_path: Path) -> None:
    backend = backend_at(tmp_path)
    outputs = run_all(backend)
    assert statuses(outputs) == dict.fromkeys(ORDER, "ran")
    layout = backend.layout
    for directory in (layout.convert_dir, layout.train_run_dir, layout.export_dir):
        assert local(layout.record(directory)).is_file()
    assert outputs["train"].details["newest_step"] == 2
    assert outputs["export"].uris["hf_export"] == layout.export_dir


def test_unchanged_rerun_skips_every_stage_and_runs_nothing(tmp_path: Path) -> None:
    first = run_all(backend_at(tmp_path))
    again = backend_at(tmp_path)
    second = run_all(again)
    assert statuses(second) == dict.fromkeys(ORDER, "skipped")
    assert sum(again.runs.values()) == 0
    assert {n: o.fingerprint for n, o in second.items()} == \
        {n: o.fingerprint for n, o in first.items()}


def test_changed_training_config_reruns_only_train_and_export(tmp_path: Path) -> None:
    run_all(backend_at(tmp_path))
    changed = backend_at(tmp_path, **{"train.args.learning_rate": "2e-6"})
    assert statuses(run_all(changed)) == {"image": "skipped", "infra": "skipped",
                                          "convert": "skipped", "train": "ran", "export": "ran"}


def test_changed_base_model_reruns_convert_and_everything_after_it(tmp_path: Path) -> None:
    """The rule tests/e2e/test_rehearsal_e2e.py proves with MaxText up to the train that
    follows the new convert; here through export, every stage's program counted."""
    first = backend_at(tmp_path)
    run_all(first)
    changed = backend_at(tmp_path, **{"local.tiny_model_seed": "1"})
    assert statuses(run_all(changed)) == {"image": "skipped", "infra": "ran",
                                          "convert": "ran", "train": "ran", "export": "ran"}
    assert changed.layout.converted_checkpoint != first.layout.converted_checkpoint
    assert changed.layout.export_dir != first.layout.export_dir
    assert changed.runs["convert-hf-to-maxtext"] == 1


def test_missing_output_reruns_that_stage_and_what_depends_on_it(tmp_path: Path) -> None:
    backend = backend_at(tmp_path)
    run_all(backend)
    shutil.rmtree(local(backend.layout.converted_checkpoint))
    again = backend_at(tmp_path)
    assert statuses(run_all(again)) == {"image": "skipped", "infra": "skipped",
                                        "convert": "ran", "train": "ran", "export": "ran"}
    assert again.runs["convert-hf-to-maxtext"] == 1


def test_missing_step_output_reruns_the_step(tmp_path: Path) -> None:
    backend = backend_at(tmp_path)
    run_all(backend)
    local(backend.infra.marker).unlink()  # e.g. a teardown since the record was written
    again = backend_at(tmp_path)
    # the same verified infra again: what ran on it is not run again
    assert statuses(run_all(again)) == {**dict.fromkeys(ORDER, "skipped"), "infra": "ran"}
    assert again.runs["infra"] == 1


def test_a_record_of_another_format_reruns_the_stage(tmp_path: Path, caplog) -> None:
    backend = backend_at(tmp_path)
    run_all(backend)
    local(backend.layout.record(backend.layout.train_run_dir)).write_text(
        '{"format": 99, "stage": "train", "key": "x"}')
    caplog.set_level(logging.INFO)
    again = backend_at(tmp_path)
    result = statuses(run_all(again))
    # the run already saved its last step: train verifies it again without training, and
    # the export made from those very files stands
    assert result["train"] == "ran" and again.trained == []
    assert result["export"] == "skipped" and result["convert"] == "skipped"
    assert "made from other inputs (a record of format 99, this version writes 1)" in caplog.text


@pytest.mark.parametrize(("workload", "stage", "summary"), [
    ("convert-hf-to-maxtext", "convert", "without a complete MaxText checkpoint"),
    ("train-grpo", "train", "newest actor checkpoint is step 1, expected 2"),
    ("export-maxtext-to-hf", "export", "HF export is incomplete"),
])
def test_incomplete_output_fails_verification_and_writes_no_record(
        tmp_path: Path, workload: str, stage: str, summary: str) -> None:
    backend = backend_at(tmp_path)
    backend.damage.add(workload)
    with pytest.raises(StageFailed) as failed:
        run_all(backend)
    assert failed.value.stage == stage
    assert failed.value.diagnosis.category is FailureCategory.USER_ERROR
    assert summary in failed.value.diagnosis.summary
    record = {"convert": backend.layout.convert_dir, "train": backend.layout.train_run_dir,
              "export": backend.layout.export_dir}[stage]
    assert not local(backend.layout.record(record)).exists()
    # the next run tries again instead of trusting the half-written output
    repaired = backend_at(tmp_path)
    assert statuses(run_all(repaired))[stage] == "ran"


def test_plan_is_pure(tmp_path: Path) -> None:
    backend = backend_at(tmp_path / "root")
    plans = build_plan(backend.profile)
    assert [p.stage for p in plans] == [*ORDER, "evaluate"]  # the rehearsal's eval section
    assert not (tmp_path / "root").exists()
    keys = {p.stage: p.key for p in plans}
    assert keys == {stage.name: stage.key(backend.profile)
                    for stage in stages_for(backend.profile)}


@pytest.mark.parametrize("columns", [None, {"q": ["1+1"], "a": ["2"]}])
def test_a_bad_dataset_is_refused_before_any_program_runs(tmp_path: Path, columns) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "v7.parquet"
    if columns is not None:
        pq.write_table(pa.table(columns), data)
    backend = backend_at(tmp_path / "root", **{"data.train_files": str(data)})
    with pytest.raises(StageFailed) as failed:
        run_all(backend)
    assert failed.value.stage == "infra" and failed.value.diagnosis.code == "data/invalid"
    assert failed.value.diagnosis.summary.startswith("data.train_files: ")
    assert ("does not exist" if columns is None else "question column") in \
        failed.value.diagnosis.summary
    assert sum(backend.runs.values()) == 1  # the image step only; no MaxText program ran


@pytest.mark.parametrize("value", ["hf://datasets/nvidia/OpenMathInstruct-2/data/train.parquet",
                                   "hf://datasets/org/set/*.parquet"])
def test_a_hub_dataset_is_left_to_maxtext_on_any_storage(value: str) -> None:
    """The hub is read in the pod by MaxText: neither the bucket's storage (which refused it
    as not a parquet file) nor the laptop's can read it, so nothing is refused here."""
    from flows.backends.gke.gcs import GcsStorage
    from flows.core.dataset import dataset_problem
    from flows.core.storage import LocalStorage

    for storage in (LocalStorage(), GcsStorage(client=object())):
        assert dataset_problem(storage, value) is None
