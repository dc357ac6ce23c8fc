"""A month of runs under each capacity mode, as a discrete-event simulation; pure.

Why simulate instead of multiplying: what a mode costs depends on the calendar, not only on
a run's length. A static pool on a reservation is billed every hour of the month; a pool
that scales from zero is billed from the moment its nodes are up until the cluster
autoscaler removes them, which it does only after they have been unneeded for
``scale_down_unneeded_h`` (cluster-autoscaler FAQ.md: --scale-down-unneeded-time, 10m
default). Waiting for capacity (queueing, flex-start's wait for a slice) is not billed and is
reported apart. Spot capacity may be preempted; the run resumes from its newest checkpoint
after the slice comes back, so the work since that checkpoint is done twice.

The calendar follows the deployments: the weekly schedule and event-triggered retrains,
where announcements that arrive while a run is active coalesce into one follow-up run after
it (prefect.yaml's retrain deployments), so runs never overlap.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from flows.config.capacity import SCALE_FROM_ZERO


@dataclass(frozen=True)
class MonthAssumptions:
    """Inputs of the simulation. Defaults: the tutorial profile's estimates; the capacity
    timings are assumptions to replace with your own measurements (and say so in output)."""

    days: int = 30
    chips: int = 32
    train_h: float = 4.0  # gke.estimated_hours.train
    cpu_h: float = 1.0  # convert + export on the CPU pool (no TPU held outside reservation)
    weekly_start_h: float = 24.0 + 6.0  # first Monday 06:00 (prefect.yaml's cron), hour 30
    retrain_at_h: tuple[float, ...] = (100.0, 101.0, 102.5, 400.0)  # announcements
    provision_h: float = 0.25  # a v6e-32 slice from request to nodes ready
    flex_wait_h: float = 1.0  # flex-start: waiting for capacity before provisioning
    scale_down_unneeded_h: float = 10 / 60  # cluster-autoscaler default
    spot_preemptions_per_h: float = 0.05  # a guess: one preemption per 20 slice-hours
    checkpoint_every_h: float = 0.5  # checkpoint_period in hours of training
    seed: int = 7


@dataclass
class ModeMonth:
    mode: str
    runs: int = 0
    held_chip_h: float = 0.0  # billed
    busy_chip_h: float = 0.0  # a training job ran on the chips (repeated work included)
    overhead_chip_h: float = 0.0  # held for a run but not training: boot, scale-down tail
    waiting_h: float = 0.0  # waiting for capacity (flex-start's queue), not billed
    preemptions: int = 0
    lost_chip_h: float = 0.0  # work repeated after preemptions
    train_wall_h: list[float] = field(default_factory=list)  # per run, waiting excluded

    @property
    def idle_chip_h(self) -> float:
        """Billed while no run wanted the chips: between runs."""
        idle = self.held_chip_h - self.busy_chip_h - self.overhead_chip_h
        return round(idle, 6) if idle > 1e-6 else 0.0


def run_starts(a: MonthAssumptions, run_h: float) -> list[float]:
    """When runs start: weekly, plus one follow-up per burst of announcements (coalesced
    while a run is active; an announcement while none runs starts one at once)."""
    horizon = a.days * 24.0
    weekly = [a.weekly_start_h + 168.0 * k for k in range(a.days // 7 + 1)]
    starts: list[float] = []
    end, pending = -1.0, False
    for t in sorted({*weekly, *a.retrain_at_h}):
        if t < end:
            pending = True
            continue
        if pending:  # the follow-up of what arrived during the last run
            starts.append(end)
            end, pending = end + run_h, False
            if t < end:
                pending = True
                continue
        starts.append(t)
        end = t + run_h
    if pending:
        starts.append(end)
    return [t for t in starts if t < horizon]


def _train(mode: str, a: MonthAssumptions, rng: random.Random, out: ModeMonth) -> None:
    """One train stage: attempts until the training is done (spot may preempt)."""
    scales = mode in SCALE_FROM_ZERO
    left, wall = a.train_h, 0.0
    while left > 1e-9:
        if mode in ("flex-start", "queued"):  # Dynamic Workload Scheduler's wait
            out.waiting_h += a.flex_wait_h
        if scales:  # the slice boots for this attempt: billed, not training
            out.overhead_chip_h += a.provision_h * a.chips
            wall += a.provision_h
        until = (rng.expovariate(a.spot_preemptions_per_h)
                 if mode == "spot" and a.spot_preemptions_per_h > 0 else float("inf"))
        ran = min(until, left)
        out.busy_chip_h += ran * a.chips
        wall += ran
        if until >= left:
            left = 0.0
            if scales:  # the autoscaler removes the nodes once unneeded this long
                out.overhead_chip_h += a.scale_down_unneeded_h * a.chips
            break
        out.preemptions += 1
        kept = (ran // a.checkpoint_every_h) * a.checkpoint_every_h
        out.lost_chip_h += (ran - kept) * a.chips
        left -= kept
    out.train_wall_h.append(wall)


def simulate(mode: str, a: MonthAssumptions) -> ModeMonth:
    """The month for one mode; the same seed gives the same month."""
    rng = random.Random(f"{a.seed}-{mode}")
    out = ModeMonth(mode)
    for _ in run_starts(a, a.cpu_h + a.train_h + 1.0):
        out.runs += 1
        _train(mode, a, rng, out)
    if mode in SCALE_FROM_ZERO:
        out.held_chip_h = out.busy_chip_h + out.overhead_chip_h
    else:  # the static pool: every hour of the month
        out.held_chip_h = a.chips * a.days * 24.0
    return out
