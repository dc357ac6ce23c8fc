"""An announced dataset is read for what it is, or the profile is refused at validation."""

from __future__ import annotations

import pytest

from flows.backends import backend_for
from flows.config import ProfileError, load_profile
from flows.core.layout import train_key
from tests.support.profiles import tutorial_profile

NEW = "gs://data/openmath-v7.parquet"


def test_an_announced_dataset_is_trained_and_evaluated_as_what_it_holds() -> None:
    profile = tutorial_profile(**{"data.train_files": NEW})
    args = list(backend_for(profile).runtime.setup("train").args)
    assert f"hf_train_files={NEW}" in args
    assert "dataset_name=nvidia/OpenMathInstruct-2" in args
    assert "eval_dataset_name=nvidia/OpenMathInstruct-2" in args


def test_without_an_announcement_nothing_changes() -> None:
    profile = tutorial_profile()
    args = list(backend_for(profile).runtime.setup("train").args)
    assert not any(a.startswith(("dataset_name=", "eval_dataset_name=")) for a in args)
    assert train_key(profile) == train_key(tutorial_profile(**{"data.dataset_name": "other/name"}))


def _issues(**overrides: str) -> dict[str, str]:
    with pytest.raises(ProfileError) as err:
        tutorial_profile(**overrides)
    return {i.field: i.problem for i in err.value.issues}


def test_files_without_a_dataset_name_are_refused() -> None:
    issues = _issues(**{"data.train_files": NEW, "data.dataset_name": ""})
    assert "answers after '####'" in issues["data.dataset_name"]


def test_two_names_for_one_dataset_are_refused() -> None:
    issues = _issues(**{"data.train_files": NEW, "train.args.dataset_name": "openai/gsm8k"})
    assert "train.args.dataset_name is 'openai/gsm8k'" in issues["data.dataset_name"]


def test_a_template_of_another_dataset_is_refused() -> None:
    issues = _issues(**{"data.train_files": NEW, "train.args.data_template_path":
                        "maxtext/examples/chat_templates/gsm8k_rl.json"})
    assert "does not match the dataset nvidia/OpenMathInstruct-2" in \
        issues["train.args.data_template_path"]


def test_an_eval_set_from_elsewhere_is_refused() -> None:
    issues = _issues(**{"data.train_files": NEW, "train.args.eval_dataset_name": "openai/gsm8k"})
    assert "instead of splitting" in issues["train.args.eval_dataset_name"]


def test_the_rehearsal_names_its_dataset_in_its_args() -> None:
    profile = load_profile("rehearsal", {"data.train_files": "/tmp/v2.parquet"}, environ={})
    args = list(backend_for(profile).runtime.setup("train").args)
    assert not any(a.startswith("dataset_name=") for a in args)  # train.args has it already
