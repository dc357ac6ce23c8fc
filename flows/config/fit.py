"""Will GRPO training fit the slice? An estimate from the model's numbers, before any spend.

Pure functions: a model's parameter count from its architecture, and the HBM train_rl needs
on a slice, each part named. What MaxText 0.2.4 does, read from its source:

- Devices (utils/model_creation_utils.py ``setup_configs_and_devices``): on one slice with
  Pathways (rl.yml ``use_pathways: true``) and at least two VMs (devices // ``chips_per_vm``),
  the first ``trainer_devices_fraction`` of the chips train and the last
  ``sampler_devices_fraction`` run the vLLM rollout; otherwise both share every chip. vLLM's
  share is ``hbm_utilization_vllm`` of each chip's HBM (Tunix's rollout config,
  trainers/post_train/rl/train_rl.py ``rollout_vllm_hbm_utilization``), and tpu-inference
  counts every byte already on the chips inside it: its worker
  (vllm-project/tpu-inference tpu_inference/worker/tpu_worker.py
  ``determine_available_memory``) caps the devices' summed HBM limit at
  ``gpu_memory_utilization`` and gives the KV cache that cap less the HBM in use. Tunix 0.1.8
  (rl/rl_cluster.py ``RLCluster.__init__``) loads the actor and the reference before it
  starts the rollout engine and builds the actor's trainer (its AdamW moments) after, so on
  shared chips the trainer's two copies of the weights sit inside vLLM's share, beside
  vLLM's own, and the moments, gradients and activations take the rest. With
  ``num_trainer_slices``/``num_samplers_slices`` the roles take whole slices. The split is
  of JAX devices (two per tpu7x chip, flows/config/tpu.py), so ``chips_per_vm`` counts
  devices, as MaxText's tpu7x script sets it (run_qwen3_30b_rl.sh ``chips_per_vm=8``).
- Weights: rl.yml sets ``weight_dtype: bfloat16`` (base.yml's float32 is for pre-training);
  the trainer keeps the actor and a separate reference model (``create_models_and_meshes``
  loads the reference with ``from_pretrained`` and clones the actor from it), both in
  ``weight_dtype``.
- Optimizer (trainers/post_train/rl/utils_rl.py ``get_optimizer``): ``optax.adamw`` without
  ``mu_dtype``, so both moments take the parameters' dtype (the profile's ``mu_dtype`` does
  not reach it) and there is no float32 master copy: the parameters are the bf16 weights.
  Gradients are one more copy in the same dtype.
- Activations, per token of a training micro-batch (``train_micro_batch_size`` prompts, else
  ``batch_size``, × ``rl.num_generations`` × ``max_target_length``), conservative with
  remat (rl.yml's ``custom`` policy offloads layer inputs to the host; ``full`` keeps them):
  every layer's input (L·D bf16), one layer recomputed with its gradient
  (2 · (4D + (2Hq + 2Hkv)·hd + 3·F_active) bf16, F_active the dense MLP width or
  experts_per_tok·moe width), its attention scores and probabilities (2 · Hq·S bf16:
  rl.yml's ``dot_product`` attention, base.yml's ``float32_qk_product: false``) and the
  logits (V bf16) with their float32 log-softmax (V float32).
- Rollout: the sampler's weights in ``weight_dtype`` and the KV cache of one rollout batch
  (prompts × generations sequences of ``max_target_length + kv_cache_buffer`` tokens,
  2·L·Hkv·hd bf16 per token) must fit vLLM's ``hbm_utilization_vllm`` share.

Every part is summed over the role's chips as if perfectly sharded. The weights, moments and
gradients are certain (``floor``): a role whose chips cannot hold them is refused. The
activations and the KV cache are upper bounds: past TIGHT of a role's HBM they warn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from flows.config.maxtext_models import Architecture
from flows.config.tpu import TPU_GENERATIONS

# HBM per chip, bytes: the generation table's (flows/config/tpu.py, where each is cited)
HBM_BYTES_PER_CHIP: dict[str, int] = {name: g.hbm_bytes_per_chip
                                      for name, g in TPU_GENERATIONS.items()}
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1, "int8": 1}
ACTIVATION_BYTES = 2  # MaxText's ``dtype: bfloat16`` (base.yml) for activations and KV cache
LOGIT_BYTES = 4  # the loss's log-softmax runs in float32
TIGHT = 0.85  # above this share of what a role's chips hold: a warning, not a refusal

Verdict = Literal["fits", "tight", "no-fit"]


@dataclass(frozen=True)
class ParameterCount:
    total: int
    active: int  # per token: the routed experts a token uses instead of all of them


def mlp_parameters(arch: Architecture, width: int) -> int:
    return (3 if arch.gated_mlp else 2) * arch.base_emb_dim * width


def _gemma3(arch: Architecture) -> bool:
    return arch.decoder_block == "gemma3"


def attention_parameters(arch: Architecture) -> int:
    """One layer's attention: D·hd·(2Hq + 2Hkv) (+ biases (Hq + 2Hkv)·hd, + q/k norms 2·hd).
    MaxText's Gemma 3 layer passes ``use_qk_norm=True`` itself (models/gemma3.py
    Gemma3DecoderLayer), whatever the YAML's ``use_qk_norm`` says."""
    hq, hkv, hd = arch.base_num_query_heads, arch.base_num_kv_heads, arch.head_dim
    attention = arch.base_emb_dim * hd * (2 * hq + 2 * hkv)
    attention += (hq + 2 * hkv) * hd if arch.attention_bias else 0
    attention += 2 * hd if arch.use_qk_norm or _gemma3(arch) else 0
    return attention


