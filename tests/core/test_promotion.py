"""The promotion rule and the score intervals: pure functions, pure tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.config.evaluation import PromotionRule
from flows.core.promotion import PromotedModel, decide
from flows.core.scores import mean_interval, wilson
from tests.support.scores import summary


def promoted(mean: float, run: str = "run-1", uri: str = "file:///old", base: float = 0.1,
             score_key: str = "s") -> PromotedModel:
    return PromotedModel(model_uri=uri, trained_checkpoint="ckpt", scores=summary(mean),
                         base_scores=summary(base), run=run, dataset="d", revision="main",
                         promoted_at="2026-12-01T00:00:00+00:00", metric="mean_reward",
                         score_key=score_key)


def test_wilson_interval_matches_the_textbook_values() -> None:
    # 0 of 4: [0, 0.490]; 2 of 4: [0.150, 0.850]; 4 of 4: [0.510, 1] (Wilson 1927, z = 1.96)
    assert (wilson(0, 4).low, round(wilson(0, 4).high, 3)) == (0.0, 0.49)
    assert (round(wilson(2, 4).low, 3), round(wilson(2, 4).high, 3)) == (0.15, 0.85)
    assert (round(wilson(4, 4).low, 3), wilson(4, 4).high) == (0.51, 1.0)
    assert wilson(0, 0).model_dump() == {"value": 0.0, "low": 0.0, "high": 1.0}


def test_mean_interval_is_normal_and_degenerate_without_spread() -> None:
    interval = mean_interval([1.0, 2.0, 3.0, 4.0], 0.0)
    assert interval.value == 2.5
    assert interval.high - 2.5 == pytest.approx(1.959964 * (1.6666667 / 4) ** 0.5, rel=1e-5)
    assert mean_interval([0.7], 0.0).model_dump() == {"value": 0.7, "low": 0.7, "high": 0.7}
    assert mean_interval([], 0.3).value == 0.3  # the program's own mean when it recorded none


def test_better_than_base_promotes_and_worse_rejects() -> None:
    rule = PromotionRule(metric="mean_reward", min_delta=0.0, against="base")
    assert decide(rule, summary(0.6), summary(0.5), None, "file:///new", "s").promoted
    worse = decide(rule, summary(0.4), summary(0.5), None, "file:///new", "s")
    assert not worse.promoted and worse.reference_kind == "base"
    assert worse.delta == pytest.approx(-0.1) and "misses" in worse.reason


def test_against_promoted_uses_the_promoted_model_and_falls_back_to_base() -> None:
    rule = PromotionRule()  # the documented default: mean_reward, 0.0, against promoted
    current = promoted(0.8)
    beaten = decide(rule, summary(0.7), summary(0.1), current, "file:///new", "s")
    assert not beaten.promoted and beaten.reference_kind == "promoted"
    assert beaten.reference == pytest.approx(0.8) and beaten.reference_run == "run-1"
    first = decide(rule, summary(0.2), summary(0.1), None, "file:///new", "s")
    assert first.promoted and first.reference_kind == "base"
    assert "nothing is promoted yet" in first.notes[0]


def test_min_delta_demands_a_margin_and_a_negative_one_is_a_tolerance() -> None:
    margin = PromotionRule(min_delta=0.05, against="base")
    assert not decide(margin, summary(0.53), summary(0.5), None, "u", "s").promoted
    assert decide(margin, summary(0.56), summary(0.5), None, "u", "s").promoted
    tolerant = PromotionRule(min_delta=-0.05, against="base")
    assert decide(tolerant, summary(0.46), summary(0.5), None, "u", "s").promoted
    assert decide(PromotionRule(against="base"), summary(0.5), summary(0.5), None, "u", "s").promoted


def test_accuracy_metric_reads_the_accuracy() -> None:
    rule = PromotionRule(metric="accuracy", against="base")
    decision = decide(rule, summary(0.1, correct=3), summary(0.9, correct=1), None, "u", "s")
    assert decision.promoted and decision.trained == 0.75 and decision.reference == 0.25


def test_the_promoted_model_itself_is_unchanged_not_promoted_again() -> None:
    decision = decide(PromotionRule(), summary(0.5), summary(0.1), promoted(0.5, uri="u"), "u", "s")
    assert decision.promoted and decision.unchanged


def test_scores_from_another_held_out_set_are_compared_by_their_lift_over_base() -> None:
    """A retrain on a new dataset holds out other rows: the promoted model's 0.8 was made on
    an easy set (its base scored 0.7 there), this run's 0.6 on a hard one (base 0.4). Raw,
    0.6 < 0.8 would reject a model that improved twice as much; by lift it passes."""
    rule = PromotionRule()
    elsewhere = promoted(0.8, base=0.7, score_key="other-set")
    better = decide(rule, summary(0.6), summary(0.4), elsewhere, "file:///new", "this-set")
    assert better.promoted and better.basis == "lift" and better.reference_kind == "promoted"
    assert better.trained == pytest.approx(0.2) and better.reference == pytest.approx(0.1)
    assert "lift over base +0.2000" in better.reason and "another held-out set" in better.notes[0]
    # and the converse: a higher raw score on an easier set is no improvement
    easy = decide(rule, summary(0.9), summary(0.85), promoted(0.5, base=0.1, score_key="x"),
                  "file:///new", "this-set")
    assert not easy.promoted and easy.delta == pytest.approx(0.05 - 0.4)
    # the same set: the raw scores, as before
    same = decide(rule, summary(0.6), summary(0.4), promoted(0.8, base=0.7, score_key="k"),
                  "file:///new", "k")
    assert not same.promoted and same.basis == "score" and same.reference == pytest.approx(0.8)


def test_a_pointer_older_than_score_keys_is_compared_by_lift() -> None:
    old = promoted(0.8, base=0.7, score_key="")
    decision = decide(PromotionRule(), summary(0.6), summary(0.4), old, "file:///new", "k")
    assert decision.basis == "lift" and decision.promoted
    assert "before its held-out set was recorded" in decision.notes[0]


def test_the_score_key_follows_the_held_out_set_not_the_training_settings(
        tmp_path: Path) -> None:
    from flows.config import load_profile
    from flows.core.eval_programs import score_key

    def key(**overrides: str) -> str:
        return score_key(load_profile("rehearsal", {"local.root": str(tmp_path), **overrides},
                                      environ={}))

    assert key() == key(**{"train.args.learning_rate": "1e-3"})  # scores compare
    assert key() != key(**{"eval.batches": "3"})  # other rows are scored
    assert key() != key(**{"eval.sampling": "standard"})  # scored otherwise
    assert key() != key(**{"train.args.data_template_path": ""})  # other prompts
    # a retrain's announced dataset (the flow's dataset_uri becomes data.train_files)
    v1 = key(**{"data.train_files": str(tmp_path / "v1.parquet")})
    assert v1 != key(**{"data.train_files": str(tmp_path / "v2.parquet")}) and v1 != key()
    # a declared held-out set is the same rows whatever the run trains on
    held = {"eval.files": str(tmp_path / "held-out.parquet")}
    assert key(**held, **{"data.train_files": str(tmp_path / "v1.parquet")}) == \
        key(**held, **{"data.train_files": str(tmp_path / "v2.parquet")})


def test_the_tutorial_estimate_comes_from_its_own_train_estimate() -> None:
    from flows.config import load_profile
    from flows.config.eval_hours import STARTUP_H
    from flows.core.eval_estimate import plan_notes, tutorial_estimate

    est = tutorial_estimate()  # 50 steps x 8 prompts x 4 generations in 4.0 h on a 4x8 slice
    assert (est.chips, est.rows) == (32, 40)
    assert est.hours_per_model == pytest.approx(STARTUP_H + 40 * 4.0 / 1600)
    assert est.first_run_chip_hours == pytest.approx(2 * est.later_run_chip_hours)
    assert "22.4 chip-hours" in plan_notes(load_profile("rehearsal", environ={}), 4)[1]


def test_the_gke_plan_notes_the_profiles_own_estimate() -> None:
    from flows.config.eval_hours import STARTUP_H, stage_hours
    from flows.core.eval_estimate import plan_notes
    from tests.support.profiles import tutorial_profile

    derived = tutorial_profile(**{"eval.batches": "2"})  # 16 rows of 1600 completions in 4 h
    assert stage_hours(derived, "evaluate") == pytest.approx(2 * (STARTUP_H + 16 * 4.0 / 1600))
    (note,) = plan_notes(derived, 16)
    assert "0.58 h" in note and "18.6 chip-hours" in note and "derived" in note
    given = tutorial_profile(**{"eval.batches": "2", "gke.estimated_hours.evaluate": "1.5"})
    assert stage_hours(given, "evaluate") == 1.5
    assert "gke.estimated_hours.evaluate" in plan_notes(given, 16)[0]


def test_a_rerun_of_the_promoted_export_is_still_judged_on_its_scores() -> None:
    """A pointer naming this run's export does not wave it through unjudged (a training pod
    can write the pointer): its own scores decide, against its base."""
    forged = promoted(0.99, uri="gs://b/export", score_key="s")
    worse_than_base = decide(PromotionRule(), summary(0.2), summary(0.3), forged,
                             "gs://b/export", "s")
    assert not worse_than_base.promoted and not worse_than_base.unchanged
    assert worse_than_base.reference_kind == "base" and worse_than_base.reference == 0.3
    assert "already the promoted one" in worse_than_base.notes[0]
    strict = PromotionRule(min_delta=0.5)
    assert not decide(strict, summary(0.5), summary(0.3), forged, "gs://b/export", "s").promoted
