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

import math

from flows.config.fit import RunShape, SliceShape, estimate, roles
from flows.config.fit_inputs import generation_of, judged, rollout_sizes, run_shape
from flows.config.maxtext_models import Architecture
from flows.config.maxtext_rules import CUSTOM_MESH_KEYS, ICI_DEFAULTS
from flows.config.profile import Profile
from flows.config.rollout import check as check_rollout
from flows.config.rollout import derive, sampler
from flows.config.tpu import TPU_MACHINES, chips_in_topology, supported_topologies

FILL_AXIS = "ici_fsdp_parallelism"  # base.yml's -1: the axis that fills in the devices


def fitted_ici(axes: dict[str, int], devices: tuple[int, ...]) -> dict[str, int] | None:
    """The ICI axes that changed so that they multiply to each of ``devices`` (the trainer's
    and the sampler's devices per slice): empty when the profile's already do, None when
    more than one axis is -1 (maxtext_rules refuses that whatever the slice)."""
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
        fitted[FILL_AXIS] = -1
    room = math.gcd(*devices)
    for key, value in fitted.items():
        if value > 1:
            fitted[key] = math.gcd(value, room)
            room //= fitted[key]
    return {k: v for k, v in fitted.items() if v != axes[k]}


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
    found = fitted_ici(axes, (trainer // slice_.num_slices, sampler_ // slice_.num_slices))
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


def slice_changes(profile: Profile, machine_type: str, topology: str) -> dict[str, str] | None:
    """Every field the profile changes to train on ``machine_type`` ``topology`` (its own
    ``gke.num_slices`` of them): the slice, the ICI mesh and the rollout split. None when
    the profile cannot train there: the estimate refuses the slice, no rollout split holds
    the model, or the mesh cannot be fitted; also when the estimate cannot be made at all
    (``fit_inputs.judged``)."""
    found = judged(profile)
    if found is None:
        return None
    arch, _shape, own = found
    machine = TPU_MACHINES[machine_type]
    generation = generation_of(machine)
    shape = run_shape(profile.train.args)
    slice_ = SliceShape(generation, chips_in_topology(topology), own.num_slices)
    if estimate(arch, shape, slice_).verdict == "no-fit":
        return None
    rollout = _rollout_changes(profile, arch, shape, slice_)
    mesh = _mesh_changes(profile, shape, slice_, machine.facts.devices_per_chip)
    if rollout is None or mesh is None:
        return None
    return {"gke.machine_type": machine_type, "gke.topology": topology, **mesh, **rollout}


def smallest_move(profile: Profile) -> dict[str, str] | None:
    """The changes (``slice_changes``) to the fewest chips of the profile's generation on
    which it trains, with its ``gke.num_slices``; None when no listed slice holds it."""
    gke = profile.gke
    if gke is None or gke.machine_type not in TPU_MACHINES:
        return None
    generation = generation_of(TPU_MACHINES[gke.machine_type])
    for _chips, machine_type, topology in sorted(
            (chips_in_topology(t), m.machine_type, t) for m in TPU_MACHINES.values()
            if generation_of(m) == generation for t in supported_topologies(m)):
        changes = slice_changes(profile, machine_type, topology)
        if changes is not None:
            return changes
    return None


def as_settings(changes: dict[str, str]) -> str:
    """The changes as the fix text names them: ``field=value`` joined by commas."""
    return ", ".join(f"{field}={value}" for field, value in changes.items())
