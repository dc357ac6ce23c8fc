"""Start-up rules of MaxText 0.2.4's RL trainer and tunix 0.1.7, checked at `tpurl validate`.

Each rule below is one that the real program enforces when it starts (after the image is
built, the cluster is up and the checkpoint converted: an hour and real money later). The
comment next to each names the upstream file (paths inside the installed packages
``maxtext`` 0.2.4 and ``tunix`` 0.1.7) so a reader can check it against the source and a
version bump knows what to re-read. The image's tunix (0.1.8 at commit c4ec573d) was re-read:
the same checks, at GrpoConfig.__post_init__ (grpo_learner.py:112) and
RLTrainingConfig.__post_init__ (rl_cluster.py:118; it also checks the new
max_segments_per_packed_row). Only rules that can be cited are enforced here.

The training program sees ``model.args`` then ``train.args`` (flows/core/programs.py), and
MaxText's own defaults for every key neither sets (configs/base.yml, configs/post_train/rl.yml).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypedDict

from flows.common.issues import Issue
from flows.config.limits import limits
from flows.config.profile import Profile, Scalar, parallelism_product

# maxtext/configs/base.yml: ici_*/dcn_* defaults for the axes of the default mesh_axes
# (diloco, data, stage, fsdp, fsdp_transpose, context, context_usp_ulysses,
# context_autoregressive, tensor, tensor_sequence, expert, autoregressive); -1 = fill in.
MESH_AXES = ("diloco", "data", "pipeline", "fsdp", "fsdp_transpose", "context",
             "context_usp_ulysses", "context_autoregressive", "tensor", "tensor_sequence",
             "expert", "autoregressive")
ICI_DEFAULTS = {f"ici_{axis}_parallelism": -1 if axis == "fsdp" else 1 for axis in MESH_AXES}
DCN_DEFAULTS = {f"dcn_{axis}_parallelism": -1 if axis == "data" else 1 for axis in MESH_AXES}
# maxtext/configs/post_train/rl.yml: defaults of the RL cluster keys.
ROLLOUT_DEFAULTS = {"rollout_data_parallelism": -1, "rollout_tensor_parallelism": 1,
                    "rollout_expert_parallelism": 1}


class _RlDefaults(TypedDict):
    trainer_devices_fraction: float
    sampler_devices_fraction: float
    chips_per_vm: int
    use_pathways: bool


RL_DEFAULTS = _RlDefaults(trainer_devices_fraction=0.5, sampler_devices_fraction=0.5,
                          chips_per_vm=4, use_pathways=True)
# Keys that replace the default mesh or device split (rl.yml: num_trainer_slices and
# num_samplers_slices default -1, the single-config split): the mesh rules cannot model them.
CUSTOM_MESH_KEYS = ("mesh_axes", "ici_parallelism", "dcn_parallelism", "custom_mesh",
                    "num_trainer_slices", "num_samplers_slices")
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


class _Args:
    """The training program's arguments as MaxText sees them, each with the field that set it."""

    def __init__(self, profile: Profile) -> None:
        self.values: dict[str, Scalar] = {**profile.model.args, **profile.train.args}
        self.train = profile.train.args

    def field(self, key: str) -> str:
        step = "train" if key in self.train or key not in self.values else "model"
        return f"{step}.args.{key}"

    def key(self, key: str) -> str:
        """MaxText accepts GRPO keys both flat and under ``rl.`` (e.g. rl.num_generations)."""
        return f"rl.{key}" if f"rl.{key}" in self.values and key not in self.values else key

    def number(self, key: str, default: float | None = None) -> float | None:
        """The value as a number; ValueError(key) when it is set but is not one."""
        key = self.key(key)
        if key not in self.values:
            return default
        value = self.values[key]
        if isinstance(value, bool):
            raise ValueError(key)
        return float(value)

    def whole(self, key: str, default: int) -> int:
        value = self.number(key, default)
        if value is None or value != int(value):
            raise ValueError(key)
        return int(value)

    def flag(self, key: str, default: bool) -> bool | None:
        value = self.values.get(key, default)
        text = str(value).lower()
        return True if text in _TRUE else False if text in _FALSE else None


