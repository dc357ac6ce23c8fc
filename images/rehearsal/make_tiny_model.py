"""Write a deterministic tiny Qwen3-MoE Hugging Face checkpoint for the CPU rehearsal.

Why this exists: the rehearsal must run MaxText's real converters and trainer for
``model_name=qwen3-30b-a3b`` on a 2-core machine without the Hugging Face hub.

Why these dimensions: ``to_maxtext`` builds its parameter map from MaxText's built-in
table for ``qwen3-30b-a3b`` rather than from ``config.json``, so the *structure* must
match the real model (48 layers, 128 experts, top-8, vocabulary 151936, per-expert
tensor names).  Only the widths shrink (hidden 64, 4 query / 2 KV heads, head_dim 16,
expert MLP 32), which every step then receives as ``override_model_config=true
base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=2 head_dim=16 base_mlp_dim=32
base_moe_mlp_dim=32``.  That is about 58 M parameters.

Why one shard per layer: MaxText's lazy loader reopens a safetensors file for every
tensor it reads; with a single large file conversion takes minutes, sharded seconds.

Why bfloat16: the real checkpoint is bfloat16, so the round trip (HF -> MaxText ->
HF) exercises the same dtype handling.

Determinism: every tensor comes from ``numpy.random.default_rng(seed)`` in a fixed
order, safetensors sorts its header, and JSON is dumped with sorted keys, so the same
seed gives byte-identical files.  The Qwen3 tokenizer files (with chat template) are
copied from the maxtext wheel (``maxtext/assets/tokenizers/qwen3-tokenizer``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
from pathlib import Path

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

NUM_LAYERS = 48
NUM_EXPERTS = 128
TOP_K = 8
HIDDEN = 64
NUM_Q_HEADS = 4
NUM_KV_HEADS = 2
HEAD_DIM = 16
MOE_MLP = 32
DENSE_MLP = 32
VOCAB = 151936
INIT_STD = 0.02
DTYPE = ml_dtypes.bfloat16

# The keys of Qwen/Qwen3-30B-A3B's config.json, with the widths shrunk.
CONFIG: dict[str, object] = {
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
    "max_window_layers": NUM_LAYERS,
    "mlp_only_layers": [],
    "model_type": "qwen3_moe",
    "moe_intermediate_size": MOE_MLP,
    "norm_topk_prob": True,
    "num_attention_heads": NUM_Q_HEADS,
    "num_experts": NUM_EXPERTS,
    "num_experts_per_tok": TOP_K,
    "num_hidden_layers": NUM_LAYERS,
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
    "vocab_size": VOCAB,
}

GENERATION_CONFIG: dict[str, object] = {
    "bos_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "pad_token_id": 151643,
    "temperature": 0.7,
    "top_k": 20,
    "top_p": 0.8,
}


def _normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Draw N(0, INIT_STD) weights in float32 and store them as bfloat16."""
    return (rng.standard_normal(shape, dtype=np.float32) * INIT_STD).astype(DTYPE)


def _ones(n: int) -> np.ndarray:
    """RMSNorm scales start at one, as in a freshly initialised Qwen3."""
    return np.ones((n,), dtype=DTYPE)


def layer_tensors(rng: np.random.Generator, i: int) -> dict[str, np.ndarray]:
    """All tensors of decoder layer ``i`` under their Hugging Face names (per expert)."""
    p = f"model.layers.{i}"
    t: dict[str, np.ndarray] = {
        f"{p}.input_layernorm.weight": _ones(HIDDEN),
        f"{p}.post_attention_layernorm.weight": _ones(HIDDEN),
        f"{p}.self_attn.q_proj.weight": _normal(rng, (NUM_Q_HEADS * HEAD_DIM, HIDDEN)),
        f"{p}.self_attn.k_proj.weight": _normal(rng, (NUM_KV_HEADS * HEAD_DIM, HIDDEN)),
        f"{p}.self_attn.v_proj.weight": _normal(rng, (NUM_KV_HEADS * HEAD_DIM, HIDDEN)),
        f"{p}.self_attn.o_proj.weight": _normal(rng, (HIDDEN, NUM_Q_HEADS * HEAD_DIM)),
        f"{p}.self_attn.q_norm.weight": _ones(HEAD_DIM),
        f"{p}.self_attn.k_norm.weight": _ones(HEAD_DIM),
        f"{p}.mlp.gate.weight": _normal(rng, (NUM_EXPERTS, HIDDEN)),
    }
    for e in range(NUM_EXPERTS):
        q = f"{p}.mlp.experts.{e}"
        t[f"{q}.gate_proj.weight"] = _normal(rng, (MOE_MLP, HIDDEN))
        t[f"{q}.up_proj.weight"] = _normal(rng, (MOE_MLP, HIDDEN))
        t[f"{q}.down_proj.weight"] = _normal(rng, (HIDDEN, MOE_MLP))
    return t


def tokenizer_dir() -> Path:
    """Locate the Qwen3 tokenizer that ships inside the installed maxtext wheel."""
    spec = importlib.util.find_spec("maxtext")
    if spec is None or spec.origin is None:
        raise SystemExit("maxtext is not installed in this interpreter's environment")
    path = Path(spec.origin).parent / "assets" / "tokenizers" / "qwen3-tokenizer"
    if not path.is_dir():
        raise SystemExit(f"tokenizer directory not found in the maxtext wheel: {path}")
    return path


def _dump_json(path: Path, obj: object) -> None:
    """Sorted keys and a trailing newline, so output bytes depend only on content."""
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def write_model(out: Path, seed: int) -> dict[str, int]:
    """Write the checkpoint into ``out`` and return counts for the log line."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    n_files = NUM_LAYERS + 1
    weight_map: dict[str, str] = {}
    total_bytes = 0
    n_params = 0

    def save(name: str, tensors: dict[str, np.ndarray]) -> None:
        nonlocal total_bytes, n_params
        save_file(tensors, str(out / name), metadata={"format": "pt"})
        for key, arr in tensors.items():
            weight_map[key] = name
            total_bytes += arr.nbytes
            n_params += arr.size

    for i in range(NUM_LAYERS):
        save(f"model-{i + 1:05d}-of-{n_files:05d}.safetensors", layer_tensors(rng, i))
    save(
        f"model-{n_files:05d}-of-{n_files:05d}.safetensors",
        {
            "model.embed_tokens.weight": _normal(rng, (VOCAB, HIDDEN)),
            "model.norm.weight": _ones(HIDDEN),
            "lm_head.weight": _normal(rng, (VOCAB, HIDDEN)),
        },
    )
    index = {
        "metadata": {"total_size": total_bytes},
        "weight_map": dict(sorted(weight_map.items())),
    }
    _dump_json(out / "model.safetensors.index.json", index)
    _dump_json(out / "config.json", CONFIG)
    _dump_json(out / "generation_config.json", GENERATION_CONFIG)
    for src in sorted(tokenizer_dir().iterdir()):
        if src.is_file():
            shutil.copyfile(src, out / src.name)
    return {"tensors": len(weight_map), "parameters": n_params, "bytes": total_bytes}


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--seed", type=int, default=0, help="RNG seed (same seed -> same bytes)")
    args = parser.parse_args()
    stats = write_model(args.out, args.seed)
    print(json.dumps({"out": str(args.out), "seed": args.seed, **stats}, sort_keys=True))


if __name__ == "__main__":
    main()
