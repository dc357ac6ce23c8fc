"""The vLLM rollout's settings per (model, slice): what one sampler device holds, and the
tensor and expert parallelism and HBM share that make it hold the model.

The slice-level fit (flows/config/fit.py) asks whether a slice could train the model at all,
every part spread evenly over the role's chips. The rollout does not spread evenly: vLLM
keeps a whole copy of the weights in every data-parallel replica, so a profile's own
``rollout_tensor_parallelism`` can leave each replica too few devices for the weights on a
slice that the fit accepts. Pure functions of the model's numbers and the run's settings,
each read where MaxText 0.2.4 reads it:

- Devices: trainers/post_train/rl/train_rl.py ``get_rollout_kwargs_for_parallelism`` takes
  ``rollout_tensor/data/expert_parallelism`` (rl.yml: 1, -1, 1), fills the one that is -1
  from the sampler's device count and hands vLLM ``tensor_parallel_size``,
  ``data_parallel_size``, ``expert_parallel_size``. The sampler's devices are the split of
  utils/model_creation_utils.py ``setup_configs_and_devices`` (``fit.roles``), counted in JAX
  devices (two per tpu7x chip: flows/config/tpu.py).
- What a device holds: the rollout's mesh follows configs/inference/vllm.yml's
  ``logical_axis_rules``: ``vocab`` and ``embed_vocab`` map to no axis, so the embedding
  table (and an untied output layer) sits whole on every device; ``heads``/``q_heads``/
  ``kv_heads`` shard over ``model`` × ``expert`` (``attention_shards``: over ``model`` alone,
  the rest copied, when the product does not divide the heads), ``mlp`` over ``model``, experts (``exp``)
  over ``expert`` and their width (``mlp_moe``) over ``model``, the KV cache
  (``cache_heads``/``paged_kv_heads``) over ``expert`` × ``model``; ``model`` is the tensor
  parallelism and ``expert`` the expert parallelism.
- The share: train_rl.py passes ``hbm_utilization_vllm`` (rl.yml 0.72) as Tunix's
  ``rollout_vllm_hbm_utilization``, vLLM's share of each device's HBM for its weights and
  KV cache; the cache holds ``kv_cache_size = max_target_length + kv_cache_buffer`` tokens a
  sequence (train_rl.py ``RolloutConfig``). On devices the trainer shares, its actor and
  reference weights are loaded before vLLM starts and tpu-inference counts them inside the
  same share (flows/config/fit.py's module docstring: tpu_inference/worker/tpu_worker.py
  ``determine_available_memory``). vLLM refuses to start when the weights leave no
  room for one such sequence; when a replica's share of a rollout batch (``batch_size`` or
  ``rollout_micro_batch_size`` prompts × ``rl.num_generations``, over the data-parallel
  replicas) needs more, it decodes the batch in waves: slower, not fatal.
- Heads: the rollout's tensor parallelism must divide the query and KV heads (vLLM's
  ``ModelConfig.verify_with_parallel_config`` refuses query heads that do not divide, and the
  ``kv_heads`` rule above shards the KV heads over the same axis).

The KV cache is counted for every layer at full length: Gemma 3's sliding-window layers
(models/gemma3.py, 5 of every 6, a 1024-token window) hold less when sequences pass the
window, so its figure is an upper bound there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from flows.config.fit import (
    TIGHT,
    RunShape,
    SliceShape,
    attention_parameters,
    embedding_parameters,
    gib,
    kv_bytes_per_token,
    layer_norm_parameters,
    mlp_parameters,
    parameter_count,
    roles,
)
from flows.config.maxtext_models import Architecture
from flows.config.tpu import TPU_GENERATIONS

# rl.yml's rollout parallelism (-1: filled in from the sampler's devices)
DEFAULT_PARALLELISM = {"tensor": 1, "data": -1, "expert": 1}
# the highest share a derived setting proposes: vLLM's own default gpu_memory_utilization
# is 0.9, and MaxText's scripts use 0.5-0.8 (run_gptoss_20b_rl.sh 0.8)
MAX_UTILIZATION = 0.9

RolloutVerdict = Literal["fits", "waves", "no-fit"]


@dataclass(frozen=True)
class Parallelism:
    tensor: int
    data: int
    expert: int


def resolve(tensor: int, data: int, expert: int, devices: int) -> Parallelism | None:
    """vLLM's sizes as train_rl.py ``get_rollout_kwargs_for_parallelism`` fills them in, or
    None where it raises (more than one -1, or sizes that do not make the device count;
    flows/config/maxtext_rules.py reports those)."""
    sizes = [tensor, data, expert]
    if sizes.count(-1) > 1 or any(s == 0 or s < -1 for s in sizes):
        return None
    known = math.prod(s for s in sizes if s != -1)
    if -1 in sizes:
        if devices % known:
            return None
        sizes[sizes.index(-1)] = devices // known
    elif known != devices:
        return None
    return Parallelism(*sizes)


@dataclass(frozen=True)
class Sampler:
    """The sampler's devices and what each holds for vLLM."""

    devices: int
    shared: bool  # the trainer uses the same devices (one VM, or no Pathways)
    hbm_per_device: int
    resident: int = 0  # bytes a device already holds when vLLM starts: the trainer's weights