def _whole(value: float) -> bool:
    return value == int(value)


# (key, problem, fix, holds): the GRPO knobs' rules; the problem is also the profile page's
# limit of train.args (MAXTEXT_LIMITS).
GRPO_CHECKS: list[tuple[str, str, str, Callable[[float], bool]]] = [
    # tunix/rl/grpo/grpo_learner.py GrpoConfig.__post_init__: num_generations must be > 1.
    ("num_generations", "must be at least 2: GRPO compares completions of one prompt",
     "set train.args.num_generations to 2 or more", lambda v: v >= 2 and _whole(v)),
    # Project rules (not upstream start-up checks): a step count and rate that mean nothing.
    ("learning_rate", "must be a positive number", "e.g. learning_rate: '3e-6'",
     lambda v: v > 0),
    # tunix/rl/rl_cluster.py RLTrainingConfig.__post_init__: mini_batch_size (MaxText's
    # batch_size, maxtext/trainers/post_train/rl/train_rl.py) must be a positive integer.
    ("batch_size", "must be a positive whole number", "e.g. batch_size: 1",
     lambda v: v >= 1 and _whole(v)),
    # maxtext/configs/types.py RLDataset: num_batches ge=1.
    ("num_batches", "must be a positive whole number (training steps)",
     "e.g. num_batches: 2", lambda v: v >= 1 and _whole(v)),
    ("checkpoint_period", "must be a positive whole number", "e.g. checkpoint_period: 1",
     lambda v: v >= 1 and _whole(v)),
]
# rl.yml's max_target_length 1024 less its max_prefill_predict_length 256: what a rollout
# generates after the prompt when the profile says nothing
GENERATED_TOKENS = 768
MICRO_BATCH_KEYS = ("train_micro_batch_size", "rollout_micro_batch_size")
FRACTION_KEYS = ("trainer_devices_fraction", "sampler_devices_fraction")
# What these rules refuse, as the profile page shows it under train.args (the training
# program reads model.args and train.args together): flows/config/limits.py.
MAXTEXT_LIMITS = {"train.args": [
    *(f"{key}: {problem.removeprefix('must be ').partition(':')[0]}"
      for key, problem, _fix, _ok in GRPO_CHECKS),
    "max_target_length above max_prefill_predict_length",
    f"{' and '.join(MICRO_BATCH_KEYS)} positive or -1; batch_size a multiple of "
    "train_micro_batch_size",
    f"{' and '.join(FRACTION_KEYS)} in (0, 1]",
    "ici_*/dcn_*/rollout_*_parallelism whole numbers ≥ 1 or -1 (at most one -1 per mesh); "
    "the ICI axes multiply to the devices per slice, the DCN axes to the slices, the "
    "rollout axes to (or into) the sampler's devices"]}


@limits(MAXTEXT_LIMITS)
def maxtext_issues(profile: Profile) -> list[Issue]:
    args = _Args(profile)
    return [*_grpo_issues(args), *_batch_issues(args), *_fraction_issues(args),
            *_mesh_issues(profile, args)]


