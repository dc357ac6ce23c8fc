"""A refusal's fix, followed: the settings a fix text names are applied to the same overrides,
the profile is loaded again, and the refusal is gone with no new one about the same field.

Fix texts that name a change (``set train.args.X=3, gke.topology=4x8``) are mechanical:
this module reads those settings out of the text exactly as a user would copy them, so a fix
whose values do not work, or a text that names no value where one can be computed, fails
here. Profiles come from the shipped ones perturbed at and around the limits the fit, rollout
and mesh rules hold (a few hand-picked, more drawn by hypothesis). A placeholder (``VALUE``:
the user's own project, bucket or zone) is not a setting this module can follow; the fix
texts with one are listed by ``test_placeholders_are_the_users_own_values``.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flows.common.issues import Issue
from flows.config.fit_rules import fit_warning
from flows.config.loading import ProfileError, load_profile
from flows.config.profile import Profile
from tests.support.profiles import required_overrides

# ``field=value`` as a fix text names it: a dotted profile field, then a value up to the next
# comma, space, semicolon or bracket. ``VALUE`` (and other capitals) is a placeholder.
SETTING = re.compile(r"(?<![\w.])((?:[a-z_]+)(?:\.[A-Za-z0-9_-]+)+)=([^\s,;()]+)")
# "raise FIELD to at least 201.60", "set FIELD to 3": the same, in words
IN_WORDS = re.compile(r"(?:set|raise) ((?:[a-z_]+)(?:\.[A-Za-z0-9_-]+)+) to (?:at least )?"
                      r"\$?([0-9][0-9.]*[0-9]|[0-9])")
GKE = ("qwen3-30b-a3b-v6e-32", "llama3.1-8b-v6e-16", "gemma3-12b-v6e-16",
       "smoke-qwen3-0.6b-v6e-8")


def named_settings(fix: str) -> dict[str, str]:
    """The settings a fix text names with a concrete value (placeholders left out)."""
    found = {field: value for field, value in SETTING.findall(fix) if not value.isupper()}
    return {**found, **dict(IN_WORDS.findall(fix))}


def load(name: str, overrides: dict[str, str]) -> tuple[Profile | None, list[Issue]]:
    try:
        return load_profile(name, {**required_overrides(name), **overrides}, environ={}), []
    except ProfileError as exc:
        return None, list(exc.issues)


def follow(name: str, overrides: dict[str, str]) -> list[str]:
    """Load, apply every mechanical fix of every refusal, load again: what went wrong.

    The refusal followed must be gone. Another rule may then refuse the same field for its
    own reason (a topology the machine supports, then too small for the model): its fix is
    followed in turn, as a user would, and the field must be accepted within three steps."""
    _profile, issues = load(name, overrides)
    wrong = []
    for issue in issues:
        # a fix offering alternatives (``; or ...``) is followed one alternative at a time
        for option in issue.fix.split("; or "):
            if setting := named_settings(option):
                wrong += _follow_one(name, overrides, issue, setting)
    return wrong


def _follow_one(name: str, overrides: dict[str, str], issue: Issue,
                setting: dict[str, str]) -> list[str]:
    applied, category = {**overrides, **setting}, issue.category
    for _step in range(3):
        _after, again = load(name, applied)
        same = [i for i in again if i.field == issue.field]
        if any(i.category == category for i in same):
            return [f"{name} {overrides}: following {issue.field}'s fix {setting} leaves "
                    f"{[i.problem for i in same]}"]
        if not same:
            return []
        options = [named_settings(o) for o in same[0].fix.split("; or ")]
        if not (step := next((o for o in options if o), {})):
            return [f"{name} {overrides}: following {issue.field}'s fix {setting} ends at a "
                    f"refusal with nothing to follow: {same[0].fix}"]
        applied, category = {**applied, **step}, same[0].category
    return [f"{name} {overrides}: {issue.field}'s fixes, followed, go round: {applied}"]


def test_the_reader_takes_what_a_user_would_copy() -> None:
    fix = ("set gke.machine_type=ct6e-standard-4t, gke.topology=8x8, "
           "train.args.ici_expert_parallelism=2 (the smallest v6e slice); or a smaller "
           "model.maxtext_name; pass --set gke.project=VALUE; raise gke.max_usd_per_run to "
           "at least 201.60")
    assert named_settings(fix) == {"gke.machine_type": "ct6e-standard-4t",
                                   "gke.topology": "8x8",
                                   "train.args.ici_expert_parallelism": "2",
                                   "gke.max_usd_per_run": "201.60"}


# Each refused by a different rule: the slice (fit), the split of the slice (mesh, rollout
# sizes, rollout fit), a fraction out of range.
REFUSED = [
    ("qwen3-30b-a3b-v6e-32", {"gke.topology": "4x4"}),
    ("qwen3-30b-a3b-v6e-32", {"train.args.sampler_devices_fraction": "0.0625",
                              "train.args.trainer_devices_fraction": "0.9375"}),
    ("qwen3-30b-a3b-v6e-32", {"train.args.sampler_devices_fraction": "0.125",
                              "train.args.trainer_devices_fraction": "0.875"}),
    ("qwen3-30b-a3b-v6e-32", {"train.args.rollout_tensor_parallelism": "3"}),
    ("llama3.1-8b-v6e-16", {"train.args.rollout_tensor_parallelism": "1",
                            "train.args.rollout_data_parallelism": "-1",
                            "train.args.hbm_utilization_vllm": "0.3"}),
    ("llama3.1-8b-v6e-16", {"train.args.sampler_devices_fraction": "1.5"}),
    ("gemma3-12b-v6e-16", {"train.args.ici_tensor_parallelism": "3"}),
    ("smoke-qwen3-0.6b-v6e-8", {"train.args.rollout_data_parallelism": "8"}),
]


@pytest.mark.parametrize(("name", "overrides"), REFUSED)
def test_following_a_refusals_fix_clears_it(name: str, overrides: dict[str, str]) -> None:
    _profile, issues = load(name, overrides)
    assert issues, "the perturbation is refused"
    assert any(named_settings(i.fix) for i in issues), [i.fix for i in issues]
    assert follow(name, overrides) == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(GKE),
       sampler=st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]),
       topology=st.sampled_from(["2x2", "2x4", "4x4", "4x8", "8x8"]),
       tensor=st.sampled_from([1, 2, 3, 4, 8]))
def test_every_mechanical_fix_clears_its_refusal(name: str, sampler: int, topology: str,
                                                 tensor: int) -> None:
    """Slices, splits and rollout sizes at and around what each profile holds: whatever is
    refused, the settings its fix names clear it."""
    overrides = {"gke.topology": topology,
                 "train.args.sampler_devices_fraction": f"{sampler / 16:g}",
                 "train.args.trainer_devices_fraction": f"{1 - sampler / 16:g}",
                 "train.args.rollout_tensor_parallelism": str(tensor)}
    assert follow(name, overrides) == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(GKE),
       slices=st.sampled_from(["1", "2", "3"]),
       utilization=st.sampled_from(["0.2", "0.3", "0.55", "0.72", "0.9"]),
       pathways=st.sampled_from(["true", "false"]),
       ici_tensor=st.sampled_from(["1", "2", "3", "4", "8"]),
       expert=st.sampled_from(["1", "2", "4", "8"]),
       cap=st.sampled_from(["", "10", "200.5", "1e6"]))
def test_every_mechanical_fix_clears_its_refusal_across_the_mesh(
        name: str, slices: str, utilization: str, pathways: str, ici_tensor: str,
        expert: str, cap: str) -> None:
    """Slice counts, vLLM's share, shared or split chips, mesh and rollout axes and a spend
    cap at and around what each profile holds: each refusal's named settings clear it."""
    overrides = {"gke.num_slices": slices, "train.args.hbm_utilization_vllm": utilization,
                 "train.args.use_pathways": pathways,
                 "train.args.ici_tensor_parallelism": ici_tensor,
                 "train.args.rollout_expert_parallelism": expert,
                 "gke.max_usd_per_run": cap}
    assert follow(name, overrides) == []


