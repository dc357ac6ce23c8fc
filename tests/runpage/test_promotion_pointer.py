"""The promoted pointer beside the results: moved by a pass only, never by a worse model."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.config import load_profile
from flows.core.failures import StageFailed
from flows.core.storage import LocalStorage
from flows.runpage.promotion import (
    comparison_rows,
    pointer_uris,
    promote_or_reject,
    read_history,
    read_promoted,
)
from tests.support.scores import summary


def evaluation(trained: float, base: float = 0.3) -> dict:
    return {"trained": summary(trained).model_dump(), "base": summary(base).model_dump()}


def artifacts(n: int) -> dict[str, str]:
    return {"hf_export": f"file:///exports/{n}", "trained_checkpoint": f"file:///ckpt/{n}"}


@pytest.fixture
def profile(tmp_path: Path):
    return load_profile("rehearsal", {"local.root": str(tmp_path)}, environ={})


def test_a_better_model_moves_the_pointer_and_a_worse_one_does_not(profile) -> None:
    storage = LocalStorage()
    decision, model = promote_or_reject(storage, profile, "run-1", evaluation(0.5),
                                        artifacts(1), "file:///data/v1.parquet", "k1")
    assert decision.promoted and model is not None
    pointer = read_promoted(storage, profile)
    assert pointer is not None and pointer.model_uri == "file:///exports/1"
    assert (pointer.run, pointer.dataset, pointer.revision) == \
        ("run-1", "file:///data/v1.parquet", "main")
    before = storage.read_text(pointer_uris(profile)[0])

    worse, still = promote_or_reject(storage, profile, "run-2", evaluation(0.45), artifacts(2),
                                     "file:///data/v2.parquet", "k2")
    assert not worse.promoted and worse.reference_kind == "promoted"
    assert still is not None and still.run == "run-1"
    assert storage.read_text(pointer_uris(profile)[0]) == before  # the pointer did not move
    assert [m.run for m in read_history(storage, profile)] == ["run-1"]
    rows = comparison_rows(evaluation(0.45), still, worse)
    assert [r["model"] for r in rows] == ["base", "trained (this run)", "promoted (run-1)"]
    assert rows[1]["decision"].startswith("rejected")

    better, new = promote_or_reject(storage, profile, "run-3", evaluation(0.7), artifacts(3),
                                    None, "k3")
    assert better.promoted and new is not None and new.dataset.startswith("hub:")
    assert [m.run for m in read_history(storage, profile)] == ["run-1", "run-3"]


def test_a_rerun_of_the_promoted_model_changes_nothing(profile) -> None:
    storage = LocalStorage()
    promote_or_reject(storage, profile, "run-1", evaluation(0.5), artifacts(1), None, "k")
    again, model = promote_or_reject(storage, profile, "run-1b", evaluation(0.5), artifacts(1),
                                     None, "k")
    assert again.unchanged and model is not None and model.run == "run-1"
    assert len(read_history(storage, profile)) == 1


def test_a_damaged_pointer_stops_the_decision(profile) -> None:
    storage = LocalStorage()
    storage.write_text(pointer_uris(profile)[0], "{half")
    with pytest.raises(StageFailed) as failed:
        promote_or_reject(storage, profile, "run-1", evaluation(0.5), artifacts(1), None, "k")
    assert failed.value.diagnosis.code == "eval/pointer-unreadable"


def test_status_lines_show_the_pointer(profile) -> None:
    from flows.runpage.promotion import promoted_lines

    storage = LocalStorage()
    assert promoted_lines(storage, profile)[0].startswith("promoted model: none yet")
    promote_or_reject(storage, profile, "run-1", evaluation(0.5), artifacts(1), None, "k")
    lines = promoted_lines(storage, profile)
    assert lines[0] == "promoted model: file:///exports/1" and "run run-1" in lines[1]
    assert "mean_reward 0.5000" in lines[2]
