"""A damaged lineage record (torn, truncated, garbage-written on disk) is not a reason to
rerun verified TPU stages: the output is verified again and its record rewritten, so the
stages after it stay skipped; only an output that no longer verifies reruns, with what
depends on it. Real files and records (tests/fakes/stage_backend.py runs the programs)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from flows.core.lineage import read_record
from flows.core.storage import LocalStorage
from tests.fakes.stage_backend import ORDER, backend_at, local, run_all, statuses


def damage(record: Path, how: str) -> None:
    if how == "truncated":  # a write cut off half-way
        with open(record, "r+b") as handle:
            handle.truncate(record.stat().st_size // 2)
    elif how == "empty":
        record.write_bytes(b"")
    elif how == "garbage":  # a bad disk block
        record.write_bytes(os.urandom(512))
    else:  # valid JSON, not a record
        record.write_text('{"format": 1}')


@pytest.mark.parametrize("how", ["truncated", "empty", "garbage", "not-a-record"])
def test_a_damaged_upstream_record_over_a_verified_output_is_rewritten_nothing_reruns(
        tmp_path: Path, caplog, how: str) -> None:
    first = run_all(backend_at(tmp_path))
    layout = backend_at(tmp_path).layout
    record = local(layout.record(layout.convert_dir))
    damage(record, how)
    caplog.set_level(logging.INFO)
    again = backend_at(tmp_path)
    second = run_all(again)
    assert statuses(second) == dict.fromkeys(ORDER, "skipped")
    assert sum(again.runs.values()) == 0  # no program ran: convert, train, export all kept
    assert {n: o.fingerprint for n, o in second.items()} == \
        {n: o.fingerprint for n, o in first.items()}
    assert "is not a lineage record" in caplog.text
    assert "convert: " in caplog.text and "its record was rewritten" in caplog.text
    rewritten = read_record(LocalStorage(), record.as_uri())
    assert rewritten is not None and rewritten.manifest["maxtext_checkpoint"]
    # and the rewritten record guards the output as the lost one did
    (local(layout.converted_checkpoint) / "params" / "x").unlink()
    assert statuses(run_all(backend_at(tmp_path)))["train"] == "ran"


def test_a_damaged_record_over_an_output_that_no_longer_verifies_reruns_it_and_after(
        tmp_path: Path, caplog) -> None:
    backend = backend_at(tmp_path)
    run_all(backend)
    layout = backend.layout
    damage(local(layout.record(layout.train_run_dir)), "garbage")
    newest = local(layout.actor_checkpoints) / "2" / "model_params"
    for path in sorted(newest.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    newest.rmdir()
    caplog.set_level(logging.INFO)
    again = backend_at(tmp_path)
    assert statuses(run_all(again)) == {"image": "skipped", "infra": "skipped",
                                        "convert": "skipped", "train": "ran", "export": "ran"}
    assert again.runs["train-grpo"] == 1
    assert "the output does not verify (the newest actor checkpoint is step 1" in caplog.text
    assert "running the stage again, and the stages after it with it" in caplog.text


def test_a_rewritten_record_over_other_files_reruns_what_was_made_from_the_old(
        tmp_path: Path, caplog) -> None:
    """The output verifies but is not byte for byte the one train was made from (a file was
    added since): convert is kept with a new record, train and export run, and the log says
    why each did what it did."""
    backend = backend_at(tmp_path)
    run_all(backend)
    layout = backend.layout
    damage(local(layout.record(layout.convert_dir)), "truncated")
    (local(layout.converted_checkpoint) / "params" / "added-since").write_text("?")
    caplog.set_level(logging.INFO)
    assert statuses(run_all(backend_at(tmp_path))) == {
        "image": "skipped", "infra": "skipped", "convert": "skipped", "train": "ran",
        "export": "ran"}
    assert "its record was rewritten" in caplog.text
    assert "train: the recorded output was made from other inputs (changed since: convert)" in \
        caplog.text