# One field at, just past and well past each limit a rule holds (the fit and mesh rules'
# are above): ranges pydantic holds, batch and length rules, slices, zones, capacity.
AT_LIMITS = {
    "gke.num_slices": ["0", "1", "-1"],
    "gke.preemption_budget": ["-1", "0"],
    "gke.spend_margin": ["-1", "-0.01", "0"],
    "eval.batches": ["0", "-3", "1"],
    "gke.topology": ["3x3", "2x3", "4x6", "16x32"],
    "gke.zone": ["europe-west4-a", "us-east5-b", "us-east5"],
    "train.args.train_micro_batch_size": ["3", "5", "16", "0", "-2"],
    "train.args.rollout_micro_batch_size": ["0", "-2"],
    "train.args.max_target_length": ["100", "256", "257"],
    "train.args.trainer_devices_fraction": ["0", "1.5", "0.0001"],
    "train.args.rollout_data_parallelism": ["3", "5", "32"],
    "gke.max_run_hours": ["1", "200"],
    "gke.estimated_hours.train": ["0.37", "3.333", "1000"],
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(GKE), data=st.data())
def test_a_fix_at_each_limit_clears_its_refusal(name: str, data: st.DataObject) -> None:
    fields = data.draw(st.lists(st.sampled_from(sorted(AT_LIMITS)), min_size=1, max_size=2,
                                unique=True))
    overrides = {f: data.draw(st.sampled_from(AT_LIMITS[f])) for f in fields}
    assert follow(name, overrides) == []


