"""The recipe where the team looks: the run page's Recipe section, the evaluation table and
the promotion decision name the reward functions and the recipe's digest, and a retrain
under an edited reward file says the recipe changed and how it was judged. Real profiles
(the rehearsal's, whose recipe is images/rehearsal/rewards.py), real keys, real files under
a temporary output root."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.common.paths import REHEARSAL_DIR
from flows.config import load_profile
from flows.config.profile import Profile
from flows.core.eval_programs import score_key
from flows.core.promotion_store import read_history, read_promoted
from flows.core.recipe_files import recipe_digest, recipe_summary
from flows.core.storage import LocalStorage, file_uri
from flows.runpage.promotion import comparison_rows, history_rows, promote_or_reject, promoted_lines
from flows.runpage.recipe import BUILTIN_LABEL, UNRECORDED, recipe_label, recipe_markdown
from tests.support.scores import summary


def _export(root: Path, n: int) -> dict[str, str]:
    export = root / "exports" / str(n)
    export.mkdir(parents=True)
    (export / "model.safetensors").write_bytes(bytes([n]) * 64)
    return {"hf_export": file_uri(export), "trained_checkpoint": file_uri(root / "ckpt" / str(n))}


def _profile(root: Path, rewards: Path | None = None) -> Profile:
    overrides = {"local.root": str(root)}
    if rewards is not None:
        overrides["recipe.rewards.file"] = str(rewards)
    return load_profile("rehearsal", overrides, environ={})


def _evaluation(profile: Profile, trained: float, base: float) -> dict:
    """What the evaluate stage's record holds (flows/stages/evaluate.py ``verify``)."""
    return {"trained": summary(trained).model_dump(), "base": summary(base).model_dump(),
            "recipe": recipe_summary(profile)}


@pytest.fixture
def edited_rewards(tmp_path: Path) -> Path:
    """The rehearsal's reward file, edited in place by its team: same name, new bytes."""
    edited = tmp_path / "team" / "rewards.py"
    edited.parent.mkdir()
    edited.write_text((REHEARSAL_DIR / "rewards.py").read_text() + "\n# tuned\n")
    return edited


def test_the_label_names_the_functions_and_the_digest() -> None:
    assert recipe_label({"digest": "0123abcd", "reward_functions": ["exact", "short"],
                         "files": {}}) == "reward functions exact, short (recipe 0123abcd)"
    assert recipe_label({"digest": "builtin", "reward_functions": [], "files": {}}) == \
        BUILTIN_LABEL == "MaxText's built-in recipe"
    assert recipe_label({"digest": "77", "reward_functions": []}) == \
        "MaxText's built-in reward functions (recipe 77)"  # a template or processor only
    assert recipe_label(None) == recipe_label({"digest": ""}) == UNRECORDED


def test_the_recipe_section_lists_each_file_with_its_digest(tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    recipe = recipe_summary(profile)
    text = recipe_markdown(recipe)
    assert text.startswith("### Recipe\n")
    assert "- reward functions: `ascii_fraction_reward`\n" in text
    assert f"- digest: `{recipe_digest(profile)}` (" in text
    (rewards,) = recipe["files"].values()
    assert rewards["path"].endswith("rewards.py") and rewards["digest"] in text
    assert recipe_markdown({"digest": "builtin", "reward_functions": [], "files": {}}) == \
        "### Recipe\n\nMaxText's built-in recipe\n"


def test_the_table_and_the_decision_name_the_recipe(tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    storage = LocalStorage()
    evaluation = _evaluation(profile, 0.5, 0.3)
    decision, model = promote_or_reject(storage, profile, "run-1", evaluation,
                                        _export(tmp_path, 1), None, "k1", score_key(profile))
    assert decision.promoted and model is not None
    label = f"reward functions ascii_fraction_reward (recipe {recipe_digest(profile)})"
    rows = comparison_rows(evaluation, None, decision, evaluation["recipe"])
    assert [r["recipe"] for r in rows] == [label, label]
    assert rows[1]["decision"].startswith(f"promoted under {label}: mean_reward 0.5000")
    assert model.recipe_digest == recipe_digest(profile)
    assert model.reward_functions == ["ascii_fraction_reward"]
    assert history_rows(read_history(storage, profile))[0]["recipe"] == label
    assert f"  scored under {label}" in promoted_lines(storage, profile)


def test_a_changed_recipe_is_said_and_judged_by_lift(tmp_path: Path,
                                                     edited_rewards: Path) -> None:
    """The score key holds the recipe's digest: the promoted model's scores, made under the
    old reward file, do not compare with the new one's. The decision says the recipe
    changed, compares by the lift over each one's base (what the code does for any other
    key), and says that a promotion now starts the basis later runs compare on."""
    storage = LocalStorage()
    old = _profile(tmp_path)
    promote_or_reject(storage, old, "run-1", _evaluation(old, 0.8, 0.7), _export(tmp_path, 1),
                      None, "k1", score_key(old))
    judged_against = read_promoted(storage, old)
    new = _profile(tmp_path, edited_rewards)
    assert recipe_digest(new) != recipe_digest(old) and score_key(new) != score_key(old)
    evaluation = _evaluation(new, 0.6, 0.4)  # lower raw scores, twice the lift
    decision, model = promote_or_reject(storage, new, "run-2", evaluation, _export(tmp_path, 2),
                                        None, "k2", score_key(new))
    assert decision.promoted and decision.basis == "lift" and model is not None
    (note,) = decision.notes
    assert note.startswith("the recipe changed since the promoted model (run run-1) was scored")
    assert recipe_digest(old) in note and recipe_digest(new) in note
    assert "new comparison basis" in note
    assert model.recipe_digest == recipe_digest(new)  # the pointer now holds the new basis

    rows = comparison_rows(evaluation, judged_against, decision, evaluation["recipe"])
    assert rows[2]["model"] == "promoted before this run (run-1, another recipe)"
    assert rows[2]["recipe"].endswith(f"(recipe {recipe_digest(old)})")
    assert rows[1]["recipe"].endswith(f"(recipe {recipe_digest(new)})")
    assert "the recipe changed" in rows[1]["decision"]

    again = _evaluation(new, 0.65, 0.4)  # the next run of the new recipe: compared by score
    next_decision, _ = promote_or_reject(storage, new, "run-3", again, _export(tmp_path, 3),
                                         None, "k3", score_key(new))
    assert next_decision.basis == "score" and next_decision.notes == []


def test_a_pointer_made_before_recipes_were_recorded_is_not_called_another_recipe(
        tmp_path: Path) -> None:
    storage = LocalStorage()
    profile = _profile(tmp_path)
    promote_or_reject(storage, profile, "run-1", _evaluation(profile, 0.8, 0.7),
                      _export(tmp_path, 1), None, "k1", "an older key")
    pointer = read_promoted(storage, profile)
    assert pointer is not None
    older = pointer.model_copy(update={"recipe_digest": "", "reward_functions": []})
    from flows.core.promotion_store import pointer_uris

    storage.write_text(pointer_uris(profile)[0], older.model_dump_json())
    decision, _ = promote_or_reject(storage, profile, "run-2", _evaluation(profile, 0.6, 0.4),
                                    _export(tmp_path, 2), None, "k2", score_key(profile))
    assert decision.basis == "lift"
    assert "or under another recipe" in decision.notes[0]
    rows = comparison_rows(_evaluation(profile, 0.6, 0.4), older, decision)
    assert rows[2]["recipe"] == UNRECORDED
