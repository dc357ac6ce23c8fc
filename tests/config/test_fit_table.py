"""The fit check's verdicts as a table: (profile, model, slice, batch) → fits, warns or refused,
through `tpurl validate`'s own path (load_profile, then the warnings `tpurl validate` and
`tpurl plan` print), with the slice a refusal names; then every shipped GKE profile on every
TPU generation: its smallest slice there holds it, and the next smaller one is refused
naming that slice."""

from __future__ import annotations

import pytest
import yaml

from flows.common.issues import Issue
from flows.common.paths import PROFILES_DIR
from flows.config.fit_rules import fit_warning, rollout_check, run_shape, smallest_fitting
from flows.config.loading import ProfileError, load_profile
from flows.config.tpu import TPU_GENERATIONS, TPU_MACHINES, chips_in_topology, supported_topologies
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
    return {**base, "gke.max_usd_per_run": "100000"}


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


@pytest.mark.parametrize("profile", GKE_PROFILES)
@pytest.mark.parametrize("generation", sorted(TPU_GENERATIONS))
def test_each_profile_on_each_generation_names_its_smallest_slice(profile: str,
                                                                  generation: str) -> None:
    """On every generation: the slice smallest_fitting names holds the profile's training,
    and the largest smaller one is refused with that slice in its fix."""
    _, machine_type, topology = _slices(generation)[-1]
    loaded = load_profile(profile, {**_base(profile), **on(machine_type, topology)},
                          environ={})
    smallest = smallest_fitting(loaded, run_shape(loaded.train.args))
    assert smallest is not None
    assert _fit_issues(profile, on(*smallest)) == []
    below = [s for s in _slices(generation) if s[0] < chips_in_topology(smallest[1])]
    if below:
        [issue] = _fit_issues(profile, on(below[-1][1], below[-1][2]))
        assert f"gke.machine_type={smallest[0]} and gke.topology={smallest[1]}" in issue.fix
