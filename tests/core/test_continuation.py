"""Which train arguments only say how long a run trains (flows/core/continuation.py): a run
differing from an earlier one only in ``num_batches`` has the same run key (it continues that
run), every other change moves the key, and the learning-rate schedule's length (MaxText
0.2.4 utils_rl.get_optimizer) is keyed by its value in steps, whichever argument set it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flows.config import load_profile
from flows.config.profile import TUNABLE_TRAIN_ARGS
from flows.core.continuation import (
    batches_follow_length,
    run_args,
    schedule_follows_length,
    schedule_steps,
    train_steps,
)
from flows.core.layout import Layout, export_key, family_key, run_key, train_key
from tests.support.profiles import tutorial_profile


def _profile(**train_args: str):
    return load_profile("rehearsal", {f"train.args.{k}": v for k, v in train_args.items()},
                        environ={})


def _keys(**train_args: str) -> tuple[str, str, str]:
    profile = _profile(**train_args)
    return run_key(profile), train_key(profile), family_key(profile)


def test_train_steps_follow_maxtexts_formula() -> None:
    # configs/types.py: num_batches * rl.num_iterations * train_fraction * num_epoch
    assert train_steps({"num_batches": 10, "rl.num_iterations": 2, "train_fraction": 0.5,
                        "num_epoch": 3}) == 30
    assert train_steps({}) == 4  # configs/post_train/rl.yml num_batches: 4
    assert schedule_steps({"num_batches": 7}) == 7
    assert schedule_steps({"num_batches": 7, "learning_rate_schedule_steps": 100}) == 100
    assert schedule_steps({"num_batches": 7, "learning_rate_schedule_steps": -1}) == 7
    assert schedule_follows_length({"num_batches": 7, "learning_rate_schedule_steps": "-1"})
    assert not schedule_follows_length({"learning_rate_schedule_steps": "40"})


@settings(max_examples=15, deadline=None)
@given(first=st.integers(min_value=1, max_value=500), second=st.integers(min_value=1,
                                                                       max_value=500),
       schedule=st.integers(min_value=1, max_value=1000))
def test_a_fixed_schedule_makes_length_the_only_difference(first: int, second: int,
                                                           schedule: int) -> None:
    """One run, continued: the run key is the same for any two lengths; what was trained
    (train_key, so the record and the export) still differs, as the family does not."""
    a = _keys(num_batches=str(first), learning_rate_schedule_steps=str(schedule))
    b = _keys(num_batches=str(second), learning_rate_schedule_steps=str(schedule))
    assert a[0] == b[0] and a[2] == b[2]
    assert (a[1] == b[1]) == (first == second)


def test_a_schedule_that_follows_the_length_makes_another_run() -> None:
    """The rehearsal leaves the schedule to MaxText: 2 and 3 batches are two schedules, so
    two runs of one family (the train stage refuses to start the second from step 0)."""
    two, three = _keys(num_batches="2"), _keys(num_batches="3")
    assert two[0] != three[0] and two[2] == three[2]


def test_the_schedule_is_keyed_by_its_length_whichever_argument_set_it() -> None:
    """A run of 2 batches whose schedule follows its length has the schedule
    learning_rate_schedule_steps 2 gives; a longer run given that schedule continues it."""
    implicit = _keys(num_batches="2")
    assert _keys(num_batches="2", learning_rate_schedule_steps="2")[0] == implicit[0]
    assert _keys(num_batches="3", learning_rate_schedule_steps="2")[0] == implicit[0]
    assert _keys(num_batches="3", learning_rate_schedule_steps="3")[0] != implicit[0]


def test_with_more_than_one_epoch_the_length_stays_in_the_key() -> None:
    """The second epoch starts at a row that moves with num_batches (train_rl
    prepare_datasets): the batches differ, so it is another run."""
    assert batches_follow_length({"num_epoch": 2})
    a = _keys(num_batches="2", num_epoch="2", learning_rate_schedule_steps="9")
    b = _keys(num_batches="3", num_epoch="2", learning_rate_schedule_steps="9")
    assert a[0] != b[0]


OTHER_VALUES = {"learning_rate": "3e-4", "warmup_steps_fraction": "0.3", "num_epoch": "2",
                "batch_size": "2", "train_micro_batch_size": "1",
                "max_prefill_predict_length": "64", "max_target_length": "128",
                "checkpoint_period": "1", "num_test_batches": "1",
                "gradient_clipping_threshold": "0.5", "adam_b1": "0.8", "adam_b2": "0.9",
                "adam_weight_decay": "0.2", "decode_sampling_temperature": "0.5",
                "decode_sampling_top_k": "3", "decode_sampling_nucleus_p": "0.5",
                "rl.num_generations": "4", "rl.num_iterations": "2", "rl.grpo_beta": "0.1",
                "rl.grpo_epsilon": "0.3", "rl.epsilon_high": "0.4",
                "learning_rate_schedule_steps": "9", "data_shuffle_seed": "7",
                "train_fraction": "0.5"}


def test_with_more_than_one_grpo_iteration_the_length_stays_in_the_key() -> None:
    """tunix's resume skips rl.num_iterations batches per batch trained: another length
    would train on other batches than a single run of it, so it is another run."""
    assert batches_follow_length({"rl.num_iterations": 2})
    assert not batches_follow_length({"rl.num_iterations": 1, "num_epoch": "1"})
    a = _keys(num_batches="2", **{"rl.num_iterations": "2"}, learning_rate_schedule_steps="9")
    b = _keys(num_batches="3", **{"rl.num_iterations": "2"}, learning_rate_schedule_steps="9")
    assert a[0] != b[0]


def test_every_tunable_argument_but_the_length_has_a_changed_value_here() -> None:
    assert set(TUNABLE_TRAIN_ARGS) - {"num_batches"} <= set(OTHER_VALUES)


@pytest.mark.parametrize("name", sorted(OTHER_VALUES))
def test_every_other_change_moves_the_run_key(name: str) -> None:
    """Changing anything but the length is another run (a changed learning rate never
    resumes a run of another)."""
    base = {"num_batches": "3", "learning_rate_schedule_steps": "60"}
    before = _keys(**base)
    after = _keys(**{**base, name: OTHER_VALUES[name]})
    assert after[0] != before[0] and after[1] != before[1]


def test_the_run_name_is_the_run_key_and_the_export_still_follows_the_length() -> None:
    two, three = (_profile(num_batches=n, learning_rate_schedule_steps="4") for n in "23")
    assert Layout(two).train_run_dir == Layout(three).train_run_dir
    assert Layout(two).run_name == f"rl-{run_key(two)}"
    assert export_key(two) != export_key(three)


def test_a_value_that_is_no_number_keys_every_argument_as_given() -> None:
    """MaxText refuses it when the run starts; the key must not fail before that."""
    args = {"num_batches": "2", "warmup_steps_fraction": "x", "num_epoch": "many"}
    assert run_args(args) == args


def test_the_tutorials_run_keeps_its_name_whatever_its_length() -> None:
    """`tpurl plan --set train.args.num_batches=40` on the tutorial profile, whose schedule is
    set (learning_rate_schedule_steps 100): the same run, so a spend stop's "lower
    num_batches" continues it."""
    names = {Layout(tutorial_profile(**{"train.args.num_batches": n})).run_name
             for n in ("50", "40", "60")}
    assert len(names) == 1
    other = tutorial_profile(**{"train.args.num_batches": "40",
                                "train.args.learning_rate": "1e-5"})
    assert Layout(other).run_name not in names
