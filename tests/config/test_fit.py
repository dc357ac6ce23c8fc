"""The fit check: parameter counts against published sizes, verdicts on shipped and refused
profiles, and a verdict that more chips never turns from fit to no-fit."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flows.common.paths import PROFILES_DIR, REPO_ROOT
from flows.common.yaml_text import load_yaml
from flows.config.fit import (
    HBM_BYTES_PER_CHIP,
    RunShape,
    SliceShape,
    embedding_parameters,
    estimate,
    estimated,
    gib,
    parameter_count,
)
from flows.config.fit_rules import fit_warning, profile_estimate, run_shape
from flows.config.loading import ProfileError, load_profile
from flows.config.maxtext_models import architecture, convertible_models
from flows.config.tpu import TPU_MACHINES, chips_in_topology, supported_topologies
from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED, required_overrides

SMOKE = "smoke-qwen3-0.6b-v6e-8"
ON_DEMAND = {**TUTORIAL_REQUIRED, "gke.reservation": ""}

# Published sizes (billions, total and active), from each model's card on the hub
# (Qwen3 technical report table; Llama 3.1 and Mixtral model cards; Gemma 3's text decoder:
# the Gemma 3 technical report's Table 1, embedding + non-embedding parameters, the SigLIP
# vision tower's 417M left out as train_rl builds it only with use_multimodal).
PUBLISHED = {
    "gemma3-4b": (0.675 + 3.209, 0.675 + 3.209), "gemma3-12b": (1.012 + 10.759, 1.012 + 10.759),
    "gemma3-27b": (1.416 + 25.600, 1.416 + 25.600), "llama3.1-8b": (8.03, 8.03),
    "qwen3-0.6b": (0.6, 0.6), "qwen3-8b": (8.2, 8.2), "qwen3-14b": (14.8, 14.8),
    "qwen3-32b": (32.8, 32.8), "qwen3-30b-a3b": (30.5, 3.3), "qwen3-235b-a22b": (235.0, 22.0),
    "llama3.1-70b": (70.6, 70.6), "llama3.1-405b": (405.9, 405.9),
    "mixtral-8x7b": (46.7, 12.9), "qwen2.5-7b": (7.61, 7.61),
}
# convertible models whose architecture the formula does not describe (MLA, linear attention,
# Gemma's layer pairs, vision towers): listed so a regenerated file that adds one is noticed
NOT_ESTIMATED = {
    "deepseek2-16b", "deepseek3-671b", "deepseek3.2-671b", "deepseek4-284b", "gemma2-27b",
    "gemma2-2b", "gemma2-9b", "gemma4-26b",
    "gemma4-31b", "gemma4-e2b", "gemma4-e4b", "gpt-oss-120b", "gpt-oss-20b",
    "qwen3-next-80b-a3b", "qwen3-vl-2b", "qwen3-vl-30b-a3b", "qwen3-vl-4b", "qwen3.5-35b-a3b",
    "qwen3.5-397b-a17b",
}
_NAME_SIZE = re.compile(r"-(\d+(?:\.\d+)?)b(?:-a(\d+(?:\.\d+)?)b)?(?:-|$)")


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_the_count_is_the_published_size(name: str) -> None:
    count = parameter_count(architecture(name))
    total, active = PUBLISHED[name]
    assert count.total / 1e9 == pytest.approx(total, rel=0.02)
    assert count.active / 1e9 == pytest.approx(active, rel=0.03)


# The Gemma 3 report's non-embedding parameters (millions): the layers alone, where the
# formula's Gemma 3 terms (q/k norms, four norms a layer) live; the embedding's figure there
# counts a few more rows than MaxText's 262,144 (the converter pads or truncates to them).
GEMMA3_NON_EMBEDDING = {"gemma3-4b": 3209, "gemma3-12b": 10759, "gemma3-27b": 25600}


@pytest.mark.parametrize("name", sorted(GEMMA3_NON_EMBEDDING))
def test_gemma3_layers_are_the_reports(name: str) -> None:
    arch = architecture(name)
    layers = parameter_count(arch).total - embedding_parameters(arch) - arch.base_emb_dim
    assert layers / 1e6 == pytest.approx(GEMMA3_NON_EMBEDDING[name], rel=0.001)


def test_the_estimated_models_are_the_formulas() -> None:
    assert {n for n in convertible_models() if not estimated(n, architecture(n))} == NOT_ESTIMATED


# Mistral AI's published sizes for the names that hold none ("Mixtral of experts", 2024:
# 46.7B total / 12.9B active; Mixtral 8x22B's announcement: 141B / 39B), in billions
PUBLISHED_SIZES = {"mixtral-8x7b": ("46.7", "12.9"), "mixtral-8x22b": ("141", "39")}


def _published(name: str) -> tuple[str, str | None]:
    found = _NAME_SIZE.search(name)
    return (found[1], found[2]) if found is not None else PUBLISHED_SIZES[name]


@pytest.mark.parametrize("name", [n for n in convertible_models() if n not in NOT_ESTIMATED])
def test_every_estimated_model_is_near_its_published_size(name: str) -> None:
    """Names round (qwen2.5-7b is 7.61B, qwen3-30b-a3b's active part 3.35B): 10 % on the
    total, 15 % on the active part. A name without a size takes the published one."""
    count = parameter_count(architecture(name))
    total, active = _published(name)
    assert count.total / 1e9 == pytest.approx(float(total), rel=0.10)
    if active:
        assert count.active / 1e9 == pytest.approx(float(active), rel=0.15)


def test_a_model_with_a_converter_config_is_convertible() -> None:
    assert "qwen3-235b-a22b" in convertible_models()
    assert "qwen3-1.7b" not in convertible_models()  # in PARAM_MAPPING, not in HF_IDS


def _smoke_shape(**changes: int) -> RunShape:
    shape = run_shape(load_profile(SMOKE, ON_DEMAND, environ={}).train.args)
    return RunShape(**{**shape.__dict__, **changes})


VERDICTS = [  # model, machine type, topology, batch, expected
    ("qwen3-0.6b", "ct6e-standard-4t", "2x4", 4, "fits"),
    ("qwen3-0.6b", "ct6e-standard-1t", "1x1", 4, "fits"),
    ("qwen3-30b-a3b", "ct6e-standard-4t", "4x8", 8, "fits"),
    ("qwen3-30b-a3b", "ct6e-standard-4t", "2x4", 8, "no-fit"),
    ("qwen3-235b-a22b", "ct6e-standard-4t", "2x4", 4, "no-fit"),
    ("qwen3-235b-a22b", "ct6e-standard-4t", "8x16", 4, "no-fit"),
    ("qwen3-235b-a22b", "ct6e-standard-4t", "16x16", 4, "fits"),
    ("llama3.1-8b", "ct6e-standard-4t", "2x4", 4, "fits"),
    ("llama3.1-8b", "ct6e-standard-8t", "2x4", 4, "fits"),
    ("llama3.1-70b", "ct6e-standard-4t", "4x4", 4, "no-fit"),
    ("llama3.1-70b", "ct6e-standard-4t", "4x8", 4, "no-fit"),
    ("llama3.1-70b", "ct6e-standard-4t", "8x8", 4, "fits"),
    ("qwen3-8b", "ct6e-standard-4t", "2x4", 16, "fits"),  # 83 % of the trainer's 4 chips
    ("qwen3-8b", "ct6e-standard-4t", "2x4", 32, "tight"),  # 102 %: activations may not fit
    ("qwen3-14b", "ct6e-standard-4t", "2x4", 4, "no-fit"),  # its weights alone: 115 %
    ("mixtral-8x7b", "ct6e-standard-4t", "4x8", 4, "tight"),
    # one VM, so the trainer shares the 4 chips: its weights inside vLLM's 0.55 (49 of 70 GB),
    # moments and gradients in the other 0.45 (49 of 58 GB); the activations may not fit
    ("qwen3-8b", "ct6e-standard-4t", "2x2", 4, "tight"),
]


@pytest.mark.parametrize(("name", "machine_type", "topology", "batch", "expected"), VERDICTS,
                         ids=[f"{v[0]}-{v[2]}-b{v[3]}" for v in VERDICTS])
def test_verdicts(name: str, machine_type: str, topology: str, batch: int,
                  expected: str) -> None:
    shape = _smoke_shape(batch_size=batch, rollout_batch_size=batch)
    slice_ = SliceShape("v6e", chips_in_topology(topology))
    assert TPU_MACHINES[machine_type]
    assert estimate(architecture(name), shape, slice_).verdict == expected


def test_the_shipped_gke_profiles_fit() -> None:
    tutorial = profile_estimate(load_profile(TUTORIAL, TUTORIAL_REQUIRED, environ={}))
    smoke = profile_estimate(load_profile(SMOKE, ON_DEMAND, environ={}))
    assert tutorial is not None and tutorial.verdict == "fits"
    assert smoke is not None and smoke.verdict == "fits"


def test_235b_on_eight_chips_is_refused_naming_the_numbers_and_the_slice() -> None:
    with pytest.raises(ProfileError) as caught:
        load_profile(SMOKE, {**ON_DEMAND, "model.maxtext_name": "qwen3-235b-a22b",
                             "model.hf_repo": "Qwen/Qwen3-235B-A22B"}, environ={})
    [issue] = [i for i in caught.value.issues if i.category == "config/does-not-fit"]
    assert issue.field == "gke.topology"
    assert "235.09B parameters" in issue.problem and "trainer on 4 chip(s)" in issue.problem
    assert "of 119.2 GiB" in issue.problem  # 4 chips × 32 GB
    assert "gke.topology=16x16" in issue.fix and "model.maxtext_name" in issue.fix
    # the rollout split that holds the model on 256 chips comes with the slice
    assert "train.args.rollout_tensor_parallelism=" in issue.fix
    assert "need 2,189.5 GiB, its 4 chip(s) hold 119.2 GiB" in issue.problem


def test_a_model_that_does_not_convert_is_refused_naming_those_that_do() -> None:
    with pytest.raises(ProfileError) as caught:
        load_profile(SMOKE, {**ON_DEMAND, "model.maxtext_name": "qwen3-1.7b"}, environ={})
    [issue] = [i for i in caught.value.issues if i.category == "config/unconvertible-model"]
    assert issue.field == "model.maxtext_name"
    assert "qwen3-0.6b" in issue.fix and "qwen3-235b-a22b" in issue.fix


def test_model_args_judge_the_model_at_its_overridden_size() -> None:
    """The rehearsal's tiny Qwen3-MoE keeps qwen3-30b-a3b's name; its model.args set the
    numbers MaxText builds (override_model_config), so its count is the tiny one."""
    rehearsal = load_profile("rehearsal", environ={})
    tiny = parameter_count(architecture(rehearsal.model.maxtext_name, rehearsal.model.args))
    assert tiny.total < 0.1e9  # 58M: the vocabulary and 48 layers of 128 tiny experts
    assert profile_estimate(rehearsal) is None  # a local run: no slice to judge
    shrunk = {f"model.args.{k}": str(v) for k, v in rehearsal.model.args.items()}
    est = profile_estimate(load_profile(SMOKE, {**ON_DEMAND, **shrunk,
                                                "model.maxtext_name": "qwen3-235b-a22b"},
                                        environ={}))
    assert est is not None and est.verdict == "fits"
    assert est.params.total < 0.5e9


def test_a_tight_profile_is_warned_not_refused() -> None:
    tight = load_profile(SMOKE, {**ON_DEMAND, "model.maxtext_name": "qwen3-8b",
                                 "model.hf_repo": "Qwen/Qwen3-8B",
                                 "train.args.batch_size": "32",
                                 "train.args.train_micro_batch_size": "32"}, environ={})
    warning = fit_warning(tight)
    assert warning is not None and "may not fit" in warning and "GiB" in warning
    assert "train.args.train_micro_batch_size" in warning
    assert fit_warning(load_profile(SMOKE, ON_DEMAND, environ={})) is None


def test_hbm_per_chip_is_the_documented_figure() -> None:
    assert HBM_BYTES_PER_CHIP == {"v6e": 32e9, "v5p": 95e9, "tpu7x": 192e9}


_ESTIMATED = sorted(n for n in convertible_models() if n not in NOT_ESTIMATED)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(_ESTIMATED), batch=st.integers(1, 64),
       generations=st.integers(2, 16), length=st.integers(128, 8192),
       utilization=st.floats(0.3, 0.9), num_slices=st.integers(1, 4),
       generation=st.sampled_from(sorted(HBM_BYTES_PER_CHIP)))
def test_more_chips_never_turn_a_fit_into_no_fit(name: str, batch: int, generations: int,
                                                 length: int, utilization: float,
                                                 num_slices: int, generation: str) -> None:
    shape = _smoke_shape(batch_size=batch, rollout_batch_size=batch,
                         num_generations=generations, max_target_length=length)
    shape = RunShape(**{**shape.__dict__, "hbm_utilization_vllm": utilization})
    arch = architecture(name)
    for machine in TPU_MACHINES.values():
        chips = sorted({chips_in_topology(t) for t in supported_topologies(machine)})
        verdicts = [estimate(arch, shape, SliceShape(generation, c, num_slices)).verdict
                    for c in chips]
        fitted = [v != "no-fit" for v in verdicts]
        assert fitted == sorted(fitted), (machine.machine_type, chips, verdicts)


def test_the_profiles_page_holds_the_shipped_profiles_estimates() -> None:
    """docs/how-to/profiles.md quotes each shipped GKE profile's estimate: recomputed here."""
    page = (REPO_ROOT / "docs" / "how-to" / "profiles.md").read_text()
    shipped = [p.stem for p in PROFILES_DIR.glob("*.yaml")
               if load_yaml(p.read_text()).get("backend") == "gke"]
    assert len(shipped) >= 4
    for profile in shipped:
        overrides = required_overrides(profile)
        est = profile_estimate(load_profile(profile, overrides, environ={}))
        assert est is not None
        for side in (est.trainer, est.sampler):
            quoted = (f"{gib(side.needs)} of {gib(side.holds)} ({side.share:.0%}"[:-1]
                      + f" %) on {side.chips} chips")
            assert quoted in page, quoted


def test_maxtexts_own_qwen3_30b_recipe_fits() -> None:
    """MaxText 0.2.4 trainers/post_train/rl/scripts/run_qwen3_30b_rl.sh: qwen3-30b-a3b-base on
    tpu7x-128 (64 chips of two devices each: its chips_per_vm=8 counts devices), 8192-token
    sequences, 32 prompts × 8 generations per training micro-batch."""
    args: dict[str, str | int | float | bool] = {
        "rl.num_generations": 8, "max_target_length": 8192, "batch_size": 128,
        "train_micro_batch_size": 32, "rollout_micro_batch_size": 128,
        "hbm_utilization_vllm": 0.75, "chips_per_vm": 8}
    est = estimate(architecture("qwen3-30b-a3b-base"), run_shape(args), SliceShape("tpu7x", 64))
    assert est.verdict == "fits", est.share
