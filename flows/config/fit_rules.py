"""The fit check on a GKE profile: refused when training cannot fit the slice, warned when tight.

The estimate (flows/config/fit.py) reads the model's numbers from the pinned MaxText's data
(flows/config/maxtext_models.json) with the profile's ``model.args`` and ``train.args`` over
them, train_rl's settings from ``train.args`` over rl.yml's defaults, and the slice from
``gke.machine_type``, ``gke.topology`` and ``gke.num_slices``. A refusal names each part, the
total, what the slice holds, and the smallest slice of the same generation that would hold
it, so the reader changes one field instead of paying for a slice that runs out of memory
after the image build, the cluster and the conversion.
"""

from __future__ import annotations

from flows.common.issues import Issue
from flows.config.fit import (
    DTYPE_BYTES,
    HBM_BYTES_PER_CHIP,
    Estimate,
    RunShape,
    SliceShape,
    describe,
    estimate,
    estimated,
    gib,
)
from flows.config.limits import limits
from flows.config.maxtext_models import (
    Architecture,
    architecture,
    convertible_models,
    rl_defaults,
)
from flows.config.profile import Profile, Scalar
from flows.config.rollout import DEFAULT_PARALLELISM, RolloutCheck
from flows.config.rollout import check as check_rollout
from flows.config.rollout import describe as describe_rollout
from flows.config.tpu import (
    TPU_MACHINES,
    TpuMachine,
    chips_in_topology,
    supported_topologies,
    topology_is_well_formed,
)


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


def smallest_fitting(profile: Profile, shape: RunShape) -> tuple[str, str] | None:
    """(machine type, topology) of the fewest chips of the profile's generation on which the
    estimate fits, with the profile's ``gke.num_slices``; None when no listed slice does."""
    gke = profile.gke
    assert gke is not None
    generation = generation_of(TPU_MACHINES[gke.machine_type])
    arch = architecture(profile.model.maxtext_name, {**profile.model.args, **profile.train.args})
    candidates = sorted((chips_in_topology(t), m.machine_type, t)
                         for m in TPU_MACHINES.values() if generation_of(m) == generation
                         for t in supported_topologies(m))
    for chips, machine_type, topology in candidates:
        slice_ = SliceShape(generation, chips, gke.num_slices)
        if estimate(arch, shape, slice_).verdict != "no-fit":
            return machine_type, topology
    return None


def _judged(profile: Profile) -> tuple[Architecture, RunShape, SliceShape] | None:
    """The model's numbers, the run's settings and the slice, or None when the estimate
    cannot be made: another backend, a model or slice other checks refuse, a model the
    formula does not describe, or a vision tower (``use_multimodal``) it leaves out."""
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
    return arch, shape, SliceShape(generation, chips_in_topology(gke.topology), gke.num_slices)


def profile_estimate(profile: Profile) -> Estimate | None:
    """The estimate for a GKE profile, or None when it cannot be made (``_judged``)."""
    judged = _judged(profile)
    return None if judged is None else estimate(*judged)


@limits({"gke.topology": "large enough for the model's GRPO training: actor and reference "
                         "weights, AdamW moments, gradients and activations on the trainer's "
                         "chips, the rollout's weights and KV cache in vLLM's HBM share "
                         "(flows/config/fit.py)"})
def fit_issues(profile: Profile) -> list[Issue]:
    est = profile_estimate(profile)
    if est is None or est.verdict != "no-fit":
        return []
    gke = profile.gke
    assert gke is not None
    smallest = smallest_fitting(profile, run_shape(profile.train.args))
    where = (f"set gke.machine_type={smallest[0]} and gke.topology={smallest[1]} (the smallest "
             f"{generation_of(TPU_MACHINES[gke.machine_type])} slice it fits)"
             if smallest else f"no listed {generation_of(TPU_MACHINES[gke.machine_type])} "
                              "slice holds it: set gke.num_slices higher")
    short = max((est.trainer, est.sampler), key=lambda side: side.floor_share)
    share = ("train.args.trainer_devices_fraction" if short.role == "trainer"
             else "train.args.sampler_devices_fraction or train.args.hbm_utilization_vllm")
    return [Issue("gke.topology",
                  f"{profile.model.maxtext_name} cannot train on {gke.machine_type} "
                  f"{gke.topology} × {gke.num_slices}: the {short.role}'s weights"
                  f"{' and optimizer state' if short.role == 'trainer' else ''} alone need "
                  f"{gib(short.floor)}, its {short.chips} chip(s) hold {gib(short.holds)}; "
                  f"{describe(est)}",
                  f"{where}; or a smaller model.maxtext_name; or give the {short.role} more "
                  f"of the slice ({share})", "config/does-not-fit")]


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