def _grpo_issues(args: _Args) -> list[Issue]:
    issues = []
    for key, problem, fix, ok in GRPO_CHECKS:
        name = args.key(key)
        try:
            value = args.number(key)
        except ValueError:
            issues.append(Issue(args.field(name), f"{args.values[name]!r} is not a number", fix))
            continue
        if value is not None and not ok(value):
            issues.append(Issue(args.field(name), f"{args.values[name]!r} {problem}", fix))
    # maxtext/trainers/post_train/rl/train_rl.py: the rollout generates
    # max_tokens_to_generate = max_target_length - max_prefill_predict_length tokens.
    try:
        prefill = args.number("max_prefill_predict_length")
        target = args.number("max_target_length")
    except ValueError:
        return issues
    if prefill is not None and target is not None and target <= prefill:
        issues.append(Issue(
            args.field("max_target_length"),
            f"{target:g} leaves no room to generate after a prompt of {prefill:g} tokens",
            f"set {args.field('max_target_length')}={int(prefill) + GENERATED_TOKENS} "
            f"(the prompt's {prefill:g} tokens and rl.yml's {GENERATED_TOKENS} generated), or "
            "a lower max_prefill_predict_length"))
    return issues


def _batch_issues(args: _Args) -> list[Issue]:
    """tunix/rl/rl_cluster.py RLTrainingConfig.__post_init__ (micro-batch sizes positive, the
    mini-batch a multiple of train_micro_batch_size), fed by
    maxtext/trainers/post_train/rl/train_rl.py (mini_batch_size=batch_size, -1 = unset)."""
    issues = []
    try:
        batch = args.whole("batch_size", 1)
    except ValueError:
        return []  # reported by _grpo_issues
    for key in MICRO_BATCH_KEYS:
        try:
            micro = args.whole(key, -1)
        except ValueError:
            issues.append(Issue(args.field(key), f"{args.values[key]!r} is not a whole number",
                                f"set {args.field(key)}=-1 (the batch size), or another "
                                "positive integer"))
            continue
        if micro == -1:
            continue
        if micro < 1:
            issues.append(Issue(args.field(key), f"{micro} is not a positive integer",
                                f"set {args.field(key)}=-1 (the batch size), or another "
                                "positive integer"))
        elif key == "train_micro_batch_size" and batch >= 1 and batch % micro:
            issues.append(Issue(args.field(key),
                                f"batch_size {batch} is not a multiple of it ({micro})",
                                f"set {args.field(key)}="
                                f"{max(d for d in range(1, micro + 1) if batch % d == 0)} (the "
                                f"largest divisor of batch_size {batch} below it), or make "
                                "batch_size a multiple of it"))
    return issues


def _fraction_issues(args: _Args) -> list[Issue]:
    """maxtext/configs/types.py RLCluster: trainer/sampler_devices_fraction gt=0.0, le=1.0."""
    issues = []
    for key in FRACTION_KEYS:
        try:
            value = args.number(key)
        except ValueError:
            value = -1.0
        if value is not None and not 0.0 < value <= 1.0:
            issues.append(Issue(args.field(key), f"{args.values[key]!r} is not in (0, 1]",
                                f"set {args.field(key)}=0.5 (rl.yml's default), or another "
                                "fraction of the devices in (0, 1]"))
    return issues


def device_split(profile: Profile, args: _Args) -> tuple[int, int] | None:
    """(trainer devices, sampler devices) as MaxText splits them, None when not modelled.

    maxtext/utils/model_creation_utils.py setup_configs_and_devices: with num_trainer_slices
    and num_samplers_slices -1, Pathways and at least two VMs (devices // chips_per_vm), the
    first int(n × trainer_devices_fraction) devices train and the last
    int(n × sampler_devices_fraction) sample; otherwise both use every device.
    """
    if any(key in args.values for key in CUSTOM_MESH_KEYS):
        return None
    total = profile.total_devices
    try:
        chips_per_vm = args.whole("chips_per_vm", RL_DEFAULTS["chips_per_vm"])
        trainer = args.number("trainer_devices_fraction", RL_DEFAULTS["trainer_devices_fraction"])
        sampler = args.number("sampler_devices_fraction", RL_DEFAULTS["sampler_devices_fraction"])
    except ValueError:
        return None
    pathways = args.flag("use_pathways", RL_DEFAULTS["use_pathways"])
    if pathways is None or chips_per_vm < 1 or trainer is None or sampler is None:
        return None
    if pathways and total // chips_per_vm >= 2:
        return int(total * trainer), int(total * sampler)
    return total, total


