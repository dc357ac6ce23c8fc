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
                                        artifacts(1), "file:///data/v1.parquet", "k1", "s")
    assert decision.promoted and model is not None
    pointer = read_promoted(storage, profile)
    assert pointer is not None and pointer.model_uri == "file:///exports/1"
    assert (pointer.run, pointer.dataset, pointer.revision) == \
        ("run-1", "file:///data/v1.parquet", "main")
    before = storage.read_text(pointer_uris(profile)[0])

    worse, still = promote_or_reject(storage, profile, "run-2", evaluation(0.45), artifacts(2),
                                     "file:///data/v2.parquet", "k2", "s")
    assert not worse.promoted and worse.reference_kind == "promoted"
    assert still is not None and still.run == "run-1"
    assert storage.read_text(pointer_uris(profile)[0]) == before  # the pointer did not move
    assert [m.run for m in read_history(storage, profile)] == ["run-1"]
    rows = comparison_rows(evaluation(0.45), still, worse)
    assert [r["model"] for r in rows] == ["base", "trained (this run)",
                                          "promoted before this run (run-1)"]
    assert rows[1]["decision"].startswith("rejected")

    better, new = promote_or_reject(storage, profile, "run-3", evaluation(0.7), artifacts(3),
                                    None, "k3", "s")
    assert better.promoted and new is not None and new.dataset.startswith("hub:")
    assert [m.run for m in read_history(storage, profile)] == ["run-1", "run-3"]


def test_a_rerun_of_the_promoted_model_changes_nothing(profile) -> None:
    storage = LocalStorage()
    promote_or_reject(storage, profile, "run-1", evaluation(0.5), artifacts(1), None, "k", "s")
    again, model = promote_or_reject(storage, profile, "run-1b", evaluation(0.5), artifacts(1),
                                     None, "k", "s")
    assert again.unchanged and model is not None and model.run == "run-1"
    assert len(read_history(storage, profile)) == 1


def test_a_damaged_pointer_stops_the_decision(profile) -> None:
    storage = LocalStorage()
    storage.write_text(pointer_uris(profile)[0], "{half")
    with pytest.raises(StageFailed) as failed:
        promote_or_reject(storage, profile, "run-1", evaluation(0.5), artifacts(1), None, "k", "s")
    assert failed.value.diagnosis.code == "eval/pointer-unreadable"


def test_status_lines_show_the_pointer(profile) -> None:
    from flows.runpage.promotion import promoted_lines

    storage = LocalStorage()
    assert promoted_lines(storage, profile)[0].startswith("promoted model: none yet")
    promote_or_reject(storage, profile, "run-1", evaluation(0.5), artifacts(1), None, "k", "s")
    lines = promoted_lines(storage, profile)
    assert lines[0] == "promoted model: file:///exports/1" and "run run-1" in lines[1]
    assert "mean_reward 0.5000" in lines[2]


def test_a_retrain_on_another_held_out_set_is_judged_by_lift_and_says_so(profile) -> None:
    """The pointer keeps its scores' held-out set; the next run, scored on other rows, is
    compared by lift over base, and its table row and the promoted row say why."""
    storage = LocalStorage()
    promote_or_reject(storage, profile, "run-1", evaluation(0.8, base=0.7), artifacts(1),
                      "file:///data/v1.parquet", "k1", "set-v1")
    assert read_promoted(storage, profile).score_key == "set-v1"
    hard = evaluation(0.6, base=0.4)  # lower raw scores, twice the lift
    judged_against = read_promoted(storage, profile)
    decision, model = promote_or_reject(storage, profile, "run-2", hard, artifacts(2),
                                        "file:///data/v2.parquet", "k2", "set-v2")
    assert decision.promoted and decision.basis == "lift" and model.run == "run-2"
    assert read_promoted(storage, profile).score_key == "set-v2"
    rows = comparison_rows(hard, judged_against, decision)
    assert "lift over base" in rows[1]["decision"] and "another held-out set" in rows[1]["decision"]
    # after a promotion the third row is still the model the run was judged against
    assert rows[2]["model"] == "promoted before this run (run-1, its own held-out set)"
    assert rows[2]["mean_reward"] == summary(0.8).row()["mean_reward"]

    easy = evaluation(0.95, base=0.9)  # a higher raw score, a smaller lift
    rejected, still = promote_or_reject(storage, profile, "run-3", easy, artifacts(3),
                                        "file:///data/v3.parquet", "k3", "set-v3")
    assert not rejected.promoted and still.run == "run-2"
    rows = comparison_rows(easy, still, rejected)
    assert rows[2]["model"] == "promoted before this run (run-2, its own held-out set)"
