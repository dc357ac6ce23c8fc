"""The fit check's verdicts as a table: (profile, model, slice, batch) → fits, warns or refused,
through `tpurl validate`'s own path (load_profile, then the warnings `tpurl validate` and
`tpurl plan` print), with the slice a refusal names; then every shipped GKE profile on every
TPU generation: its smallest slice there holds it, and the next smaller one is refused
naming that slice."""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flows.common.issues import Issue
from flows.common.paths import PROFILES_DIR
from flows.config.fit_rules import fit_warning, rollout_check
from flows.config.loading import ProfileError, load_profile
from flows.config.maxtext_rules import fitted_axes
from flows.config.slice_move import smallest_move
from flows.config.tpu import TPU_GENERATIONS, TPU_MACHINES, chips_in_topology, supported_topologies
from flows.operations.compare_tpu import candidates
from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED

SMOKE = "smoke-qwen3-0.6b-v6e-8"
LLAMA = "llama3.1-8b-v6e-16"
GEMMA = "gemma3-12b-v6e-16"
FIT_CODES = ("config/does-not-fit", "config/rollout-does-not-fit")
GKE_PROFILES = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")
                      if yaml.safe_load(p.read_text()).get("backend") == "gke")
# a quoted price for the generations that ship none, and a cap no table row reaches: the
# rows judge memory, not money (tests/config/test_spend_rules.py judges the cap)
QUOTE = {f"gke.prices.{mode}.{k}": v for mode in ("reservation", "on-demand")
         for k, v in (("usd_per_chip_hour", "3.0"), ("source", "a quote"),
                      ("as_of", "2026-12-01"))}


def _base(profile: str) -> dict[str, str]:
    raw = yaml.safe_load((PROFILES_DIR / f"{profile}.yaml").read_text())["gke"]
    base = dict(TUTORIAL_REQUIRED)
    if raw.get("capacity", "reservation") != "reservation":
        base.pop("gke.reservation")
    # a cap above any shipped profile's estimate on the largest slice of a generation
    # (the throughput profile's 12 h on 6144 v5p chips at the quoted $3: $221,184)
    return {**base, "gke.max_usd_per_run": "1000000"}


def on(machine_type: str, topology: str, **train: str) -> dict[str, str]:
    """Overrides that move a profile to a slice: the rollout's data parallelism left to
    train_rl (-1) so it follows the slice, a quote where no price ships."""
    generation = TPU_MACHINES[machine_type].generation
    return {"gke.machine_type": machine_type, "gke.topology": topology,
            "train.args.rollout_data_parallelism": "-1",
            **({} if generation == "v6e" else QUOTE),
            **{f"train.args.{k}": v for k, v in train.items()}}


def model(name: str, repo: str) -> dict[str, str]:
    return {"model.maxtext_name": name, "model.hf_repo": repo}


def judge(profile: str, overrides: dict[str, str]) -> tuple[str, list[Issue]]:
    """fits, warns or refused, as `tpurl validate` ends; the fit check's issues of a refusal
    (any other refusal fails the row: it would not be the fit check's verdict)."""
    try:
        loaded = load_profile(profile, {**_base(profile), **overrides}, environ={})
    except ProfileError as caught:
        other = [i for i in caught.issues if i.category not in FIT_CODES]
        assert not other, [i.render() for i in other]
        return "refused", caught.issues
    return ("warns" if fit_warning(loaded) else "fits"), []


