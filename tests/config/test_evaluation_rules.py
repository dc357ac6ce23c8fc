"""The eval and promotion sections: refused before anything runs, field and fix named."""

from __future__ import annotations

import pytest

from flows.config import load_profile
from flows.config.errors import ProfileError
from flows.config.evaluation import PromotionRule
from tests.support.profiles import INFRA_OVERRIDES, TUTORIAL


def problems(profile: str, overrides: dict[str, str]) -> dict[str, str]:
    with pytest.raises(ProfileError) as refused:
        load_profile(profile, overrides, environ={})
    return {issue.field: f"{issue.problem} | {issue.fix}" for issue in refused.value.issues}


@pytest.mark.parametrize(("field", "value", "words"), [
    ("promotion.metric", "loss", "use one of mean_reward, accuracy, format_accuracy"),
    ("promotion.against", "best", "use base"),
    ("eval.sampling", "hot", "greedy"),
    ("eval.batches", "0", "greater than or equal to 1"),
])
def test_a_bad_value_names_its_field_and_the_fix(field: str, value: str, words: str) -> None:
    found = problems("rehearsal", {field: value})
    assert field in found and words in found[field]


def test_promotion_without_eval_is_refused() -> None:
    found = problems("rehearsal", {"eval": "", "watch": ""})
    assert "nothing is scored" in found["promotion"] and "eval: {}" in found["promotion"]


def test_scoring_on_the_training_files_is_refused() -> None:
    found = problems("rehearsal", {"data.train_files": "/data/v1.parquet",
                                   "data.dataset_name": "nvidia/OpenMathInstruct-2",
                                   "eval.files": "/data/v1.parquet"})
    assert "rows it trained on" in found["eval.files"]


def test_the_default_rule_is_not_worse_than_the_promoted_model() -> None:
    profile = load_profile("rehearsal", {"promotion": ""}, environ={})
    assert profile.promotion is None and profile.promotion_rule == PromotionRule()
    assert (PromotionRule().metric, PromotionRule().min_delta, PromotionRule().against) == \
        ("mean_reward", 0.0, "promoted")
    assert load_profile("rehearsal", {"promotion": "", "eval": "", "watch": ""},
                        environ={}).promotion_rule is None


def test_evaluation_on_gke_loads_and_reads_its_held_out_set_from_the_bucket() -> None:
    profile = load_profile(TUTORIAL, {**INFRA_OVERRIDES, "eval.batches": "5"}, environ={})
    assert profile.eval is not None and profile.promotion_rule == PromotionRule()
    for where in ("/data/held-out.parquet", "file:///data/held-out.parquet", "held.parquet"):
        found = problems(TUTORIAL, {**INFRA_OVERRIDES, "eval.files": where})
        assert "gs://BUCKET/" in found["eval.files"] and where in found["eval.files"]
    for where in ("gs://b/held-out/v1.parquet", "hf://datasets/org/set/test.parquet"):
        assert load_profile(TUTORIAL, {**INFRA_OVERRIDES, "eval.files": where},
                            environ={}).eval is not None


def test_flex_start_nodes_that_would_end_before_the_evaluation_are_refused() -> None:
    """Training's estimate was checked against gke.max_run_hours, the evaluation's was not:
    a 6 h evaluation on flex-start nodes that live 5 h was accepted and reclaimed every time."""
    from tests.support.profiles import capacity_overrides

    flex = {**INFRA_OVERRIDES, **capacity_overrides("flex-start"), "gke.max_run_hours": "5",
            "eval.batches": "2"}
    found = problems(TUTORIAL, {**flex, "gke.estimated_hours.evaluate": "6"})
    assert "shorter than the estimated evaluation (6 h, both models)" in found[
        "gke.max_run_hours"]
    assert "raise gke.max_run_hours to at least 6" in found["gke.max_run_hours"]
    profile = load_profile(TUTORIAL, {**flex, "gke.estimated_hours.evaluate": "5"}, environ={})
    assert profile.gke is not None and profile.gke.max_run_hours == 5


def test_a_flex_start_evaluation_budget_beyond_the_nodes_lifetime_is_refused() -> None:
    """The evaluation runs on the slice under gke.run_budget_s: with the training's own
    budget set, a run_budget_s past the nodes' 12 h was accepted for the evaluation."""
    from tests.support.profiles import capacity_overrides

    flex = {**INFRA_OVERRIDES, **capacity_overrides("flex-start"), "eval.batches": "2",
            "gke.train_run_budget_s": "43200", "gke.run_budget_s": str(13 * 3600)}
    found = problems(TUTORIAL, flex)
    assert set(found) == {"gke.run_budget_s"}, found
    assert found["gke.run_budget_s"].startswith("46800 s (13 h) lets the evaluation run "
                                                "longer than gke.max_run_hours (12 h)")
    assert "set gke.run_budget_s=43200" in found["gke.run_budget_s"]
    del flex["eval.batches"]  # no evaluation: the budget bounds the CPU pool's stages only
    assert load_profile(TUTORIAL, flex, environ={}).gke is not None
