"""The promoted pointer beside the results: moved by a pass only, never by a worse model; it
carries its scores' key and its export's digest, and a pointer that no longer matches the
export (or names one outside the root) is not taken as the reference. Real files
under a real output root; the same rules on fake-gcs-server at the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.config import load_profile
from flows.core.failures import StageFailed
from flows.core.promotion_store import pointer_uris, read_history, read_promoted
from flows.core.storage import LocalStorage, file_uri
from flows.runpage.promotion import comparison_rows, pointer_problem, promote_or_reject
from tests.support.scores import summary


def evaluation(trained: float, base: float = 0.3) -> dict:
    return {"trained": summary(trained).model_dump(), "base": summary(base).model_dump()}


ARTIFACTS: dict[int, dict[str, str]] = {}


def artifacts(n: int) -> dict[str, str]:
    return ARTIFACTS[n]


@pytest.fixture
def profile(tmp_path: Path):
    """The rehearsal profile on tmp_path, with five real exports under its root."""
    for n in range(5):
        export = tmp_path / "exports" / str(n)
        export.mkdir(parents=True)
        (export / "model.safetensors").write_bytes(bytes([n]) * 64)
        (export / "config.json").write_text('{"model_type": "qwen3_moe"}')
        ARTIFACTS[n] = {"hf_export": file_uri(export),
                        "trained_checkpoint": file_uri(tmp_path / "ckpt" / str(n))}
    return load_profile("rehearsal", {"local.root": str(tmp_path)}, environ={})


def test_a_better_model_moves_the_pointer_and_a_worse_one_does_not(profile) -> None:
    storage = LocalStorage()
    decision, model = promote_or_reject(storage, profile, "run-1", evaluation(0.5),
                                        artifacts(1), "file:///data/v1.parquet", "k1", "s")
    assert decision.promoted and model is not None
    pointer = read_promoted(storage, profile)
    assert pointer is not None and pointer.model_uri == artifacts(1)["hf_export"]
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
    assert lines[0] == f"promoted model: {artifacts(1)['hf_export']}" and "run run-1" in lines[1]
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


def test_the_pointer_carries_the_scores_key_and_the_exports_digest(profile) -> None:
    from flows.core.manifest import build_manifest, manifest_digest

    storage = LocalStorage()
    promote_or_reject(storage, profile, "run-1", evaluation(0.5), artifacts(1), None, "k", "set-1")
    pointer = read_promoted(storage, profile)
    assert pointer.score_key == "set-1"
    assert pointer.export_digest == manifest_digest(build_manifest(storage,
                                                                   artifacts(1)["hf_export"]))
    assert pointer_problem(storage, profile, pointer) is None


def test_a_rewritten_export_makes_the_pointer_untrusted_and_no_reference(profile) -> None:
    """A pod that swaps the promoted export's weights: the pointer no longer matches, so the
    next run is judged against its base (with the reason), and a fair run replaces it."""
    storage = LocalStorage()
    promote_or_reject(storage, profile, "run-1", evaluation(0.9), artifacts(1), None, "k", "s")
    weights = Path(artifacts(1)["hf_export"].removeprefix("file://")) / "model.safetensors"
    weights.write_bytes(b"swapped" * 10)
    problem = pointer_problem(storage, profile, read_promoted(storage, profile))
    assert problem is not None and "no longer matches the pointer's digest" in problem
    decision, model = promote_or_reject(storage, profile, "run-2", evaluation(0.5),
                                        artifacts(2), None, "k2", "s")
    assert decision.reference_kind == "base" and "not trusted" in decision.notes[0]
    assert decision.promoted and model.run == "run-2"


@pytest.mark.parametrize("model_uri", ["file:///etc", "OUTSIDE", "ROOT/exports/../../x"])
def test_a_pointer_naming_an_export_outside_the_root_is_untrusted(profile, tmp_path: Path,
                                                                 model_uri: str) -> None:
    storage = LocalStorage()
    promote_or_reject(storage, profile, "run-1", evaluation(0.5), artifacts(1), None, "k", "s")
    pointer = read_promoted(storage, profile)
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir(exist_ok=True)
    uri = model_uri.replace("OUTSIDE", file_uri(outside)).replace("ROOT", file_uri(tmp_path))
    forged = pointer.model_copy(update={"model_uri": uri})
    problem = pointer_problem(storage, profile, forged)
    assert problem is not None and ("outside the output root" in problem
                                    or "climbs out" in problem)


def test_a_pointer_without_its_keys_is_untrusted(profile) -> None:
    storage = LocalStorage()
    promote_or_reject(storage, profile, "run-1", evaluation(0.5), artifacts(1), None, "k", "s")
    pointer = read_promoted(storage, profile)
    for field, shown in (("score_key", "scores' key"), ("export_digest", "export digest")):
        problem = pointer_problem(storage, profile, pointer.model_copy(update={field: ""}))
        assert problem is not None and shown in problem


def test_a_pointer_forged_to_name_this_runs_export_does_not_promote_it(profile) -> None:
    """A pod writes promoted.json naming the export this run is
    about to make, with flattering scores. The run is judged on its own scores anyway."""
    storage = LocalStorage()
    promote_or_reject(storage, profile, "run-1", evaluation(0.5), artifacts(1), None, "k", "s")
    honest = read_promoted(storage, profile)
    forged = honest.model_copy(update={"model_uri": artifacts(2)["hf_export"], "run": "forged"})
    storage.write_text(pointer_uris(profile)[0], forged.model_dump_json())
    decision, still = promote_or_reject(storage, profile, "run-2", evaluation(0.2, base=0.3),
                                        artifacts(2), None, "k2", "s")
    assert not decision.promoted and not decision.unchanged
    assert still.run == "forged"  # a rejection moves nothing, and announces a rejection


def test_the_same_rules_hold_on_gcs(store, tmp_path: Path) -> None:
    """fake-gcs-server: the digest is made of the objects' sizes and digests, and an object
    rewritten under the export makes the pointer untrusted."""
    from tests.support.gcs import GCS_BUCKET
    from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED

    gke = load_profile(TUTORIAL, {**TUTORIAL_REQUIRED, "gke.bucket": GCS_BUCKET,
                                  "eval.batches": "2"}, environ={})
    export = f"gs://{GCS_BUCKET}/qwen3/hf/export-1"
    for name, data in (("model.safetensors", "weights"), ("config.json", "{}")):
        store.write_text(f"{export}/{name}", data)
    arts = {"hf_export": export, "trained_checkpoint": f"gs://{GCS_BUCKET}/ckpt"}
    decision, model = promote_or_reject(store, gke, "run-1", evaluation(0.5), arts, None, "k", "s")
    assert decision.promoted and model.export_digest.startswith("sha256:")
    assert pointer_problem(store, gke, read_promoted(store, gke)) is None
    store.write_text(f"{export}/model.safetensors", "swapped")
    assert "no longer matches" in pointer_problem(store, gke, read_promoted(store, gke))