QWEN235 = model("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B")
LLAMA70 = model("llama3.1-70b", "meta-llama/Llama-3.1-70B-Instruct")
GEMMA4B = model("gemma3-4b", "google/gemma-3-4b-it")
GEMMA27 = model("gemma3-27b", "google/gemma-3-27b-it")
# label, profile, overrides, verdict, the code of a refusal, what its fix must name
TABLE: list[tuple[str, str, dict[str, str], str, str, str]] = [
    ("tutorial", TUTORIAL, {}, "fits", "", ""),
    ("smoke", SMOKE, {}, "fits", "", ""),
    ("llama-8b-v6e-16", LLAMA, {}, "fits", "", ""),
    ("gemma3-12b-v6e-16", GEMMA, {}, "fits", "", ""),
    # the smoke slice with the largest Qwen3: its weights alone pass the 4 trainer chips
    ("235b-on-v6e-8", SMOKE, QWEN235, "refused", "config/does-not-fit",
     "gke.topology=16x16"),
    ("70b-on-v6e-8", SMOKE, LLAMA70, "refused", "config/does-not-fit", "gke.topology=8x8"),
    # 64 chips hold its training, but a replica of 8 (its 8 KV heads' limit) holds 19.9 GiB
    # of weights, past the 16.4 GiB vLLM's 0.55 leaves: the fix raises the share
    ("70b-on-v6e-64", SMOKE, {**LLAMA70, **on("ct6e-standard-4t", "8x8",
                                              rollout_tensor_parallelism="8")},
     "refused", "config/rollout-does-not-fit", "train.args.hbm_utilization_vllm=0.8"),
    ("70b-on-v6e-64-at-0.8", SMOKE, {**LLAMA70, **on(
        "ct6e-standard-4t", "8x8", rollout_tensor_parallelism="8",
        hbm_utilization_vllm="0.8")}, "fits", "", ""),
    ("70b-on-v5p-8", SMOKE, {**LLAMA70, **on("ct5p-hightpu-4t", "2x2x2")}, "refused",
     "config/does-not-fit", "gke.topology=2x4x4"),
    ("27b-on-the-12b-slice", GEMMA, GEMMA27, "refused", "config/does-not-fit",
     "gke.topology=4x8"),
    # 64 tpu7x chips are 128 devices: 64 sample, each a replica of 16 experts' devices
    ("235b-on-tpu7x-4x4x4", SMOKE, {**QWEN235, **on(
        "tpu7x-standard-4t", "4x4x4", rollout_expert_parallelism="16")}, "fits", "", ""),
    ("235b-on-tpu7x-rollout-default", SMOKE, {**QWEN235, **on("tpu7x-standard-4t", "4x4x4")},
     "refused", "config/rollout-does-not-fit", "train.args.rollout_expert_parallelism=16"),
    # the new profiles one size down: the weights fit 4 trainer chips, the activations may not
    ("llama-8b-on-v6e-8", LLAMA, on("ct6e-standard-4t", "2x4"), "warns", "", ""),
    ("gemma3-12b-on-v6e-8", GEMMA, on("ct6e-standard-4t", "2x4"), "warns", "", ""),
    # MaxText's default rollout (tensor 1): a Gemma 3 12B replica per v6e chip cannot start
    ("gemma3-12b-tensor-1", GEMMA, {"train.args.rollout_tensor_parallelism": "1",
                                    "train.args.rollout_data_parallelism": "-1"},
     "refused", "config/rollout-does-not-fit", "train.args.rollout_tensor_parallelism=2"),
    # tensor 8 does not divide Gemma 3 4B's 8 query and 4 KV heads
    ("gemma3-4b-tensor-8", GEMMA, {**GEMMA4B, "train.args.rollout_tensor_parallelism": "8",
                                   "train.args.rollout_data_parallelism": "1"},
     "refused", "config/rollout-does-not-fit", "train.args.rollout_tensor_parallelism=1"),
    ("gemma3-4b-on-v6e-8", GEMMA, {**GEMMA4B, **on("ct6e-standard-4t", "2x4",
                                                   rollout_tensor_parallelism="1")},
     "fits", "", ""),
    ("smoke-batch-32-of-8b", SMOKE, {**model("qwen3-8b", "Qwen/Qwen3-8B"),
                                     "train.args.batch_size": "32",
                                     "train.args.train_micro_batch_size": "32"},
     "warns", "", ""),
]


@pytest.mark.parametrize(("label", "profile", "overrides", "verdict", "code", "named"), TABLE,
                         ids=[row[0] for row in TABLE])
def test_the_verdict_table(label: str, profile: str, overrides: dict[str, str], verdict: str,
                           code: str, named: str) -> None:
    found, issues = judge(profile, overrides)
    assert found == verdict, [i.render() for i in issues]
    if verdict == "refused":
        [issue] = [i for i in issues if i.category == code]
        assert named in issue.fix, issue.render()


def test_a_refusal_names_every_part_and_the_fix_field() -> None:
    _, [issue] = judge(SMOKE, QWEN235)
    assert issue.field == "gke.topology"
    assert "235.09B parameters" in issue.problem and "trainer on 4 chip(s)" in issue.problem
    _, issues = judge(GEMMA, {"train.args.rollout_tensor_parallelism": "1",
                              "train.args.rollout_data_parallelism": "-1"})
    [rollout] = issues
    assert rollout.field == "train.args.rollout_tensor_parallelism"
    assert "21.9 GiB of weights" in rollout.problem and "of the 16.4 GiB" in rollout.problem


def test_the_new_profiles_set_the_rollout_the_check_derives() -> None:
    """The shipped values are the derived ones, so a profile and the rule cannot drift."""
    for profile in (LLAMA, GEMMA):
        check = rollout_check(load_profile(profile, _base(profile), environ={}))
        assert check is not None and check.holds and check.derived is not None
        assert check.derived.parallelism == check.given.parallelism, profile


