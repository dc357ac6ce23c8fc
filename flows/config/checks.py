"""Checks that span fields: parallelism against devices, GRPO settings, reserved arguments.

Pure functions of a parsed profile returning every issue found, so one `tpurl validate`
shows all problems at once instead of one per try.
"""

from __future__ import annotations

from collections.abc import Iterable

from flows.config.errors import ConfigIssue
from flows.config.gcp_names import looks_like_hf_token
from flows.config.profile import RESERVED_ARGS, Profile, Scalar, parallelism_product

TRAIN_ICI_KEYS = ("ici_data_parallelism", "ici_fsdp_parallelism", "ici_tensor_parallelism",
                  "ici_expert_parallelism", "ici_sequence_parallelism",
                  "ici_context_parallelism", "ici_pipeline_parallelism")
TRAIN_DCN_KEYS = ("dcn_data_parallelism", "dcn_fsdp_parallelism", "dcn_tensor_parallelism",
                  "dcn_expert_parallelism", "dcn_pipeline_parallelism")
ROLLOUT_KEYS = ("rollout_data_parallelism", "rollout_tensor_parallelism",
                "rollout_expert_parallelism")


def profile_issues(profile: Profile, known_patches: Iterable[str]) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    for step in ("model", "convert", "train", "export"):
        issues += _reserved_and_secret_args(step, getattr(profile, step).args)
    issues += _grpo_issues(profile)
    issues += _parallelism_issues(profile)
    issues += _patch_issues(profile, set(known_patches))
    return issues


def _reserved_and_secret_args(step: str, args: dict[str, Scalar]) -> list[ConfigIssue]:
    issues = []
    for key, value in args.items():
        path = f"{step}.args.{key}"
        if key in RESERVED_ARGS[step]:
            fix = ("remove it: the token reaches the job from model.hf_token as $HF_TOKEN"
                   if key == "hf_access_token"
                   else "remove it: the pipeline sets it from the stage's inputs and outputs")
            issues.append(ConfigIssue(path, "is set by the pipeline, not by the profile", fix))
        elif isinstance(value, str) and looks_like_hf_token(value):
            issues.append(ConfigIssue(path, "holds what looks like a Hugging Face token",
                                      "remove it, revoke the token, and use model.hf_token",
                                      "config/secret-literal"))
    return issues


def _key(args: dict[str, Scalar], key: str) -> str:
    """MaxText accepts GRPO keys both flat and under ``rl.`` (e.g. rl.num_generations)."""
    return f"rl.{key}" if f"rl.{key}" in args and key not in args else key


def _number(args: dict[str, Scalar], key: str) -> float | None:
    key = _key(args, key)
    if key not in args:
        return None
    value = args[key]
    if isinstance(value, bool):
        raise ValueError(key)
    return float(value)


def _grpo_issues(profile: Profile) -> list[ConfigIssue]:
    args = profile.train.args
    issues = []
    checks: list[tuple[str, str, str, object]] = [
        ("num_generations", "must be at least 2: GRPO compares completions of one prompt",
         "set train.args.num_generations to 2 or more", lambda v: v >= 2 and v == int(v)),
        ("learning_rate", "must be a positive number", "e.g. learning_rate: '3e-6'",
         lambda v: v > 0),
        ("batch_size", "must be a positive whole number", "e.g. batch_size: 1",
         lambda v: v >= 1 and v == int(v)),
        ("num_batches", "must be a positive whole number (training steps)",
         "e.g. num_batches: 2", lambda v: v >= 1 and v == int(v)),
        ("checkpoint_period", "must be a positive whole number", "e.g. checkpoint_period: 1",
         lambda v: v >= 1 and v == int(v)),
    ]
    for key, problem, fix, ok in checks:
        try:
            value = _number(args, key)
        except ValueError:
            name = _key(args, key)
            issues.append(ConfigIssue(f"train.args.{name}", f"{args[name]!r} is not a number",
                                      fix))
            continue
        if value is not None and not ok(value):  # type: ignore[operator]
            name = _key(args, key)
            issues.append(ConfigIssue(f"train.args.{name}", f"{args[name]!r} {problem}", fix))
    try:
        prefill = _number(args, "max_prefill_predict_length")
        target = _number(args, "max_target_length")
    except ValueError:
        return issues
    if prefill is not None and target is not None and target <= prefill:
        issues.append(ConfigIssue(
            "train.args.max_target_length",
            f"{target:g} leaves no room to generate after a prompt of {prefill:g} tokens",
            "make max_target_length larger than max_prefill_predict_length"))
    return issues


def _ints(args: dict[str, Scalar], keys: tuple[str, ...],
          step: str) -> tuple[dict[str, int], list[ConfigIssue]]:
    values, issues = {}, []
    for key in keys:
        if key not in args:
            continue
        raw = args[key]
        try:
            value = int(str(raw))
        except ValueError:
            issues.append(ConfigIssue(f"{step}.args.{key}", f"{raw!r} is not a whole number",
                                      "use a positive integer, or -1 to fill in the rest"))
            continue
        if value == 0 or value < -1:
            issues.append(ConfigIssue(f"{step}.args.{key}", f"{value} is not allowed",
                                      "use a positive integer, or -1 to fill in the rest"))
            continue
        values[key] = value
    return values, issues


def _parallelism_issues(profile: Profile) -> list[ConfigIssue]:
    args = profile.train.args
    per_slice, total, slices = profile.devices_per_slice, profile.total_devices, profile.num_slices
    ici, issues = _ints(args, TRAIN_ICI_KEYS, "train")
    dcn, dcn_issues = _ints(args, TRAIN_DCN_KEYS, "train")
    rollout, rollout_issues = _ints(args, ROLLOUT_KEYS, "train")
    issues += dcn_issues + rollout_issues
    issues += _mesh_fits("train.args.ici_*_parallelism", list(ici.values()), per_slice,
                         f"{per_slice} devices per slice")
    issues += _mesh_fits("train.args.dcn_*_parallelism", list(dcn.values()), slices,
                         f"{slices} slice(s)")
    fixed, wildcards = parallelism_product(list(rollout.values()))
    if rollout and (wildcards > 1 or total % fixed != 0):
        issues.append(ConfigIssue(
            "train.args.rollout_*_parallelism",
            f"rollout data×tensor×expert = {fixed} does not divide the {total} devices",
            f"choose values whose product divides {total}"))
    return issues


def _mesh_fits(field: str, values: list[int], devices: int, what: str) -> list[ConfigIssue]:
    if not values:
        return []
    fixed, wildcards = parallelism_product(values)
    if wildcards > 1:
        return [ConfigIssue(field, "more than one axis is -1", "leave at most one axis at -1")]
    fits = devices % fixed == 0 if wildcards else fixed == devices
    if fits:
        return []
    return [ConfigIssue(field, f"the product of the axes is {fixed}, but the mesh has {what}",
                        f"make the product equal {devices} (or set one axis to -1)")]


def _patch_issues(profile: Profile, known: set[str]) -> list[ConfigIssue]:
    return [ConfigIssue(f"image.disabled_patches.{patch_id}", "names no declared patch",
                        f"use one of: {', '.join(sorted(known))}")
            for patch_id in profile.image.disabled_patches if patch_id not in known]
