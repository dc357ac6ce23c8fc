"""What the fit estimate reads from a profile: the model's numbers, train_rl's settings over
rl.yml's defaults, the slice and the rollout's sizes (flows/config/fit.py judges them).

Apart from the rules that use them (flows/config/fit_rules.py) so that the slice a refusal
names and the changes that come with it (flows/config/slice_move.py) read the profile the
same way the check does.
"""

from __future__ import annotations

from flows.config.fit import DTYPE_BYTES, HBM_BYTES_PER_CHIP, RunShape, SliceShape, estimated, roles
from flows.config.maxtext_models import Architecture, architecture, convertible_models, rl_defaults
from flows.config.profile import Profile, Scalar
from flows.config.rollout import DEFAULT_PARALLELISM
from flows.config.tpu import TPU_MACHINES, TpuMachine, chips_in_topology, topology_is_well_formed


def generation_of(machine: TpuMachine) -> str:
    """The machine's generation (``v6e``): the key of the HBM table."""
    return machine.generation


def _arg(args: dict[str, Scalar], defaults: dict[str, Scalar], *keys: str) -> Scalar:
    for key in keys:
        if key in args:
            return args[key]
    return defaults[keys[-1]]


def _positive(value: Scalar, fallback: Scalar) -> int:
    number = int(float(str(value)))
    return number if number > 0 else int(float(str(fallback)))


def run_shape(train_args: dict[str, Scalar]) -> RunShape:
    """train_rl's settings that move the footprint: ``train_args`` over rl.yml's defaults
    (MaxText accepts the GRPO keys flat and under ``rl.``)."""
    d = rl_defaults()
    batch = _arg(train_args, d, "batch_size")
    weight_dtype = str(_arg(train_args, d, "weight_dtype"))
    return RunShape(
        weight_bytes=DTYPE_BYTES.get(weight_dtype, 4),
        batch_size=_positive(_arg(train_args, d, "train_micro_batch_size"), batch),
        rollout_batch_size=_positive(_arg(train_args, d, "rollout_micro_batch_size"), batch),
        num_generations=int(float(str(_arg(train_args, d, "num_generations",
                                           "rl.num_generations")))),
        max_target_length=int(float(str(_arg(train_args, d, "max_target_length")))),
        kv_cache_buffer=int(float(str(_arg(train_args, d, "kv_cache_buffer")))),
        hbm_utilization_vllm=float(str(_arg(train_args, d, "hbm_utilization_vllm"))),
        trainer_devices_fraction=float(str(_arg(train_args, d, "trainer_devices_fraction"))),
        sampler_devices_fraction=float(str(_arg(train_args, d, "sampler_devices_fraction"))),
        chips_per_vm=int(float(str(_arg(train_args, d, "chips_per_vm")))),
        use_pathways=str(_arg(train_args, d, "use_pathways")).lower() in ("true", "1"),
        num_trainer_slices=int(float(str(_arg(train_args, d, "num_trainer_slices")))),
        num_samplers_slices=int(float(str(_arg(train_args, d, "num_samplers_slices")))),
    )


def judged(profile: Profile) -> tuple[Architecture, RunShape, SliceShape] | None:
    """The model's numbers, the run's settings and the slice, or None when the estimate
    cannot be made: another backend, a model or slice other checks refuse, a model the
    formula does not describe, a vision tower (``use_multimodal``) it leaves out, or a split
    that gives a role no chip."""
    gke = profile.gke
    name = profile.model.maxtext_name
    if (profile.backend != "gke" or gke is None or name not in convertible_models()
            or gke.machine_type not in TPU_MACHINES or not topology_is_well_formed(gke.topology)):
        return None
    generation = generation_of(TPU_MACHINES[gke.machine_type])
    if generation not in HBM_BYTES_PER_CHIP:
        return None
    overrides = {**profile.model.args, **profile.train.args}
    if str(overrides.get("use_multimodal", "false")).lower() in ("true", "1"):
        return None
    try:
        arch = architecture(name, overrides)
        shape = run_shape(profile.train.args)
    except ValueError:
        return None  # a number that is not one: maxtext_rules names it
    if not estimated(name, arch):
        return None
    slice_ = SliceShape(generation, chips_in_topology(gke.topology), gke.num_slices)
    if min(roles(shape, slice_)[:2]) < 1:
        return None  # a role with no chip: maxtext_rules names its fraction
    return arch, shape, slice_


def rollout_sizes(profile: Profile) -> tuple[int, int, int] | None:
    """The profile's rollout (tensor, data, expert) parallelism over rl.yml's defaults; None
    when one is not a number (maxtext_rules names it)."""
    args = {**profile.model.args, **profile.train.args}
    try:
        tensor, data, expert = (int(float(str(args.get(f"rollout_{axis}_parallelism", default))))
                                for axis, default in DEFAULT_PARALLELISM.items())
    except ValueError:
        return None
    return tensor, data, expert
