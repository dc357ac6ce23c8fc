"""``tpurl plan PROFILE --compare-tpu``: the profile's GRPO training on each TPU generation.

For every generation of flows/config/tpu.py, the smallest slices (the profile's
``gke.num_slices`` of them) on which the fit estimate (flows/config/fit.py) does not refuse
the model and a rollout split holds it, each with its chips, every setting the profile
changes to train there (flows/config/slice_move.py: the rollout split that holds the model,
a tpu7x chip being two devices and a v5p chip holding three v6e chips' weights, and the
training mesh's axes fitted to the slice's devices, so the profile with them validates),
dollars per hour per capacity mode, an estimated training time and dollars per training run.
Pure: the profile in, lines out; nothing is asked of the cloud.

The training time is scaled from the profile's own figure (``gke.estimated_hours.train`` on
its slice) by the slice's total peak bf16 compute, THROUGHPUT_BASIS: a GRPO step is matrix
products (the rollout's decode and the policy's forward and backward passes), so at the same
model FLOPs utilization its time goes as the chips' summed peak. That is an assumption, not
a measurement: decode is often HBM-bandwidth bound (v5p's 2765 GB/s against v6e's 1640
GB/s narrows v6e's lead), and a small model does not keep a larger slice as busy, so the
figure for a slice larger than the profile's is optimistic.
"""

from __future__ import annotations

from dataclasses import dataclass

from flows.config.capacity import CAPACITY_MODES, CapacityMode, ModePrice, default_prices
from flows.config.fit import SliceShape, estimate, estimated
from flows.config.fit_inputs import run_shape
from flows.config.gke_section import gke_section
from flows.config.maxtext_models import architecture, convertible_models
from flows.config.profile import Profile
from flows.config.rollout import DEFAULT_PARALLELISM, resolve, sampler
from flows.config.slice_move import slice_changes
from flows.config.tpu import TPU_GENERATIONS, chips_in_topology, generation_machines, supported_topologies

# What the estimated time scales by: the slice's summed peak bf16 compute per chip, as
# Google's TPU7x page tabulates it (flows/config/tpu.py TpuGeneration.peak_bf16_tflops).
THROUGHPUT_BASIS = "peak bf16 TFLOPs per chip (Google's TPU7x architecture table)"
SLICES_SHOWN = 3  # per generation: the smallest that fit; larger ones only cost more per run


@dataclass(frozen=True)
class Candidate:
    generation: str
    machine_type: str
    topology: str
    chips: int  # over all of the profile's slices
    verdict: str  # fits or tight
    changes: dict[str, str]  # every field the profile changes to train there (slice_move)
    rollout: str  # the rollout settings that hold the model there
    train_hours: float
    prices: dict[CapacityMode, ModePrice]  # the modes with a known price

    def usd_per_hour(self, mode: CapacityMode) -> float | None:
        price = self.prices.get(mode)
        return None if price is None else self.chips * price.usd_per_chip_hour


def _prices(profile: Profile, generation: str) -> dict[CapacityMode, ModePrice]:
    """The generation's cited defaults; on the profile's own generation its gke.prices over
    them (a team's quote or committed rate is the better figure there)."""
    gke = gke_section(profile)
    out = default_prices(generation)
    if gke.machine.generation == generation:
        out.update(gke.prices)
    return out


def candidates(profile: Profile) -> list[Candidate] | str:
    """The fitting slices per generation, or why none can be compared."""
    gke = gke_section(profile)
    name = profile.model.maxtext_name
    if name not in convertible_models():
        return f"{name} is not in the pinned MaxText's model table: no estimate to compare"
    overrides = {**profile.model.args, **profile.train.args}
    arch = architecture(name, overrides)
    if not estimated(name, arch):
        return f"the fit estimate does not describe {name} (flows/config/fit.py ESTIMATED_BLOCKS)"
    shape = run_shape(profile.train.args)
    own = gke.machine.facts.peak_bf16_tflops * gke.total_chips
    hours = float(gke.estimated_hours.get("train", 0.0))
    out: list[Candidate] = []
    for generation, facts in TPU_GENERATIONS.items():
        slices = sorted((chips_in_topology(t), m.machine_type, t)
                        for m in generation_machines(generation) for t in supported_topologies(m))
        shown = 0
        for per_slice, machine_type, topology in slices:
            if shown == SLICES_SHOWN:
                break
            changes = slice_changes(profile, machine_type, topology)
            if changes is None:
                continue  # the estimate refuses it, or no rollout split holds the model
            est = estimate(arch, shape, SliceShape(generation, per_slice, gke.num_slices))
            chips = per_slice * gke.num_slices
            out.append(Candidate(generation, machine_type, topology, chips, est.verdict,
                                 changes, _rollout(profile, changes, sampler(
                                     shape, SliceShape(generation, per_slice, gke.num_slices),
                                     arch).devices, shape.hbm_utilization_vllm),
                                 hours * own / (facts.peak_bf16_tflops * chips),
                                 _prices(profile, generation)))
            shown += 1
    return out


