"""The recipe keys what it changes, by content (flows/core/recipe_files.py): any byte of a
reward file changes the training and everything downstream of it (export, the scores), never
the conversion or the image; the same bytes under another name change nothing; the order of
the functions, the processor and the template are part of the training's key."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from flows.config import Profile, load_profile
from flows.core.eval_programs import base_eval_key, score_key, trained_eval_key
from flows.core.layout import convert_key, export_key, image_key, train_key

KEYS: dict[str, Callable[[Profile], str]] = {
    "convert": convert_key, "image": image_key, "train": train_key, "export": export_key,
    "score": score_key, "eval-base": base_eval_key, "eval-trained": trained_eval_key}
UPSTREAM = {"convert", "image"}  # made before the recipe is used: never keyed by it
TEMPLATE = '{"SYSTEM_PROMPT": "s", "TEMPLATE": "{question}"}'


def _keys(overrides: dict[str, str]) -> dict[str, str]:
    profile = load_profile("rehearsal", overrides, environ={})
    assert profile.eval is not None  # the rehearsal scores its models: the score keys exist
    return {name: key(profile) for name, key in KEYS.items()}


@contextmanager
def _folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


def _rewards(path: Path, functions: str = "ascii_fraction_reward") -> dict[str, str]:
    return {"recipe.rewards.file": str(path), "recipe.rewards.functions": functions}


@settings(max_examples=40, deadline=None)
@given(content=st.binary(min_size=1, max_size=300), where=st.integers(min_value=0),
       flip=st.integers(min_value=1, max_value=255))
def test_one_changed_byte_trains_and_scores_again_but_converts_nothing(
        content: bytes, where: int, flip: int) -> None:
    with _folder() as folder:
        path = folder / "rewards.py"
        path.write_bytes(content)
        before = _keys(_rewards(path))
        changed = bytearray(content)
        changed[where % len(content)] ^= flip
        path.write_bytes(bytes(changed))  # edited in place, as a team does
        after = _keys(_rewards(path))
    same = {name for name in KEYS if before[name] == after[name]}
    assert same == UPSTREAM


@settings(max_examples=20, deadline=None)
@given(content=st.binary(max_size=300), name=st.from_regex(r"[a-z_]{1,12}", fullmatch=True))
def test_the_same_bytes_under_another_name_or_folder_change_no_key(content: bytes,
                                                                    name: str) -> None:
    with _folder() as one, _folder() as two:
        (one / "rewards.py").write_bytes(content)
        (two / f"{name}.py").write_bytes(content)
        assert _keys(_rewards(one / "rewards.py")) == _keys(_rewards(two / f"{name}.py"))


def test_the_order_of_the_functions_is_part_of_the_training() -> None:
    """MaxText sums them in order, and their rewards are logged per function: a reordered
    list is another recipe (a clipped or NaN-guarded sum is order dependent)."""
    with _folder() as folder:
        path = folder / "rewards.py"
        path.write_text("def a(**kw):\n    return [0.0]\n\ndef b(**kw):\n    return [1.0]\n")
        ab, ba = _keys(_rewards(path, "a,b")), _keys(_rewards(path, "b,a"))
    assert ab["train"] != ba["train"]
    assert {n for n in KEYS if ab[n] == ba[n]} == UPSTREAM


@settings(max_examples=15, deadline=None)
@given(first=st.text(max_size=80), second=st.text(max_size=80))
def test_a_changed_processor_or_template_trains_again(first: str, second: str) -> None:
    if first == second:
        return
    with _folder() as folder:
        processor, template = folder / "process.py", folder / "template.json"
        keys = []
        for text in (first, second):
            processor.write_text(text)
            template.write_text(TEMPLATE)
            with_processor = _keys({"recipe.dataset_processor": str(processor)})
            template.write_text(text)
            with_template = _keys({"recipe.chat_template": str(template)})
            keys.append((with_processor, with_template))
    for one, two in zip(keys[0], keys[1], strict=True):
        assert one["train"] != two["train"]
        assert {n for n in KEYS if one[n] == two[n]} == UPSTREAM


def test_a_recipe_file_beside_the_guard_keys_nothing_of_the_built_in_recipe() -> None:
    """Removing the recipe's rewards returns to MaxText's built-in ones: another training."""
    builtin = _keys({"recipe.rewards": ""})
    ours = _keys({})
    assert builtin["train"] != ours["train"]
    assert {n for n in KEYS if builtin[n] == ours[n]} == UPSTREAM
