"""The tiny-model builder (images/rehearsal/make_tiny_model.py) keeps each family's structure.

MaxText's to_maxtext maps a checkpoint from its built-in table, not from config.json, so a
tiny model converts only if its layer count, experts, vocabulary, tied head and tensor
names are the real model's. These tests hold the builder to flows/config/maxtext_models.json
(what scripts/maxtext_models.py read from MaxText 0.2.4; tests/config/
test_maxtext_models_pinned.py regenerates it) and to flows/config/rehearsal_models.py (what
the orchestrator expects of each family). The written bytes and MaxText's own name and
shape tables are checked in the rehearsal venv by test_tiny_models_in_maxtext.py.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from types import ModuleType

import pytest

from flows.common.paths import REHEARSAL_DIR
from flows.config.errors import ProfileError
from flows.config.loading import load_profile
from flows.config.maxtext_models import MODELS_FILE
from flows.config.rehearsal_models import REHEARSAL_MODELS


def _builder() -> ModuleType:
    """The builder script as a module: it imports numpy only until it writes."""
    spec = importlib.util.spec_from_file_location("make_tiny_model",
                                                  REHEARSAL_DIR / "make_tiny_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through it
    spec.loader.exec_module(module)
    return module


BUILDER = _builder()
PINNED = json.loads(MODELS_FILE.read_text())["models"]


def test_the_builder_builds_exactly_the_models_the_orchestrator_accepts():
    assert set(BUILDER.FAMILIES) == set(REHEARSAL_MODELS)
    for name, fam in BUILDER.FAMILIES.items():
        expected = REHEARSAL_MODELS[name]
        assert fam.maxtext_name == name
        assert fam.hf_class == expected.hf_class == fam.config["architectures"][0]
        assert fam.config["model_type"] == expected.model_type


@pytest.mark.parametrize("name", sorted(REHEARSAL_MODELS))
def test_structure_is_the_pinned_models(name):
    fam, arch = BUILDER.FAMILIES[name], PINNED[name]["architecture"]
    text = fam.config.get("text_config", fam.config)  # Gemma 3's is inside a multimodal one
    assert fam.num_layers == arch["base_num_decoder_layers"] == text["num_hidden_layers"]
    assert fam.vocab == arch["vocab_size"] == text["vocab_size"]
    assert fam.num_experts == (arch["num_experts"] if arch["num_experts"] > 1 else 0)
    assert fam.tied_embeddings == arch["logits_via_embedding"] == \
        fam.config.get("tie_word_embeddings", True)  # transformers' default, Gemma 3's
    # Gemma 3's decoder block normalises queries and keys whatever use_qk_norm says
    # (GEMMA3_MAXTEXT_TO_HF_PARAM_MAPPING maps query_norm and key_norm)
    assert fam.qk_norm == (bool(arch.get("use_qk_norm")) or arch["decoder_block"] == "gemma3")
    names = BUILDER.tensor_names(fam)
    assert len(names) == len(set(names))
    assert ("lm_head.weight" in names) != fam.tied_embeddings
    layers = {n.removeprefix(f"{fam.prefix}layers.").split(".")[0] for n in names
              if n.startswith(f"{fam.prefix}layers.")}
    assert layers == {str(i) for i in range(arch["base_num_decoder_layers"])}


# Layer 0's tensors under the names MaxText 0.2.4's param_mapping.py reads
# (QWEN_MAXTEXT_TO_HF_PARAM_MAPPING for both Qwen3s, LLAMA31_MAXTEXT_TO_HF_PARAM_MAPPING, and
# GEMMA3_MAXTEXT_TO_HF_PARAM_MAPPING under model.language_model.).
ATTENTION = {"input_layernorm.weight", "post_attention_layernorm.weight",
             "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
             "self_attn.o_proj.weight"}
DENSE_MLP = {"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}
QK_NORM = {"self_attn.q_norm.weight", "self_attn.k_norm.weight"}
LAYER_0 = {
    "qwen3-30b-a3b": ATTENTION | QK_NORM | {"mlp.gate.weight"} | {
        f"mlp.experts.{e}.{w}_proj.weight" for e in range(128) for w in ("gate", "up", "down")},
    "qwen3-0.6b": ATTENTION | QK_NORM | DENSE_MLP,
    "llama3.1-8b": ATTENTION | DENSE_MLP,
    "gemma3-4b": ATTENTION | QK_NORM | DENSE_MLP | {"pre_feedforward_layernorm.weight",
                                                     "post_feedforward_layernorm.weight"},
}


@pytest.mark.parametrize("name", sorted(LAYER_0))
def test_layer_tensors_carry_the_names_the_param_mapping_reads(name):
    fam = BUILDER.FAMILIES[name]
    prefix = f"{fam.prefix}layers.0."
    assert {n.removeprefix(prefix) for n, _ in BUILDER.layer_shapes(fam, 0)} == LAYER_0[name]


def test_an_unknown_model_is_refused_by_name():
    with pytest.raises(SystemExit) as err:
        BUILDER.family("qwen3-8b")
    assert "model.maxtext_name 'qwen3-8b'" in str(err.value)
    assert str(err.value).endswith("builds qwen3-30b-a3b, qwen3-0.6b, llama3.1-8b, gemma3-4b")


def test_a_rehearsal_of_a_model_it_cannot_build_is_refused_before_anything_runs():
    with pytest.raises(ProfileError) as err:
        load_profile("rehearsal", {"model.maxtext_name": "qwen3-8b"}, environ={})
    text = str(err.value)
    assert "model.maxtext_name" in text and "cannot build a tiny model of 'qwen3-8b'" in text
    assert "rehearsal-llama" in text


@pytest.mark.parametrize("profile", ["rehearsal-qwen3", "rehearsal-llama", "rehearsal-gemma"])
def test_each_family_profile_is_the_rehearsal_but_for_its_model(profile):
    """Every setting the rehearsal's comments justify is shared, the converter's one simulated
    device included (rehearsal.yaml, rehearsal-gemma.yaml say why); only the model differs."""
    base = load_profile("rehearsal", {}, environ={}).model_dump()
    other = load_profile(profile, {}, environ={}).model_dump()
    for key in ("name", "description", "model"):
        base.pop(key), other.pop(key)
    base["local"].pop("root"), other["local"].pop("root")
    assert other == base