def layer_norm_parameters(arch: Architecture) -> int:
    """One layer's RMSNorm scales: 2·D, or 4·D for Gemma 3, which adds a norm after the
    attention and after the MLP (its YAMLs set use_post_attn_norm and use_post_ffw_norm)."""
    return (4 if _gemma3(arch) else 2) * arch.base_emb_dim


def embedding_parameters(arch: Architecture) -> int:
    """V·D, twice unless ``logits_via_embedding`` ties the output layer to the embedding
    (Gemma's 262k vocabulary is one table of V·D)."""
    return arch.vocab_size * arch.base_emb_dim * (1 if arch.logits_via_embedding else 2)


def parameter_count(arch: Architecture) -> ParameterCount:
    """Embeddings (``embedding_parameters``) and a final norm D; per layer: attention
    (``attention_parameters``), norms (``layer_norm_parameters``) and either a dense MLP
    (3·D·F gated, 2·D·F not) or E experts of width F_moe plus the shared ones and a router
    D·E; the first ``first_num_dense_layers`` layers of an MoE model are dense. The formula
    is that of text-only GQA decoders (Llama, Qwen2/3, Qwen3-MoE, Mixtral) and of Gemma 3's
    text decoder (its sliding-window and global layers hold the same weights; the vision
    tower is built only with ``use_multimodal``): MLA, linear attention, Gemma 2's layer
    pairs and vision towers are not in it (``estimated`` says which models it holds for)."""
    d, layers = arch.base_emb_dim, arch.base_num_decoder_layers
    per_layer = attention_parameters(arch) + layer_norm_parameters(arch)
    embeddings = embedding_parameters(arch) + d
    dense = per_layer + mlp_parameters(arch, arch.base_mlp_dim)
    if arch.num_experts <= 1:
        total = embeddings + layers * dense
        return ParameterCount(total, total)
    moe_width = arch.base_moe_mlp_dim if arch.base_moe_mlp_dim > 0 else arch.base_mlp_dim
    expert = mlp_parameters(arch, moe_width)
    shared = arch.shared_experts * expert
    moe_layers = layers - arch.first_num_dense_layers
    base = embeddings + arch.first_num_dense_layers * dense
    common = moe_layers * (per_layer + shared + d * arch.num_experts)
    return ParameterCount(base + common + moe_layers * arch.num_experts * expert,
                          base + common + moe_layers * arch.num_experts_per_tok * expert)


# decoder blocks whose layers parameter_count describes (MaxText configs/models/*.yml);
# gemma3 as text only (train_rl builds no vision tower unless use_multimodal, which
# profile_estimate does not judge); not gemma2, which counts its local/global layer pairs as
# one decoder layer, nor gemma4's per-layer embeddings and mixed head sizes
ESTIMATED_BLOCKS = frozenset({"llama2", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe",
                              "gemma3"})


def estimated(name: str, arch: Architecture) -> bool:
    """Whether the estimate's formula describes this model (a vision-language model's
    tower and other attention kinds are not counted, so their verdict would be a guess)."""
    return (arch.decoder_block in ESTIMATED_BLOCKS and arch.attention_type == "global"
            and "-vl-" not in name and "omni" not in name)


@dataclass(frozen=True)
class RunShape:
    """What the training run sets that moves the footprint (train.args over rl.yml)."""

    weight_bytes: int
    batch_size: int  # prompts per training micro-batch
    rollout_batch_size: int  # prompts per rollout batch
    num_generations: int
    max_target_length: int
    kv_cache_buffer: int
    hbm_utilization_vllm: float
    trainer_devices_fraction: float
    sampler_devices_fraction: float
    chips_per_vm: int
    use_pathways: bool
    num_trainer_slices: int
    num_samplers_slices: int


@dataclass(frozen=True)
class SliceShape:
    generation: str  # a key of HBM_BYTES_PER_CHIP
    chips_per_slice: int
    num_slices: int = 1


@dataclass(frozen=True)
class Part:
    name: str
    size: int  # bytes over the role's chips
    certain: bool  # held whatever the batch: weights, moments, gradients


