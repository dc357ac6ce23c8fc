"""The models the CPU rehearsal can build a tiny checkpoint of, one per conversion family.

Why a table of its own: MaxText maps each family's checkpoint differently (Qwen3-MoE's
per-expert tensors, Qwen3 dense with tied embeddings and per-head norms, Llama 3.1 without
them, Gemma 3's text model inside a multimodal checkpoint, scanned in blocks of six), so
the rehearsal proves a family only where images/rehearsal/make_tiny_model.py builds its
structure. The orchestrator cannot import that script (it runs in the rehearsal
venv), so the names, the transformers class each export must load as and the config's
``model_type`` are written here too; tests/backends/local/test_tiny_models.py holds the two
tables to each other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RehearsalModel:
    hf_class: str
    """The transformers class the export must load as."""
    model_type: str
    """The tiny checkpoint's config.json ``model_type``."""
    directory: str
    """The tiny checkpoint's directory under the infra stage's output."""


REHEARSAL_MODELS: dict[str, RehearsalModel] = {
    "qwen3-30b-a3b": RehearsalModel("Qwen3MoeForCausalLM", "qwen3_moe", "tiny-qwen3-moe"),
    "qwen3-0.6b": RehearsalModel("Qwen3ForCausalLM", "qwen3", "tiny-qwen3"),
    "llama3.1-8b": RehearsalModel("LlamaForCausalLM", "llama", "tiny-llama3.1"),
    # multimodal on the hub: the text model of Gemma3ForConditionalGeneration, vision left out
    "gemma3-4b": RehearsalModel("Gemma3ForConditionalGeneration", "gemma3", "tiny-gemma3"),
}


def rehearsal_model(maxtext_name: str) -> RehearsalModel:
    """The rehearsal's entry for a model the profile check has already accepted."""
    return REHEARSAL_MODELS[maxtext_name]
