"""What a profile changes to train on another slice: the slice's two fields, the training
mesh's ICI axes fitted to the slice's devices, and the rollout split where the profile's own
does not hold the model there.

The fit check's refusal (flows/config/fit_rules.py) and ``plan --compare-tpu``
(flows/operations/compare_tpu.py) name slices. A slice alone is not enough: the profile's
``ici_*_parallelism`` were written for its own slice's devices (the tutorial's tensor 2 ×
expert 4 for its 16 trainer devices), and MaxText refuses a mesh whose axes do not multiply
to the devices (flows/config/maxtext_rules.py ``_mesh_issues``); its rollout split names its
own sampler device count. So a named slice comes with the changes that make the profile
valid there, and ``tpurl validate`` accepts the profile with all of them applied.

The mesh keeps the profile's axes where they fit and shrinks the others: each fixed axis
becomes its greatest common divisor with what the devices leave, in the order MaxText lists
the axes, and ``ici_fsdp_parallelism`` (base.yml's -1) fills in the rest when no axis does.
"""

from __future__ import annotations

from dataclasses import replace

from flows.config.fit import RunShape, SliceShape, estimate, roles
from flows.config.fit_inputs import generation_of, judged, rollout_sizes, run_shape
from flows.config.maxtext_models import Architecture
from flows.config.maxtext_rules import CUSTOM_MESH_KEYS, ICI_DEFAULTS, fitted_axes
from flows.config.profile import Profile
from flows.config.rollout import check as check_rollout
from flows.config.rollout import derive, sampler
from flows.config.tpu import TPU_GENERATIONS, TPU_MACHINES, chips_in_topology, supported_topologies


def _mesh_changes(profile: Profile, shape: RunShape, slice_: SliceShape,
                  per_chip: int) -> dict[str, str] | None:
    args = {**profile.model.args, **profile.train.args}
    if any(key in args for key in CUSTOM_MESH_KEYS):
        return {}  # a custom mesh: the mesh rules do not model it, nor does this
    try:
        axes = {k: int(str(args.get(k, default))) for k, default in ICI_DEFAULTS.items()}
    except ValueError:
        return {}  # maxtext_rules names the value that is not a number
    trainer, sampler_, _shared = roles(shape, SliceShape(
        slice_.generation, slice_.chips_per_slice * per_chip, slice_.num_slices))
    # the ICI axes that changed to multiply to each role's devices per slice, FSDP filling in
    found = fitted_axes(axes, (trainer // slice_.num_slices, sampler_ // slice_.num_slices),
                        "ici_fsdp_parallelism")
    return None if found is None else {f"train.args.{k}": str(v) for k, v in found.items()}


def _rollout_changes(profile: Profile, arch: Architecture, shape: RunShape,
                     slice_: SliceShape) -> dict[str, str] | None:
    """The profile's rollout split where it holds the model on the slice (no change), else
    the derived one; None when no split holds the weights and one sequence."""
    sizes = rollout_sizes(profile) or (1, -1, 1)
    found = check_rollout(arch, shape, slice_, sizes)
    if found is not None and found.holds:
        return {}
    derived = (found.derived if found is not None
               else derive(arch, shape, sampler(shape, slice_, arch)))
    if derived is None:
        return None
    p = derived.parallelism
    changes = {"train.args.rollout_tensor_parallelism": str(p.tensor),
               "train.args.rollout_data_parallelism": str(p.data),
               "train.args.rollout_expert_parallelism": str(p.expert)}
    if derived.utilization != shape.hbm_utilization_vllm:
        changes["train.args.hbm_utilization_vllm"] = f"{derived.utilization:g}"
    return changes


def slice_changes(profile: Profile, machine_type: str, topology: str,
                  roomy: bool = False) -> dict[str, str] | None:
    """Every field the profile changes to train on ``machine_type`` ``topology`` (its own
    ``gke.num_slices`` of them): the slice, the ICI mesh and the rollout split. None when
    the profile cannot train there: the estimate refuses the slice (``roomy``: or finds it
    tight, the slice a warning names), no rollout split holds the model, or the mesh cannot
    be fitted; also when the estimate cannot be made at all (``fit_inputs.judged``)."""
    found = judged(profile)
    if found is None:
        return None
    arch, _shape, own = found
    machine = TPU_MACHINES[machine_type]
    generation = generation_of(machine)
    shape = run_shape(profile.train.args)
    slice_ = SliceShape(generation, chips_in_topology(topology), own.num_slices)
    if estimate(arch, shape, slice_).verdict not in (("fits",) if roomy else ("fits", "tight")):
        return None
    rollout = _rollout_changes(profile, arch, shape, slice_)
    mesh = _mesh_changes(profile, shape, slice_, machine.facts.devices_per_chip)
    if rollout is None or mesh is None:
        return None
    return {"gke.machine_type": machine_type, "gke.topology": topology, **mesh, **rollout}


def smallest_move(profile: Profile, roomy: bool = False) -> dict[str, str] | None:
    """The changes (``slice_changes``) to the fewest chips of the profile's generation on
    which it trains (``roomy``: without the tight warning), with its ``gke.num_slices``;
    None when no listed slice holds it."""
    gke = profile.gke
    if gke is None or gke.machine_type not in TPU_MACHINES:
        return None
    generation = generation_of(TPU_MACHINES[gke.machine_type])
    for _chips, machine_type, topology in sorted(
            (chips_in_topology(t), m.machine_type, t) for m in TPU_MACHINES.values()
            if generation_of(m) == generation for t in supported_topologies(m)):
        changes = slice_changes(profile, machine_type, topology, roomy)
        if changes is not None:
            return changes
    return None


def split_changes(profile: Profile) -> dict[str, str] | None:
    """On the profile's own slice, where the trainer and the sampler split it (``fit.roles``
    without shared chips), the split nearest the profile's (the fewest devices moved from
    one role to the other) on which the estimate does not refuse and the rollout holds the
    model: both fractions, the mesh fitted to the new split and the rollout split there.
    None when the roles share the chips or have slices of their own, or no split of this
    slice holds both."""
    found = judged(profile)
    if found is None:
        return None
    arch, shape, slice_ = found
    per_chip = TPU_GENERATIONS[slice_.generation].devices_per_chip
    in_devices = SliceShape(slice_.generation, slice_.chips_per_slice * per_chip,
                            slice_.num_slices)
    _trainer, now, shared = roles(shape, in_devices)
    total = in_devices.chips_per_slice * in_devices.num_slices
    if shared or shape.num_trainer_slices > 0:
        return None
    for devices in sorted(range(1, total), key=lambda d: (abs(d - now), d)):
        if devices == now:
            continue
        fraction, rest = f"{devices / total:.6g}", f"{(total - devices) / total:.6g}"
        moved = replace(shape, sampler_devices_fraction=float(fraction),
                        trainer_devices_fraction=float(rest))
        if roles(moved, in_devices)[:2] != (total - devices, devices):
            continue  # a fraction that int() rounds to another count: the next one
        if estimate(arch, moved, slice_).verdict == "no-fit":
            continue
        rollout = _rollout_changes(profile, arch, moved, slice_)
        mesh = _mesh_changes(profile, moved, slice_, per_chip)
        if rollout is not None and mesh is not None:
            return {"train.args.sampler_devices_fraction": fraction,
                    "train.args.trainer_devices_fraction": rest, **mesh, **rollout}
    return None


def as_settings(changes: dict[str, str]) -> str:
    """The changes as the fix text names them: ``field=value`` joined by commas."""
    return ", ".join(f"{field}={value}" for field, value in changes.items())
