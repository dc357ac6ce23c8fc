"""The rollout's arithmetic (flows/config/rollout.py): sizes filled in as train_rl fills them,
devices as MaxText counts them, and MaxText's own RL scripts judged as they ship."""

from __future__ import annotations

import pytest

from flows.config.fit import SliceShape
from flows.config.fit_rules import run_shape
from flows.config.maxtext_models import architecture
from flows.config.rollout import Parallelism, check, derive, footprint, resolve, sampler


@pytest.mark.parametrize(("sizes", "devices", "expected"), [
    ((1, -1, 4), 16, Parallelism(1, 4, 4)),  # the tutorial's 16 sampler chips
    ((-1, 4, 1), 8, Parallelism(2, 4, 1)),
    ((2, 4, 1), 8, Parallelism(2, 4, 1)),
    ((2, 2, 1), 8, None),  # train_rl: tensor × data × expert != len(sampler_devices)
    ((-1, -1, 1), 8, None),  # at most one -1
    ((3, -1, 1), 8, None),  # 8 is not divisible by 3
])
def test_sizes_resolve_as_train_rl_resolves_them(sizes: tuple[int, int, int], devices: int,
                                                  expected: Parallelism | None) -> None:
    """maxtext/trainers/post_train/rl/train_rl.py get_rollout_kwargs_for_parallelism."""
    assert resolve(*sizes, devices) == expected


def test_a_tpu7x_chip_is_two_devices_of_half_its_hbm() -> None:
    """run_qwen3_30b_rl.sh: tpu7x-128 is 64 chips, chips_per_vm=8 devices a VM, rollout data
    16 × tensor 4 = 64 devices: half of 128."""
    shape = run_shape({"chips_per_vm": 8})
    where = sampler(shape, SliceShape("tpu7x", 64))
    assert (where.devices, where.shared, where.hbm_per_device) == (64, False, 96 * 10**9)
    # on one VM of four chips (eight devices) with rl.yml's chips_per_vm 4, MaxText sees
    # two "VMs" and splits them too
    assert sampler(run_shape({}), SliceShape("tpu7x", 4)).devices == 4


def test_maxtexts_own_tpu7x_recipe_starts() -> None:
    args: dict[str, str | int | float | bool] = {
        "rl.num_generations": 8, "max_target_length": 8192, "batch_size": 128,
        "train_micro_batch_size": 32, "rollout_micro_batch_size": 128,
        "hbm_utilization_vllm": 0.75, "chips_per_vm": 8}
    shape = run_shape(args)
    found = check(architecture("qwen3-30b-a3b-base"), shape, SliceShape("tpu7x", 64),
                  (4, 16, 1))
    assert found is not None and found.heads is None
    assert found.given.verdict != "no-fit"


def test_the_embedding_table_sits_whole_on_every_device() -> None:
    """vllm.yml maps vocab and embed_vocab to no axis: more tensor parallelism shrinks
    everything but Llama's two 1 GiB tables (embedding and untied output)."""
    shape = run_shape({})
    where = sampler(shape, SliceShape("v6e", 16))
    arch = architecture("llama3.1-8b")
    one, eight = (footprint(arch, shape, where, Parallelism(t, 8 // t, 1)).weights
                  for t in (1, 8))
    tables = 2 * arch.vocab_size * arch.base_emb_dim * 2
    assert eight - tables == pytest.approx((one - tables) / 8, rel=0.01)


def test_the_derived_share_is_raised_only_when_no_replica_holds_the_model() -> None:
    shape = run_shape({"hbm_utilization_vllm": 0.55})
    where = sampler(shape, SliceShape("v6e", 64))
    derived = derive(architecture("llama3.1-70b"), shape, where)
    assert derived is not None  # 8 KV heads: tensor 8 at most, 19.9 GiB a device
    assert derived.parallelism == Parallelism(8, 4, 1) and derived.utilization == 0.8
    small = derive(architecture("llama3.1-8b"), shape, where)
    assert small is not None and small.utilization == 0.55
    assert small.parallelism == Parallelism(2, 16, 1)
