"""A damaged output is never skipped as done, a moved output root still is, and a rerun never
lets an earlier attempt's partial files pass as new output (real files, real records)."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from tests.fakes.stage_backend import ORDER, backend_at, local, run_all, statuses

DOWNSTREAM_OF_CONVERT = {"image": "skipped", "infra": "skipped", "convert": "ran",
                         "train": "ran", "export": "ran"}


def export_shard(backend) -> Path:
    return local(backend.layout.export_dir) / "model-1.safetensors"


def test_truncated_export_reruns_only_export_and_says_why(tmp_path: Path, caplog) -> None:
    backend = backend_at(tmp_path)
    run_all(backend)
    with open(export_shard(backend), "r+b") as handle:
        handle.truncate(0)
    caplog.set_level(logging.INFO)
    again = backend_at(tmp_path)
    assert statuses(run_all(again)) == {**dict.fromkeys(ORDER, "skipped"), "export": "ran"}
    assert "model-1.safetensors has 0 bytes, 1 were verified" in caplog.text
    assert export_shard(again).read_text() == "w"


def test_deleted_checkpoint_file_reruns_convert_and_downstream(tmp_path: Path, caplog) -> None:
    backend = backend_at(tmp_path)
    run_all(backend)
    (local(backend.layout.converted_checkpoint) / "params" / "x").unlink()
    caplog.set_level(logging.INFO)
    assert statuses(run_all(backend_at(tmp_path))) == DOWNSTREAM_OF_CONVERT
    assert "params/x is missing" in caplog.text


def test_same_size_rewrite_is_found_by_its_content(tmp_path: Path, caplog) -> None:
    backend = backend_at(tmp_path)
    run_all(backend)
    shard = export_shard(backend)
    shard.write_text("X")  # same size, other bytes, new mtime
    caplog.set_level(logging.INFO)
    assert statuses(run_all(backend_at(tmp_path)))["export"] == "ran"
    assert "rewritten since it was verified" in caplog.text


def test_touched_but_unchanged_files_still_skip(tmp_path: Path) -> None:
    backend = backend_at(tmp_path)
    run_all(backend)
    for path in local(backend.layout.export_dir).rglob("*"):
        os.utime(path, ns=(1, 1))
    assert statuses(run_all(backend_at(tmp_path))) == dict.fromkeys(ORDER, "skipped")


def test_a_copied_output_root_skips_everything(tmp_path: Path) -> None:
    run_all(backend_at(tmp_path / "a"))
    # copy without metadata: new mtimes, same bytes; records are relative to the root
    shutil.copytree(tmp_path / "a", tmp_path / "b", copy_function=shutil.copy)
    shutil.rmtree(tmp_path / "a")
    moved = backend_at(tmp_path / "b")
    assert statuses(run_all(moved)) == dict.fromkeys(ORDER, "skipped")
    record = json.loads(local(moved.layout.record(moved.layout.export_dir)).read_text())
    assert record["outputs"]["hf_export"].startswith("./")
    assert str(tmp_path) not in json.dumps(record["outputs"])


def strip_manifests(backend) -> None:
    for path in local(backend.layout.root).rglob("tpurl-lineage.json"):
        record = json.loads(path.read_text())
        record.pop("manifest", None)
        path.write_text(json.dumps(record))


def test_record_without_manifest_is_verified_once_then_guarded(tmp_path: Path, caplog) -> None:
    backend = backend_at(tmp_path)
    run_all(backend)
    strip_manifests(backend)
    caplog.set_level(logging.INFO)
    assert statuses(run_all(backend_at(tmp_path))) == dict.fromkeys(ORDER, "skipped")
    assert "recorded before manifests; manifest added" in caplog.text
    record = json.loads(local(backend.layout.record(backend.layout.export_dir)).read_text())
    assert "model-1.safetensors" in record["manifest"]["hf_export"]
    with open(export_shard(backend), "r+b") as handle:
        handle.truncate(0)
    assert statuses(run_all(backend_at(tmp_path)))["export"] == "ran"


def test_record_without_manifest_over_a_broken_output_reruns(tmp_path: Path) -> None:
    backend = backend_at(tmp_path)
    run_all(backend)
    strip_manifests(backend)
    (local(backend.layout.converted_checkpoint) / "_METADATA").unlink()
    assert statuses(run_all(backend_at(tmp_path))) == DOWNSTREAM_OF_CONVERT


@pytest.mark.parametrize("damage", ["corrupt-record", "deleted-record"])
def test_rerun_starts_from_a_clean_directory_and_keeps_logs(tmp_path: Path, caplog,
                                                             damage: str) -> None:
    backend = backend_at(tmp_path)
    run_all(backend)
    convert_dir = local(backend.layout.convert_dir)
    stale = convert_dir / "0" / "items" / "params" / "stale-from-an-old-attempt"
    stale.write_text("old")
    record = local(backend.layout.record(backend.layout.convert_dir))
    if damage == "corrupt-record":  # over an output that no longer verifies: it reruns
        record.write_text("{ truncated")
        (convert_dir / "0" / "items" / "_METADATA").unlink()
    else:
        record.unlink()
    caplog.set_level(logging.INFO)
    assert statuses(run_all(backend_at(tmp_path)))["convert"] == "ran"
    assert not stale.exists()
    assert (convert_dir / "tpurl-logs" / "convert-hf-to-maxtext.log").is_file()
    assert "removed" in caplog.text and "earlier unverified attempt" in caplog.text
    if damage == "corrupt-record":
        assert "is not a lineage record" in caplog.text and "does not verify" in caplog.text


def test_training_leftovers_are_kept_as_resume_points(tmp_path: Path) -> None:
    backend = backend_at(tmp_path)
    run_all(backend)
    actor = local(backend.layout.actor_checkpoints)
    local(backend.layout.record(backend.layout.train_run_dir)).unlink()
    assert statuses(run_all(backend_at(tmp_path)))["train"] == "ran"
    assert (actor / "1" / "model_params" / "x").is_file()


def test_a_failed_stage_leaves_no_empty_directories_but_keeps_its_logs(tmp_path: Path) -> None:
    backend = backend_at(tmp_path)
    backend.damage.add("train-grpo")
    run_dir = local(backend.layout.train_run_dir)
    (run_dir / "checkpoints" / "actor" / "7").mkdir(parents=True)  # what a crashed run leaves
    with pytest.raises(Exception, match="newest actor checkpoint"):
        run_all(backend)
    assert not (run_dir / "checkpoints" / "actor" / "7").exists()
    assert (run_dir / "tpurl-logs" / "train-grpo.log").is_file()


def test_a_damaged_verified_output_is_cleared_as_what_it_was(tmp_path: Path, caplog) -> None:
    """Files of a verified output that changed since are not called "what an
    unverified attempt left"."""
    backend = backend_at(tmp_path)
    run_all(backend)
    with open(export_shard(backend), "r+b") as handle:
        handle.truncate(0)
    caplog.set_level(logging.INFO)
    run_all(backend_at(tmp_path))
    assert "of the verified output, damaged since it was verified" in caplog.text
    assert "unverified attempt" not in caplog.text