@pytest.mark.parametrize(("overrides", "field", "setting"), [
    ({"gke.num_slices": "0"}, "gke.num_slices", {"gke.num_slices": "1"}),
    ({"gke.topology": "3x3"}, "gke.topology", {"gke.topology": "4x4"}),
    ({"train.args.train_micro_batch_size": "3"}, "train.args.train_micro_batch_size",
     {"train.args.train_micro_batch_size": "2"}),
    ({"train.args.max_target_length": "100"}, "train.args.max_target_length",
     {"train.args.max_target_length": "1024"}),
    ({"gke.zone": "europe-west4-a"}, "gke.zone", {"gke.zone": "us-east5-b"}),
])
def test_a_refusal_names_the_nearest_value_that_clears_it(
        overrides: dict[str, str], field: str, setting: dict[str, str]) -> None:
    """A range, a topology the machine does not support, a micro-batch that does not divide,
    a length with no room to generate, a zone of another region: each fix names a value."""
    _profile, issues = load("llama3.1-8b-v6e-16", overrides)
    (issue,) = [i for i in issues if i.field == field]
    assert named_settings(issue.fix) == setting, issue.fix


def _warning_settings(warning: str, marker: str) -> dict[str, str]:
    line = next(w for w in warning.splitlines() if marker in w)
    return named_settings(line.rsplit(" or ", 1)[-1])


def test_the_tight_warning_names_the_slice_that_is_not_tight() -> None:
    """The warning's slice, applied, loads and leaves no tight slice warning."""
    name, overrides = "llama3.1-8b-v6e-16", {"train.args.max_target_length": "4096"}
    profile, issues = load(name, overrides)
    assert profile is not None and not issues
    warning = fit_warning(profile) or ""
    setting = _warning_settings(warning, "conservative total")
    assert setting.get("gke.topology") == "4x8", warning
    after, issues = load(name, {**overrides, **setting})
    # twice the chips cost more than the profile's cap: that refusal names its own figure
    assert [i.category for i in issues] == ["config/spend-cap"]
    setting |= named_settings(issues[0].fix)
    after, issues = load(name, {**overrides, **setting})
    assert after is not None, issues
    assert "conservative total" not in (fit_warning(after) or "")


def test_a_rollout_no_replica_holds_on_shared_chips_is_named_a_slice() -> None:
    """Sharing its 8 chips with the trainer (no Pathways), Gemma 3 12B leaves vLLM's 0.3
    share no room for any replica: the fix names the smallest slice that holds it, with the
    rollout split there, and the profile loads with it applied."""
    name = "gemma3-12b-v6e-16"
    overrides = {"gke.topology": "2x4", "train.args.hbm_utilization_vllm": "0.3",
                 "train.args.use_pathways": "false"}
    _profile, issues = load(name, overrides)
    fixes = [i.fix for i in issues if i.category == "config/rollout-does-not-fit"]
    assert fixes and all(f.startswith("give the rollout more devices: set ") for f in fixes)
    setting = named_settings(fixes[0])
    assert setting["gke.topology"] == "4x4", fixes[0]
    after, again = load(name, {**overrides, **setting})
    assert after is not None, [(i.field, i.problem) for i in again]


def test_a_slice_too_small_for_one_role_is_named_the_split_that_fits() -> None:
    """Two of the 32 chips cannot hold the 30B rollout's weights: besides the larger slice,
    the refusal names the split of this slice nearest the profile's, and both load."""
    name = "qwen3-30b-a3b-v6e-32"
    overrides = {"train.args.sampler_devices_fraction": "0.0625",
                 "train.args.trainer_devices_fraction": "0.9375"}
    _profile, issues = load(name, overrides)
    fix = next(i.fix for i in issues if i.category == "config/does-not-fit")
    options = [named_settings(o) for o in fix.split("; or ") if named_settings(o)]
    assert [o.get("train.args.sampler_devices_fraction") for o in options] == [None, "0.125"]
    for option in options:
        after, again = load(name, {**overrides, **option})
        assert after is not None, (option, [(i.field, i.problem) for i in again])


@pytest.mark.parametrize("name", GKE)
def test_placeholders_are_the_users_own_values(name: str) -> None:
    """What a shipped GKE profile leaves empty (the user's project, region, bucket) is refused
    with a fix naming the field and a placeholder: no value could be computed for it. Filled,
    the profile loads."""
    own = required_overrides(name)
    _profile, issues = load(name, dict.fromkeys(own, ""))
    assert {i.field for i in issues} == set(own)
    for issue in issues:
        assert f"--set {issue.field}=VALUE" in issue.fix, issue.fix
    profile, issues = load(name, {})
    assert profile is not None, issues