def rollout_check(profile: Profile) -> RolloutCheck | None:
    """The profile's rollout on its own slice; None when the slice itself does not fit
    (fit_issues says so first) or the sizes do not resolve (maxtext_rules names them)."""
    judged = _judged(profile)
    sizes = rollout_sizes(profile)
    if judged is None or sizes is None or estimate(*judged).verdict == "no-fit":
        return None
    return check_rollout(*judged, sizes)


def _rollout_fix(check: RolloutCheck) -> str:
    if check.derived is not None:
        return (f"set {check.derived.as_args()} (the smallest vLLM replica whose tensor "
                "parallelism divides the heads and that holds this model and a rollout "
                "batch on this slice's sampler devices)")
    return ("give the rollout more devices: a larger gke.topology, or more of the slice "
            "(train.args.sampler_devices_fraction)")


ROLLOUT_FIELD = "train.args.rollout_tensor_parallelism"


@limits({"train.args": "rollout_tensor_parallelism divides the model's query and KV heads; "
                      "with rollout_data/expert_parallelism and hbm_utilization_vllm it leaves "
                      "each sampler device room for its part of the weights and one "
                      "sequence's KV cache (flows/config/rollout.py)"})
def rollout_issues(profile: Profile) -> list[Issue]:
    check = rollout_check(profile)
    if check is None:
        return []
    name, issues = profile.model.maxtext_name, []
    if check.heads is not None:
        issues.append(Issue(ROLLOUT_FIELD, f"{check.heads}: vLLM shards both over its "
                            "tensor-parallel devices", _rollout_fix(check),
                            "config/rollout-does-not-fit"))
    if check.given.verdict == "no-fit":
        issues.append(Issue(ROLLOUT_FIELD, f"{name}'s vLLM rollout cannot start: "
                            f"{describe_rollout(check.given, check.sampler)}",
                            _rollout_fix(check), "config/rollout-does-not-fit"))
    return issues


def rollout_warning(profile: Profile) -> str | None:
    """A warning when a replica's share of a rollout batch passes TIGHT of vLLM's share: it
    runs, decoding the batch in waves, each a full pass of the sampler's time."""
    check = rollout_check(profile)
    if check is None or check.heads is not None or check.given.verdict != "waves":
        return None
    return (f"WARNING: {profile.model.maxtext_name}'s rollout batch may not fit vLLM's share "
            f"at once ({check.given.share:.0%}; it then decodes in waves): "
            f"{describe_rollout(check.given, check.sampler)}. Lower "
            f"train.args.rollout_micro_batch_size, or {_rollout_fix(check)}")


def fit_warning(profile: Profile) -> str | None:
    """The slice's warning and the rollout's, one a line (``_slice_warning``,
    ``rollout_warning``)."""
    found = [w for w in (_slice_warning(profile), rollout_warning(profile)) if w]
    return "\n".join(found) or None


def _slice_warning(profile: Profile) -> str | None:
    """A warning when the conservative total passes TIGHT of what a role's chips hold while
    the certain parts fit: it may still run (activations are an upper bound), or run out of
    memory at the first step, after the slice is paid for."""
    est = profile_estimate(profile)
    if est is None or est.verdict != "tight":
        return None
    over = ("may not fit: the conservative total passes" if est.share > 1
            else "is tight on this slice: the conservative total is")
    return (f"WARNING: {profile.model.maxtext_name} {over} {est.share:.0%} of what a role's "
            f"chips hold (the weights fit; activations and KV cache are upper bounds): "
            f"{describe(est)}. Lower train.args.train_micro_batch_size (or batch_size) or "
            "train.args.max_target_length, or set a larger gke.topology")