def _slices(generation: str) -> list[tuple[int, str, str]]:
    return sorted((chips_in_topology(t), m.machine_type, t) for m in TPU_MACHINES.values()
                  if m.generation == generation for t in supported_topologies(m))


def _fit_issues(profile: str, overrides: dict[str, str]) -> list[Issue]:
    try:
        load_profile(profile, {**_base(profile), **overrides}, environ={})
    except ProfileError as caught:
        return [i for i in caught.issues if i.category == "config/does-not-fit"]
    return []


def _named(fix: str) -> dict[str, str]:
    """The settings a fix's first clause names (``set a=b, c=d (why)``), to apply them."""
    first = fix.split(";")[0].split("(")[0]
    return dict(re.findall(r"([a-z_][a-z_.0-9]*)=([^\s,;()]+)", first))


def _slice_of(label: str) -> tuple[str, str]:
    machine_type, topology = label.split(" ")
    return machine_type, topology


SLICES = sorted(f"{m.machine_type} {t}" for m in TPU_MACHINES.values()
                for t in supported_topologies(m))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=st.sampled_from(GKE_PROFILES), slice_=st.sampled_from(SLICES),
       model_=st.sampled_from([{}, QWEN235, LLAMA70, GEMMA27, model("qwen3-8b", "Qwen/Qwen3-8B")]),
       num_slices=st.sampled_from(["1", "2"]))
def test_every_slice_the_fit_check_names_validates_with_its_changes(
        profile: str, slice_: str, model_: dict[str, str], num_slices: str) -> None:
    """A profile moved to any slice (of any generation, with any of these models, one slice
    or two): where the fit check refuses it, the settings its fix names, applied as they
    are, validate."""
    moved = {**model_, **on(*_slice_of(slice_)), "gke.num_slices": num_slices}
    try:
        load_profile(profile, {**_base(profile), **moved}, environ={})
    except ProfileError as caught:
        refusals = [i for i in caught.issues if i.category == "config/does-not-fit"]
        if not refusals or "slice holds it" in refusals[0].fix:
            return
        named = _named(refusals[0].fix)
        assert {"gke.machine_type", "gke.topology"} <= set(named), refusals[0].fix
        generation = TPU_MACHINES[named["gke.machine_type"]].generation
        load_profile(profile, {**_base(profile), **moved, **named,
                               **({} if generation == "v6e" else QUOTE)}, environ={})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=st.sampled_from(GKE_PROFILES), slice_=st.sampled_from(SLICES),
       model_=st.sampled_from([{}, GEMMA4B, LLAMA70, model("qwen3-8b", "Qwen/Qwen3-8B")]),
       num_slices=st.sampled_from(["1", "2"]))
def test_every_slice_compare_tpu_suggests_validates_with_its_changes(
        profile: str, slice_: str, model_: dict[str, str], num_slices: str) -> None:
    """Whatever slice, model and slice count the profile starts from, every slice
    ``plan --compare-tpu`` lists, with the changes it names there (mesh and rollout),
    validates."""
    start = {**_base(profile), **model_, **on(*_slice_of(slice_)), **QUOTE,
             "gke.num_slices": num_slices}
    try:
        loaded = load_profile(profile, start, environ={})
    except ProfileError:
        return  # the start itself is refused (a model that does not fit this slice)
    found = candidates(loaded)
    assert not isinstance(found, str)
    for c in found:
        load_profile(profile, {**start, **c.changes}, environ={})


@pytest.mark.parametrize(("axes", "devices", "changed"), [
    ({"ici_fsdp_parallelism": -1, "ici_tensor_parallelism": 2, "ici_expert_parallelism": 4},
     (16, 16), {}),
    ({"ici_fsdp_parallelism": -1, "ici_tensor_parallelism": 2, "ici_expert_parallelism": 4},
     (4, 4), {"ici_expert_parallelism": 2}),
    ({"ici_fsdp_parallelism": 2, "ici_tensor_parallelism": 4}, (8, 8), {}),
    ({"ici_fsdp_parallelism": 2, "ici_tensor_parallelism": 4}, (4, 4),
     {"ici_fsdp_parallelism": -1}),
    ({"ici_fsdp_parallelism": -1, "ici_data_parallelism": -1}, (4, 4), None),
])
def test_the_mesh_keeps_the_axes_that_fit(axes: dict[str, int], devices: tuple[int, ...],
                                          changed: dict[str, int] | None) -> None:
    assert fitted_axes(axes, devices, "ici_fsdp_parallelism") == changed