def sampler(shape: RunShape, slice_: SliceShape, arch: Architecture | None = None) -> Sampler:
    """The sampler's JAX devices on this slice (model_creation_utils' split, in devices). On
    devices the trainer shares, its actor and reference weights (``arch``'s) are already
    loaded when vLLM starts, and tpu-inference counts them inside vLLM's share
    (flows/config/fit.py's module docstring)."""
    generation = TPU_GENERATIONS[slice_.generation]
    per_chip = generation.devices_per_chip
    in_devices = SliceShape(slice_.generation, slice_.chips_per_slice * per_chip,
                            slice_.num_slices)
    _trainer, devices, shared = roles(shape, in_devices)
    resident = (2 * parameter_count(arch).total * shape.weight_bytes // max(devices, 1)
                if shared and arch is not None else 0)
    return Sampler(devices, shared, generation.hbm_bytes_per_device, resident)


def attention_shards(arch: Architecture, p: Parallelism) -> int:
    """Over how many devices a replica spreads the attention heads and the KV cache: tensor ×
    expert when that divides both head counts (vllm.yml's ``heads``/``kv_heads`` and
    ``cache_heads`` rules), else tensor alone, the rest copied (an upper bound)."""
    both = p.tensor * p.expert
    heads = (arch.base_num_query_heads, arch.base_num_kv_heads)
    return both if all(h % both == 0 for h in heads) else p.tensor


def weights_per_device(arch: Architecture, weight_bytes: int, p: Parallelism) -> int:
    """One device's part of one replica's weights under vllm.yml's rules (module docstring):
    the embedding table and norms whole, attention over ``attention_shards``, a dense MLP
    over tensor, the experts over expert × tensor."""
    d, layers = arch.base_emb_dim, arch.base_num_decoder_layers
    whole = embedding_parameters(arch) + d + layers * layer_norm_parameters(arch)
    attention = layers * attention_parameters(arch) / attention_shards(arch, p)
    if arch.num_experts <= 1:
        mlp = layers * mlp_parameters(arch, arch.base_mlp_dim) / p.tensor
    else:
        width = arch.base_moe_mlp_dim if arch.base_moe_mlp_dim > 0 else arch.base_mlp_dim
        moe_layers = layers - arch.first_num_dense_layers
        dense = arch.first_num_dense_layers * mlp_parameters(arch, arch.base_mlp_dim) / p.tensor
        shared = moe_layers * arch.shared_experts * mlp_parameters(arch, width) / p.tensor
        experts = (moe_layers * arch.num_experts * mlp_parameters(arch, width)
                   / (p.tensor * p.expert))
        router = moe_layers * d * arch.num_experts / p.expert
        mlp = dense + shared + experts + router
    return int((whole + attention + mlp) * weight_bytes)


def kv_bytes_per_token_per_device(arch: Architecture, p: Parallelism) -> int:
    return kv_bytes_per_token(arch) // attention_shards(arch, p)


@dataclass(frozen=True)
class RolloutFootprint:
    """One sampler device's bytes, against vLLM's share of it."""

    parallelism: Parallelism
    utilization: float
    weights: int
    one_sequence: int  # the KV cache of one sequence of kv_cache_size tokens
    batch: int  # the KV cache of the replica's share of one rollout batch
    holds: int  # utilization × HBM per device
    resident: int = 0  # the trainer's weights on a shared device, inside the same share

    @property
    def share(self) -> float:
        used = self.resident + self.weights + self.batch
        return used / self.holds if self.holds else float("inf")

    @property
    def verdict(self) -> RolloutVerdict:
        """no-fit when vLLM cannot start (weights and one sequence pass its share); waves when
        the replica's share of a batch does not fit beside the weights (vLLM decodes it in
        several rounds). A profile's own values are judged against the whole share, as the
        tutorial's are set (its Qwen3-30B-A3B replica fills 93 % of it); a derived value
        keeps TIGHT of it (``derive``), a margin for vLLM's own working memory."""
        if self.resident + self.weights + self.one_sequence > self.holds:
            return "no-fit"
        return "waves" if self.share > 1 else "fits"


def footprint(arch: Architecture, shape: RunShape, sampler_: Sampler, p: Parallelism,
              utilization: float | None = None) -> RolloutFootprint:
    share = shape.hbm_utilization_vllm if utilization is None else utilization
    per_token = kv_bytes_per_token_per_device(arch, p)
    sequence = shape.max_target_length + shape.kv_cache_buffer
    sequences = math.ceil(shape.rollout_batch_size * shape.num_generations / p.data)
    return RolloutFootprint(p, share, weights_per_device(arch, shape.weight_bytes, p),
                            sequence * per_token, sequences * sequence * per_token,
                            int(sampler_.hbm_per_device * share), sampler_.resident)


