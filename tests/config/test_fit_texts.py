"""The fit check's words, whole: one profile per kind of advice (a slice that may not fit, a
tight one, a rollout batch that decodes in waves, a rollout that cannot start, a trainer that
cannot train), each text compared with tests/golden/fit/texts.json. What a user reads is the
product's advice, so a changed word or figure is a changed product: when the advice changes on
purpose, regenerate the file (``python -m tests.config.test_fit_texts``) and read the diff."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from flows.config.fit_rules import fit_warning
from flows.config.loading import ProfileError, load_profile
from tests.support.profiles import required_overrides

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "fit" / "texts.json"
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "slice-may-not-fit-and-rollout-waves": ("gemma3-12b-v6e-16", {
        "model.maxtext_name": "qwen3-0.6b", "train.args.rollout_micro_batch_size": 256}),
    "slice-tight": ("qwen3-30b-a3b-v6e-32", {
        "model.maxtext_name": "qwen3-30b-a3b", "train.args.train_micro_batch_size": 64,
        "train.args.batch_size": 64}),
    "rollout-cannot-start": ("qwen3-30b-a3b-v6e-32", {"model.maxtext_name": "qwen3-14b"}),
    "trainer-cannot-train": ("smoke-qwen3-0.6b-v6e-8", {"model.maxtext_name": "qwen3-14b"}),
}


def said(profile: str, overrides: dict[str, Any]) -> dict[str, Any]:
    try:
        loaded = load_profile(profile, {**required_overrides(profile), **overrides}, environ={})
    except ProfileError as refused:
        return {"refused": [[i.field, i.problem, i.fix, i.category] for i in refused.issues]}
    return {"warning": fit_warning(loaded)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_fit_checks_advice_is_word_for_word_what_it_was(case: str) -> None:
    assert said(*CASES[case]) == json.loads(GOLDEN.read_text())[case]


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps({name: said(*case) for name, case in sorted(CASES.items())},
                                 indent=1, ensure_ascii=False) + "\n")
    sys.exit(0)
