"""flows/core/promotion.py decide, every field of the decision in each branch (mutation
testing found the notes, the reference run and the reason text unchecked)."""

from __future__ import annotations

import pytest

from flows.config.evaluation import PromotionRule
from flows.core.promotion import decide
from tests.core.test_promotion import promoted
from tests.support.scores import summary

AGAINST_PROMOTED = PromotionRule(metric="mean_reward", min_delta=0.05, against="promoted")


def test_against_base_every_field() -> None:
    rule = PromotionRule(metric="mean_reward", min_delta=0.1, against="base")
    decision = decide(rule, summary(0.7), summary(0.5), promoted(0.9), "file:///new", "s")
    assert decision.model_dump() == dict(
        promoted=True, metric="mean_reward", trained=0.7, reference=0.5, reference_kind="base",
        basis="score", delta=pytest.approx(0.2), min_delta=0.1,
        reason="mean_reward 0.7000 vs base 0.5000: delta +0.2000 meets min_delta +0.1",
        reference_run=None, unchanged=False, notes=[], held=False)


def test_nothing_promoted_yet_falls_back_to_base_and_says_so() -> None:
    decision = decide(AGAINST_PROMOTED, summary(0.5), summary(0.5), None, "file:///new", "s")
    assert not decision.promoted and decision.reference_kind == "base"
    assert decision.reason == ("mean_reward 0.5000 vs base 0.5000: delta +0.0000 misses "
                               "min_delta +0.05")
    assert decision.notes == ["nothing is promoted yet: compared with the base model"]


def test_the_same_held_out_set_compares_scores_with_the_promoted_model() -> None:
    decision = decide(AGAINST_PROMOTED, summary(0.8), summary(0.1), promoted(0.7, run="r7"),
                      "file:///new", "s")
    assert decision.model_dump() == dict(
        promoted=True, metric="mean_reward", trained=0.8, reference=0.7,
        reference_kind="promoted", basis="score", delta=pytest.approx(0.1), min_delta=0.05,
        reason="mean_reward 0.8000 vs promoted 0.7000: delta +0.1000 meets min_delta +0.05",
        reference_run="r7", unchanged=False, notes=[], held=False)


@pytest.mark.parametrize(("key", "why"), [
    ("other", "on another held-out set, with other evaluation settings or under another recipe"),
    ("", "before its held-out set was recorded"),
])
def test_another_held_out_set_compares_lifts_and_says_why(key: str, why: str) -> None:
    decision = decide(AGAINST_PROMOTED, summary(0.6), summary(0.2),
                      promoted(0.9, run="r3", base=0.6, score_key=key), "file:///new", "s")
    assert (decision.basis, decision.trained, decision.reference) == (
        "lift", pytest.approx(0.4), pytest.approx(0.3))
    assert decision.promoted and decision.reference_run == "r3"
    assert decision.reason == ("mean_reward lift over base +0.4000 vs the promoted model's "
                               "lift +0.3000: delta +0.1000 meets min_delta +0.05")
    assert decision.notes == [
        f"the promoted model (run r3) was scored {why}, so its scores are not comparable "
        "with this run's: compared by the lift over each one's base model on its own "
        "held-out set"]


def test_a_promoted_model_chosen_on_another_metric_is_noted() -> None:
    rule = PromotionRule(metric="accuracy", min_delta=0.0, against="promoted")
    champion = promoted(0.5).model_copy(update={"metric": "mean_reward"})
    decision = decide(rule, summary(0.6), summary(0.1), champion, "file:///new", "s")
    assert decision.notes[0] == ("the promoted model was chosen on mean_reward; compared on "
                                 "accuracy now")


def test_a_rerun_of_the_promoted_model_is_judged_against_its_base_only() -> None:
    champion = promoted(0.9, uri="file:///same")
    passed = decide(AGAINST_PROMOTED, summary(0.6), summary(0.5), champion, "file:///same", "s")
    assert passed.promoted and passed.unchanged and passed.reference_kind == "base"
    assert passed.reference_run is None and passed.reference == 0.5
    assert passed.notes == ["this run's model is already the promoted one: judged against its "
                            "base model's score, not against itself"]
    failed = decide(AGAINST_PROMOTED, summary(0.5), summary(0.5), champion, "file:///same", "s")
    assert not failed.promoted and not failed.unchanged