def test_the_v5p_slice_compare_tpu_lists_for_the_tutorial_comes_with_its_mesh() -> None:
    """Eight v5p chips give the tutorial's trainer 4 devices: its tensor 2 × expert 4 mesh is
    fitted to them, and the profile with the changes validates."""
    loaded = load_profile(TUTORIAL, {**TUTORIAL_REQUIRED, **QUOTE}, environ={})
    found = candidates(loaded)
    assert not isinstance(found, str)
    [v5p8] = [c for c in found if (c.machine_type, c.topology) == ("ct5p-hightpu-4t", "2x2x2")]
    assert v5p8.changes["train.args.ici_expert_parallelism"] == "2"
    assert "mesh ici_expert_parallelism=2" in v5p8.rollout
    load_profile(TUTORIAL, {**TUTORIAL_REQUIRED, **QUOTE, "gke.max_usd_per_run": "100000",
                            **v5p8.changes}, environ={})


# MaxText's single-host RL tutorial (docs/tutorials/posttraining/rl.md): Llama 3.1 8B on one
# v6e-8 VM with chips_per_vm=8 and rl.yml's defaults otherwise (rollout tensor 1, data -1,
# hbm_utilization_vllm 0.72, batch_size 1, num_generations 2, max_target_length 1024)
MAXTEXT_TUTORIAL = {"gke.machine_type": "ct6e-standard-8t", "gke.topology": "2x4",
                    "train.args.chips_per_vm": "8", "train.args.rollout_tensor_parallelism": "1",
                    "train.args.rollout_data_parallelism": "-1",
                    "train.args.hbm_utilization_vllm": "0.72", "train.args.batch_size": "1",
                    "train.args.train_micro_batch_size": "-1",
                    "train.args.rollout_micro_batch_size": "-1",
                    "train.args.num_generations": "2", "train.args.max_target_length": "1024"}


def test_llama_8b_on_one_v6e_8_host_as_maxtexts_tutorial_runs_it() -> None:
    """The trainer shares the host's 8 chips with vLLM: its actor and reference weights count
    inside vLLM's 0.72 share beside vLLM's own (tpu-inference's worker counts the HBM in use),
    its moments and gradients take the other 0.28. It fits."""
    from flows.config.fit_rules import profile_estimate

    loaded = load_profile(LLAMA, {**_base(LLAMA), **MAXTEXT_TUTORIAL}, environ={})
    est = profile_estimate(loaded)
    assert est is not None and est.verdict != "no-fit"
    assert [p.name for p in est.sampler.parts][:2] == ["actor weights", "reference weights"]
    check = rollout_check(loaded)
    assert check is not None and check.given.verdict != "no-fit"
    assert check.sampler.shared and check.given.resident > 0


def test_one_host_short_of_the_trainers_weights_is_refused() -> None:
    """Boundary: the same host at a share that leaves vLLM too little beside the trainer's
    weights (0.55 × 32 GB < 4 + 16 GB a device) is refused, naming the rollout's fix."""
    _, issues = judge(LLAMA, {**MAXTEXT_TUTORIAL, "train.args.hbm_utilization_vllm": "0.55"})
    [issue] = issues
    assert issue.category == "config/rollout-does-not-fit"
    assert "trainer's actor and reference weights" in issue.problem
    assert "train.args.rollout_tensor_parallelism=" in issue.fix
    loaded = load_profile(LLAMA, {**_base(LLAMA), **MAXTEXT_TUTORIAL,
                                  "train.args.hbm_utilization_vllm": "0.55",
                                  **_named(issue.fix)}, environ={})
    assert loaded.gke is not None


@pytest.mark.parametrize("profile", GKE_PROFILES)
@pytest.mark.parametrize("generation", sorted(TPU_GENERATIONS))
def test_each_profile_on_each_generation_names_its_smallest_slice(profile: str,
                                                                  generation: str) -> None:
    """On every generation: the slice smallest_move names holds the profile's training with
    the changes it names, and the largest smaller one is refused naming those changes."""
    _, machine_type, topology = _slices(generation)[-1]
    loaded = load_profile(profile, {**_base(profile), **on(machine_type, topology)},
                          environ={})
    move = smallest_move(loaded)
    assert move is not None
    load_profile(profile, {**_base(profile), **on(machine_type, topology), **move},
                 environ={})
    below = [s for s in _slices(generation) if s[0] < chips_in_topology(move["gke.topology"])]
    if below:
        [issue] = _fit_issues(profile, on(below[-1][1], below[-1][2]))
        assert _named(issue.fix) == move, issue.fix