@dataclass(frozen=True)
class Side:
    """One role's footprint: its parts, and what its chips hold for them."""

    role: str
    parts: tuple[Part, ...]
    chips: int
    holds: int

    @property
    def needs(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def floor(self) -> int:
        return sum(p.size for p in self.parts if p.certain)

    @property
    def share(self) -> float:
        return self.needs / self.holds if self.holds else float("inf")

    @property
    def floor_share(self) -> float:
        return self.floor / self.holds if self.holds else float("inf")


@dataclass(frozen=True)
class Estimate:
    params: ParameterCount
    trainer: Side
    sampler: Side

    @property
    def share(self) -> float:
        return max(self.trainer.share, self.sampler.share)

    @property
    def verdict(self) -> Verdict:
        """no-fit when the certain parts alone exceed a role's HBM (the run cannot load);
        tight when the conservative total passes TIGHT of it (activations and KV cache are
        upper bounds, so a total past 100 % warns rather than refuses)."""
        if max(self.trainer.floor_share, self.sampler.floor_share) > 1:
            return "no-fit"
        return "tight" if self.share > TIGHT else "fits"


def roles(shape: RunShape, slice_: SliceShape) -> tuple[int, int, bool]:
    """Trainer and sampler units, and whether they share them (model_creation_utils
    ``setup_configs_and_devices``), for a slice counted in ``chips_per_slice`` units: the
    estimate passes JAX devices (and ``chips_per_vm`` counts devices, as MaxText's does)."""
    chips = slice_.chips_per_slice * slice_.num_slices
    if shape.num_trainer_slices > 0 and shape.num_samplers_slices > 0:
        return (shape.num_trainer_slices * slice_.chips_per_slice,
                shape.num_samplers_slices * slice_.chips_per_slice, False)
    if shape.use_pathways and chips // max(shape.chips_per_vm, 1) >= 2:
        return (int(chips * shape.trainer_devices_fraction),
                int(chips * shape.sampler_devices_fraction), False)
    return chips, chips, True


def activation_bytes_per_token(arch: Architecture, max_target_length: int) -> int:
    d, hd = arch.base_emb_dim, arch.head_dim
    hq, hkv = arch.base_num_query_heads, arch.base_num_kv_heads
    moe_width = arch.base_moe_mlp_dim if arch.base_moe_mlp_dim > 0 else arch.base_mlp_dim
    width = (arch.base_mlp_dim if arch.num_experts <= 1
             else (arch.num_experts_per_tok + arch.shared_experts) * moe_width)
    layer_inputs = arch.base_num_decoder_layers * d * ACTIVATION_BYTES
    one_layer = 2 * (4 * d + (2 * hq + 2 * hkv) * hd + 3 * width) * ACTIVATION_BYTES
    scores = 2 * hq * max_target_length * ACTIVATION_BYTES
    logits = arch.vocab_size * (ACTIVATION_BYTES + LOGIT_BYTES)
    return layer_inputs + one_layer + scores + logits


def kv_bytes_per_token(arch: Architecture) -> int:
    return 2 * arch.base_num_decoder_layers * arch.base_num_kv_heads * arch.head_dim * \
        ACTIVATION_BYTES


def estimate(arch: Architecture, shape: RunShape, slice_: SliceShape) -> Estimate:
    params = parameter_count(arch)
    # train_rl splits JAX devices, two per tpu7x chip (flows/config/tpu.py): the split is
    # made in devices, as model_creation_utils makes it, and each device holds its half
    generation = TPU_GENERATIONS[slice_.generation]
    per_chip, hbm = generation.devices_per_chip, generation.hbm_bytes_per_device
    trainer_devices, sampler_devices, shared = roles(shape, SliceShape(
        slice_.generation, slice_.chips_per_slice * per_chip, slice_.num_slices))
    weights = params.total * shape.weight_bytes
    tokens = shape.batch_size * shape.num_generations * shape.max_target_length
    # the actor and the reference: the trainer's on its own chips, inside vLLM's share on
    # shared ones (tpu-inference counts what is loaded before it starts: module docstring)
    resident = (Part("actor weights", weights, True), Part("reference weights", weights, True))
    trainer = Side("trainer", (
        *(() if shared else resident),
        Part("AdamW moments (2, weight dtype)", 2 * weights, True),
        Part("gradients", weights, True),
        Part("activations", tokens * activation_bytes_per_token(arch, shape.max_target_length),
             False)),
        trainer_devices // per_chip,
        int(trainer_devices * hbm * ((1 - shape.hbm_utilization_vllm) if shared else 1)))
    sequences = shape.rollout_batch_size * shape.num_generations
    kv_tokens = sequences * (shape.max_target_length + shape.kv_cache_buffer)
    sampler = Side("rollout", (*(resident if shared else ()),
                               Part("rollout weights", weights, True),
                               Part("KV cache", kv_tokens * kv_bytes_per_token(arch), False)),
                   sampler_devices // per_chip,
                   int(sampler_devices * hbm * shape.hbm_utilization_vllm))
    return Estimate(params, trainer, sampler)


def gib(size: int) -> str:
    return f"{size / 2**30:,.1f} GiB"


def describe(est: Estimate) -> str:
    """The estimate part by part, for a refusal or a warning."""
    def side(s: Side) -> str:
        parts = ", ".join(f"{p.name} {gib(p.size)}" for p in s.parts)
        return (f"{s.role} on {s.chips} chip(s): {parts}; total {gib(s.needs)} of "
                f"{gib(s.holds)} ({s.share:.0%})")
    return (f"{est.params.total / 1e9:,.2f}B parameters ({est.params.active / 1e9:,.2f}B "
            f"active); {side(est.trainer)}; {side(est.sampler)}")
