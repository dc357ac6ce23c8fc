"""What the TPUs cost: estimates before a run, chip-hours actually held after.

Why "held", not "busy": the blueprint's TPU pool is static. From ``gcluster deploy`` to
``gcluster destroy`` every chip is billed whether a job runs or not, so the honest figure for
a stage is (chips in the pool) × (its wall time), and the honest figure for the cluster is
(chips) × (time since deploy). Busy chip-hours are shown too, to make idle spend visible.
Prices are the profile's (gke.price_table[gke.price_tier]; defaults in flows/config/tpu.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from flows.config.profile import Profile

TPU_STAGES = ("convert", "train", "export")


@dataclass(frozen=True)
class StageCost:
    stage: str
    hours: float
    busy_chip_hours: float  # chips a job of this stage actually asks for
    held_chip_hours: float  # chips billed meanwhile (the whole static pool)
    usd: float              # of the held chip-hours


@dataclass(frozen=True)
class CostPlan:
    pool_chips: int
    usd_per_chip_hour: float
    idle_usd_per_hour: float  # the profile's gke.idle_usd_per_hour
    stages: tuple[StageCost, ...]

    @property
    def busy_chip_hours(self) -> float:
        return sum(s.busy_chip_hours for s in self.stages)

    @property
    def held_chip_hours(self) -> float:
        return sum(s.held_chip_hours for s in self.stages)

    @property
    def usd(self) -> float:
        return sum(s.usd for s in self.stages)


def busy_chips(profile: Profile, stage: str) -> int:
    """TPU chips a stage's jobs request: conversion/export on the CPU pool request none."""
    gke = profile.gke
    assert gke is not None
    if stage == "train":
        return gke.total_chips
    if stage in ("convert", "export"):
        return gke.total_chips if gke.conversion_placement == "tpu-hosts" else 0
    return 0


def cost_plan(profile: Profile) -> CostPlan:
    """Per-stage estimate from ``gke.estimated_hours``; pure."""
    gke = profile.gke
    assert gke is not None, "cost plans are for GKE profiles"
    price = gke.usd_per_chip_hour
    stages = []
    for stage in TPU_STAGES:
        hours = float(gke.estimated_hours.get(stage, 0.0))
        held = hours * gke.total_chips
        stages.append(StageCost(stage, hours, hours * busy_chips(profile, stage), held,
                                held * price))
    return CostPlan(gke.total_chips, price, gke.idle_usd_per_hour, tuple(stages))


def stage_estimated_chip_hours(profile: Profile, stage: str) -> float:
    """For ``StagePlan.estimated_chip_hours``: the held chip-hours of one stage (0 off GKE)."""
    if profile.gke is None or stage not in TPU_STAGES:
        return 0.0
    return next(s.held_chip_hours for s in cost_plan(profile).stages if s.stage == stage)


def render_cost(plan: CostPlan) -> list[str]:
    lines = [f"TPU cost at ${plan.usd_per_chip_hour:.2f}/chip-hour "
             f"({plan.pool_chips} chips in the static pool):"]
    for s in plan.stages:
        lines.append(f"  {s.stage:<8} {s.hours:5.2f} h  busy {s.busy_chip_hours:7.1f} "
                     f"chip-h  held {s.held_chip_hours:7.1f} chip-h  ≈ ${s.usd:,.2f}")
    lines.append(f"  total    held {plan.held_chip_hours:.1f} chip-h ≈ ${plan.usd:,.2f} "
                 f"(busy {plan.busy_chip_hours:.1f})")
    lines.append(f"  idle pool: ${plan.idle_usd_per_hour:,.2f} per hour from deploy until "
                 "`tpurl teardown`, busy or not")
    return lines


def held_chip_hours(chips: int, wall_s: float) -> float:
    """Chip-hours held by a static pool of ``chips`` during ``wall_s`` seconds."""
    return chips * max(wall_s, 0.0) / 3600.0


def stage_held_chip_hours(profile: Profile, wall_s: float, pool_exists: bool = True) -> float:
    """What a stage's ``chip_hours`` should carry on GKE: the whole pool for its wall time."""
    if profile.gke is None or not pool_exists:
        return 0.0
    return held_chip_hours(profile.gke.total_chips, wall_s)


def pool_chip_hours_since(deployed_at: str, now: datetime, chips: int) -> float:
    """Chip-hours billed since the pool was deployed (``deployed_at`` is ISO 8601, with zone)."""
    start = datetime.fromisoformat(deployed_at)
    return held_chip_hours(chips, (now - start).total_seconds())