def head_issue(arch: Architecture, tensor: int) -> str | None:
    """Why ``tensor`` cannot shard the attention heads, or None when it can."""
    hq, hkv = arch.base_num_query_heads, arch.base_num_kv_heads
    if hq % tensor or hkv % tensor:
        return (f"rollout tensor parallelism {tensor} does not divide the model's {hq} query "
                f"and {hkv} KV heads")
    return None


@dataclass(frozen=True)
class Derived:
    """Settings that hold the model on the sampler: the values a profile should set."""

    parallelism: Parallelism
    utilization: float
    footprint: RolloutFootprint

    def as_args(self) -> str:
        p = self.parallelism
        return (f"train.args.rollout_tensor_parallelism={p.tensor}, "
                f"train.args.rollout_data_parallelism={p.data}, "
                f"train.args.rollout_expert_parallelism={p.expert}, "
                f"train.args.hbm_utilization_vllm={self.utilization:g}")


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def candidates(arch: Architecture, devices: int, expert: int) -> list[Parallelism]:
    """Every (tensor, expert) split of the sampler's devices whose tensor parallelism divides
    the heads, fewest devices a replica first (the most replicas), then the least tensor
    parallelism. A dense model keeps the profile's expert parallelism; an MoE model's may be
    any divisor of its experts."""
    experts = ([e for e in _divisors(devices) if arch.num_experts % e == 0]
               if arch.num_experts > 1 else [expert] if expert > 0 and devices % expert == 0
               else [])
    found = [Parallelism(t, devices // (t * e), e) for e in experts
             for t in _divisors(devices // e) if head_issue(arch, t) is None]
    return sorted(found, key=lambda p: (p.tensor * p.expert, p.tensor))


def derive(arch: Architecture, shape: RunShape, sampler_: Sampler,
           expert: int = 1) -> Derived | None:
    """The first of ``candidates`` that holds the weights and a replica's share of a rollout
    batch under TIGHT of vLLM's share; failing that, the last (the most devices a replica)
    with the share raised (up to MAX_UTILIZATION, and only when the trainer does not share
    the devices) to what it needs. None when no setting holds the weights and one sequence."""
    options = candidates(arch, sampler_.devices, expert)
    for p in options:
        found = footprint(arch, shape, sampler_, p)
        if found.verdict == "fits" and found.share <= TIGHT:
            return Derived(p, shape.hbm_utilization_vllm, found)
    if not options:
        return None
    p = options[-1]
    found = footprint(arch, shape, sampler_, p)
    needed = (found.resident + found.weights + found.batch) / TIGHT / sampler_.hbm_per_device
    utilization = min(MAX_UTILIZATION, math.ceil(needed * 20) / 20)
    if not sampler_.shared and utilization > shape.hbm_utilization_vllm:
        raised = footprint(arch, shape, sampler_, p, utilization)
        if raised.verdict != "no-fit":
            return Derived(p, utilization, raised)
    if found.verdict != "no-fit":
        return Derived(p, shape.hbm_utilization_vllm, found)
    return None


def describe(found: RolloutFootprint, sampler_: Sampler) -> str:
    """One sampler device's bytes, for a refusal or a warning."""
    p = found.parallelism
    trainer = (f"{gib(found.resident)} of the trainer's actor and reference weights (it "
               "shares the device), " if found.resident else "")
    return (f"each of the {sampler_.devices} sampler device(s) (tensor {p.tensor} × data "
            f"{p.data} × expert {p.expert}) holds {trainer}{gib(found.weights)} of weights, "
            f"{gib(found.one_sequence)} of KV cache for one sequence and {gib(found.batch)} "
            f"for its share of a rollout batch, of the {gib(found.holds)} vLLM may use "
            f"(hbm_utilization_vllm {found.utilization:g} of {gib(sampler_.hbm_per_device)})")


@dataclass(frozen=True)
class RolloutCheck:
    """A profile's rollout settings on a slice, and the settings that hold the model."""

    sampler: Sampler
    given: RolloutFootprint
    heads: str | None  # why the tensor parallelism cannot shard the heads
    derived: Derived | None

    @property
    def holds(self) -> bool:
        """Whether the profile's own settings start vLLM and hold a batch at once."""
        return self.heads is None and self.given.verdict == "fits"


def check(arch: Architecture, shape: RunShape, slice_: SliceShape,
          sizes: tuple[int, int, int]) -> RolloutCheck | None:
    """The rollout's (tensor, data, expert) ``sizes`` judged on ``slice_``; None when they
    do not resolve against its sampler devices (flows/config/maxtext_rules.py names that)."""
    where = sampler(shape, slice_, arch)
    given = resolve(*sizes, where.devices)
    if given is None:
        return None
    return RolloutCheck(where, footprint(arch, shape, where, given),
                        head_issue(arch, given.tensor), derive(arch, shape, where, given.expert))