def _rollout(profile: Profile, changes: dict[str, str], devices: int,
             utilization: float) -> str:
    """The profile's rollout split where it holds the model on the slice, else the one
    flows/config/rollout.py derives there, resolved on the slice's ``devices`` sampler
    devices; then the training mesh's axes that change."""
    args = {**profile.model.args, **profile.train.args}
    sizes = [int(float(changes.get(f"train.args.rollout_{axis}_parallelism",
                                   str(args.get(f"rollout_{axis}_parallelism", default)))))
             for axis, default in DEFAULT_PARALLELISM.items()]
    tensor, data, expert = sizes
    p = resolve(tensor, data, expert, devices)
    shown = ("tensor × data × expert as set" if p is None else
             f"tensor {p.tensor} × data {p.data}{f' × expert {p.expert}' if p.expert > 1 else ''}")
    share = changes.get("train.args.hbm_utilization_vllm", f"{utilization:g}")
    derived = "train.args.rollout_tensor_parallelism" in changes
    text = (f"rollout needs {shown} at hbm_utilization_vllm {share}" if derived
            else f"rollout as set ({shown})")
    mesh = [f"{k.removeprefix('train.args.')}={v}" for k, v in changes.items()
            if k.startswith("train.args.ici_")]
    return f"{text}; mesh {', '.join(mesh)}" if mesh else text


def _mode_cost(c: Candidate, mode: CapacityMode) -> str:
    """One mode's dollars per hour and per training run, or that its price is unknown.
    Queued provisioning bills as flex-start and is not shown apart."""
    per_hour = c.usd_per_hour(mode)
    if per_hour is None:
        return f"{mode} price unknown"
    return f"{mode} ${per_hour:,.2f}/h ≈ ${per_hour * c.train_hours:,.2f}/run"


def compare_tpu(profile: Profile) -> list[str]:
    """The comparison as lines for the plan's text."""
    gke = gke_section(profile)
    found = candidates(profile)
    head = (f"TPU generations for {profile.model.maxtext_name} ({gke.num_slices} slice(s); "
            f"training time scaled from gke.estimated_hours.train = "
            f"{float(gke.estimated_hours.get('train', 0.0)):g} h on {gke.machine_type} "
            f"{gke.topology} by {THROUGHPUT_BASIS}; $ per run is the training stage's):")
    if isinstance(found, str):
        return [head, f"  {found}"]
    lines = [head]
    for generation in TPU_GENERATIONS:
        rows = [c for c in found if c.generation == generation]
        facts = TPU_GENERATIONS[generation]
        lines.append(f"  {generation} ({facts.peak_bf16_tflops:g} TFLOPs, "
                     f"{facts.hbm_bytes_per_chip / 1e9:g} GB per chip):")
        if not rows:
            lines.append("    no listed slice holds the model's training (raise gke.num_slices)")
        for c in rows:
            modes = "; ".join(_mode_cost(c, mode) for mode in CAPACITY_MODES
                              if mode != "queued")
            tight = " (tight: activations may not fit)" if c.verdict == "tight" else ""
            lines.append(f"    {c.machine_type} {c.topology}: {c.chips} chips{tight}, "
                         f"≈ {c.train_hours:.1f} h training; {c.rollout}; {modes}")
    sources = sorted({f"{p.source} (as of {p.as_of})" for c in found
                      for p in c.prices.values()})
    lines += [f"  price source: {s}" for s in sources]
    return lines