def _axes(args: _Args, defaults: dict[str, int]) -> tuple[dict[str, int], list[Issue]]:
    values, issues = {}, []
    for key, default in defaults.items():
        raw = args.values.get(key, default)
        try:
            value = int(str(raw))
        except ValueError:
            issues.append(Issue(args.field(key), f"{raw!r} is not a whole number",
                                "use a positive integer, or -1 to fill in the rest"))
            continue
        if value == 0 or value < -1:
            issues.append(Issue(args.field(key), f"{value} is not allowed",
                                "use a positive integer, or -1 to fill in the rest"))
            continue
        values[key] = value
    return values, issues


def _mesh_issues(profile: Profile, args: _Args) -> list[Issue]:
    ici, issues = _axes(args, ICI_DEFAULTS)
    dcn, dcn_issues = _axes(args, DCN_DEFAULTS)
    rollout, rollout_issues = _axes(args, ROLLOUT_DEFAULTS)
    issues += dcn_issues + rollout_issues
    split = device_split(profile, args)
    if split is None or issues:
        return issues
    trainer, sampler = split
    slices = profile.num_slices
    # maxtext/utils/maxtext_utils.py create_device_mesh → maxtext/utils/max_utils.py
    # fill_unspecified_mesh_axes: the ICI axes multiply to the devices per slice of each mesh
    # (trainer and sampler both use the training config's axes), at most one -1.
    meshes = [("trainer", trainer)] + ([("sampler", sampler)] if sampler != trainer else [])
    empty = [(role, devices) for role, devices in meshes if devices < slices]
    if empty:  # a role with no device a slice has no mesh to fit: its fraction is the fix
        return issues + [_no_device(args, role, devices, profile.total_devices, slices)
                         for role, devices in empty if _in_range(args, role)]
    per_slices = tuple(devices // slices for _role, devices in meshes)
    for role, devices in meshes:
        per_slice = devices // slices
        issues += _mesh_fits("train.args.ici_*_parallelism", ici, per_slice,
                             f"{per_slice} {role} devices per slice ({profile.total_devices} "
                             f"× {role}_devices_fraction / {slices} slice(s))", per_slices,
                             "ici_fsdp_parallelism")
    # The same function fills the DCN axes against the slice count (when there are several).
    if slices > 1:
        issues += _mesh_fits("train.args.dcn_*_parallelism", dcn, slices,
                             f"{slices} slice(s)", (slices,), "dcn_data_parallelism")
    # maxtext/trainers/post_train/rl/train_rl.py get_rollout_kwargs_for_parallelism: at most
    # one of data/tensor/expert is -1; the product equals (or, with a -1, divides) the
    # sampler's devices.
    fixed, wildcards = parallelism_product(list(rollout.values()))
    if wildcards > 1:
        issues.append(Issue("train.args.rollout_*_parallelism", "more than one of data, tensor "
                            "and expert is -1", _rollout_fit(rollout, sampler)))
    elif sampler % fixed != 0 or (not wildcards and fixed != sampler):
        verb = "does not divide" if wildcards else "is not"
        issues.append(Issue(
            "train.args.rollout_*_parallelism",
            f"rollout data×tensor×expert = {fixed} {verb} the {sampler} sampler devices "
            f"({profile.total_devices} × sampler_devices_fraction)",
            _rollout_fit(rollout, sampler)))
    return issues


def _in_range(args: _Args, role: str) -> bool:
    """Whether ``role``'s fraction is in (0, 1]: one that is not is named by
    ``_fraction_issues`` already."""
    try:
        value = args.number(f"{role}_devices_fraction")
    except ValueError:
        return False
    return value is None or 0.0 < value <= 1.0


def _no_device(args: _Args, role: str, devices: int, total: int, slices: int) -> Issue:
    """MaxText gives ``role`` int(total × fraction) devices: fewer than one a slice leaves it
    no mesh. The fix gives it one device a slice and the other role the rest."""
    other = "sampler" if role == "trainer" else "trainer"
    least = next(f"{n / total:.6g}" for n in range(slices, total + 1)
                 if int(total * float(f"{n / total:.6g}")) >= slices)
    rest = f"{1 - float(least):.6g}"
    return Issue(args.field(f"{role}_devices_fraction"),
                 f"gives the {role} {devices} of the {total} devices (int({total} × "
                 f"{role}_devices_fraction)), fewer than one for each of the {slices} slice(s)",
                 f"set {args.field(f'{role}_devices_fraction')}={least} and "
                 f"{args.field(f'{other}_devices_fraction')}={rest} (one device a slice for the "
                 f"{role}, the rest for the {other})")


def fitted_axes(axes: dict[str, int], devices: tuple[int, ...],
                fill: str) -> dict[str, int] | None:
    """The mesh axes that changed so that they multiply to each of ``devices`` (for the ICI
    axes: the trainer's and the sampler's devices per slice): empty when the profile's
    already do, None when more than one axis is -1 (refused whatever the slice). Each axis
    above 1 becomes its greatest common divisor with what the devices leave, in MaxText's
    order, and ``fill`` (base.yml's -1 axis) fills in the rest when no axis is -1."""
    wild = [k for k, v in axes.items() if v == -1]
    if len(wild) > 1:
        return None
    fixed = math.prod(v for v in axes.values() if v != -1)
    if wild and all(d % fixed == 0 and d >= fixed for d in devices):
        return {}
    if not wild and all(d == fixed for d in devices):
        return {}
    fitted = dict(axes)
    if not wild:
        fitted[fill] = -1
    room = math.gcd(*devices)
    for key, value in fitted.items():
        if value > 1:
            fitted[key] = math.gcd(value, room)
            room //= fitted[key]
    return {k: v for k, v in fitted.items() if v != axes[k]}


def _mesh_fits(field: str, axes: dict[str, int], devices: int, what: str,
               all_devices: tuple[int, ...], fill: str) -> list[Issue]:
    """``all_devices``: every mesh these axes must make (the trainer's and the sampler's),
    so the values the fix names suit both."""
    fixed, wildcards = parallelism_product(list(axes.values()))
    if wildcards > 1:
        return [Issue(field, "more than one axis is -1 (ici_fsdp_parallelism and "
                      "dcn_data_parallelism default to -1)", "leave at most one axis at -1")]
    fits = devices % fixed == 0 and devices >= fixed if wildcards else fixed == devices
    if fits:
        return []
    fitted = fitted_axes(axes, all_devices, fill)
    if not fitted:
        return [Issue(field, f"the product of the axes is {fixed}, but the mesh has {what}",
                      f"make the product equal {devices} (or set one axis to -1)")]
    return [Issue(field, f"the product of the axes is {fixed}, but the mesh has {what}",
                  "set " + ", ".join(f"train.args.{k}={v}" for k, v in fitted.items())
                  + f" (the axes that make {' and '.join(map(str, sorted(set(all_devices))))}"
                  f" device(s), {fill} filling in the rest)")]


def _rollout_fit(rollout: dict[str, int], sampler: int) -> str:
    """The rollout's sizes that make the sampler's devices: its tensor and expert
    parallelism cut to what divides them, data parallelism filling in the rest (-1)."""
    tensor = math.gcd(max(rollout["rollout_tensor_parallelism"], 1), sampler)
    expert = math.gcd(max(rollout["rollout_expert_parallelism"], 1), sampler // tensor)
    return (f"set train.args.rollout_tensor_parallelism={tensor}, "
            f"train.args.rollout_expert_parallelism={expert}, "
            "train.args.rollout_data_parallelism=-1 (data parallelism fills in the rest of "
            f"the {sampler} sampler devices)")
