"""What the TPUs cost: estimates before a run, chip-hours actually held after.

Why "held", not "busy": on a reservation the blueprint's TPU pool is static. From
``gcluster deploy`` to ``gcluster destroy`` every chip is billed whether a job runs or not, so
the honest figure for a stage is (chips in the pool) × (its wall time), and for the cluster
(chips) × (time since deploy). In the modes that scale from zero (on-demand, spot,
flex-start) a stage holds only the chips its own jobs bring up, and nothing is held between
runs. Busy chip-hours are shown too, to make idle spend visible. Prices are the profile's
(gke.prices[gke.capacity], each with its source and date; defaults in
flows/config/capacity.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from flows.config.capacity import CAPACITY_MODES, SCALE_FROM_ZERO, ModePrice, is_capacity_mode
from flows.config.eval_hours import stage_hours, tpu_stages
from flows.config.gke import GkeSection
from flows.config.gke_section import gke_section
from flows.config.profile import Profile
from flows.config.spend import ON_SLICE, SCALE_DOWN_TAIL_S

HOURS_PER_WEEK = 168.0


@dataclass(frozen=True)
class StageCost:
    stage: str
    hours: float
    busy_chip_hours: float  # chips a job of this stage actually asks for
    held_chip_hours: float  # chips billed meanwhile (the whole static pool)
    usd: float              # of the held chip-hours
    tail_chip_hours: float = 0.0  # held after its pods end, until the autoscaler scales down


@dataclass(frozen=True)
class CostPlan:
    pool_chips: int
    usd_per_chip_hour: float
    idle_usd_per_hour: float  # what the pool costs per hour while nothing trains
    stages: tuple[StageCost, ...]
    capacity: str = "reservation"
    price: ModePrice | None = None  # None: the profile gives no price for this mode

    @property
    def scales_from_zero(self) -> bool:
        return self.capacity in SCALE_FROM_ZERO

    @property
    def run_hours(self) -> float:
        return sum(s.hours for s in self.stages)

    def idle_chip_hours(self, runs_per_week: float = 1.0) -> float:
        """Chip-hours billed per week while nothing runs: the static pool's rest of the week
        (it exists from deploy to teardown); zero for a pool that scales from zero."""
        if self.scales_from_zero:
            return 0.0
        return self.pool_chips * max(HOURS_PER_WEEK - runs_per_week * self.run_hours, 0.0)

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
    gke = gke_section(profile)
    if stage in ON_SLICE:  # train, evaluate: Pathways workers on the slice
        return gke.total_chips
    if stage in ("convert", "export"):
        return gke.total_chips if gke.conversion_placement == "tpu-hosts" else 0
    return 0


def cost_plan(profile: Profile, capacity: str | None = None) -> CostPlan:
    """Per-stage estimate from ``gke.estimated_hours`` for the profile's capacity mode, or
    for another one (``tpurl plan --compare-capacity``); pure."""
    gke = gke_section(profile)
    mode = capacity or gke.capacity_chain[0]
    price = gke.prices.get(mode) if is_capacity_mode(mode) else None
    rate = price.usd_per_chip_hour if price else 0.0
    stages = []
    for stage in tpu_stages(profile):
        hours = stage_hours(profile, stage)
        busy = hours * busy_chips(profile, stage)
        # from zero: the stage's nodes stay until the autoscaler removes them as unneeded
        # (flows/config/spend.py scale_down_tail_h; the same rule, not imported: it takes
        # the profile's mode, this any mode)
        tail = (SCALE_DOWN_TAIL_S / 3600.0 * busy_chips(profile, stage)
                if mode in SCALE_FROM_ZERO else 0.0)
        held = busy + tail if mode in SCALE_FROM_ZERO else hours * gke.total_chips
        stages.append(StageCost(stage, hours, busy, held, held * rate, tail))
    idle = 0.0 if mode in SCALE_FROM_ZERO else gke.total_chips * rate
    return CostPlan(gke.total_chips, rate, idle, tuple(stages), mode, price)


def compare_capacity(profile: Profile, runs_per_week: float = 1.0) -> list[str]:
    """Every mode side by side for this profile: held chip-hours and dollars per run, idle
    chip-hours and dollars per week, and where each price comes from; pure."""
    gke = gke_section(profile)
    lines = [f"Capacity modes for {gke.total_chips} chips ({gke.machine_type} {gke.topology} "
             f"x{gke.num_slices}), {runs_per_week:g} run(s) a week, estimated hours "
             + ", ".join(f"{k} {stage_hours(profile, k):g}" for k in tpu_stages(profile))
             + ":",
             f"  {'mode':<12} {'held/run':>10} {'$/run':>10} {'idle/week':>11} "
             f"{'$/week':>10}  price"]
    for mode in CAPACITY_MODES:
        plan = cost_plan(profile, mode)
        mark = "*" if mode in gke.capacity_chain else " "
        if plan.price is None:
            lines.append(f" {mark}{mode:<12} {plan.held_chip_hours:8.1f} ch {'—':>10} "
                         f"{plan.idle_chip_hours(runs_per_week):8.1f} ch {'—':>10}  no price: "
                         f"add gke.prices.{mode} (usd_per_chip_hour, source, as_of)")
            continue
        idle = plan.idle_chip_hours(runs_per_week)
        week = (plan.usd * runs_per_week) + idle * plan.usd_per_chip_hour
        lines.append(f" {mark}{mode:<12} {plan.held_chip_hours:8.1f} ch {plan.usd:10,.2f} "
                     f"{idle:8.1f} ch {week:10,.2f}  ${plan.price.usd_per_chip_hour:.2f}/chip-h"
                     f", {plan.price.source}, as of {plan.price.as_of.isoformat()}")
    lines.append("  (* a mode of the profile's gke.capacity; ch = chip-hours. Queueing for "
                 "capacity is not billed and not included; spot runs may be preempted and "
                 "resume from the newest checkpoint, repeating the work since it)")
    return lines + chain_lines(profile)


def chain_lines(profile: Profile) -> list[str]:
    """The profile's chain of modes over its zones, in the order tried: per mode and zone
    the price, a run's dollars and the expected wait (capacity_wait.py's stockout model, whose
    figures are assumptions); per mode the wait over all its zones and the budget after which
    the next mode is tried; the worst case (every mode waits its budget) and the spend cap
    against the priciest mode's run. Pure."""
    from flows.backends.gke.capacity_pools import tpu_pools
    from flows.backends.gke.infra.capacity_wait import (
        STOCKOUTS,
        Step,
        chain_expected_wait_h,
        expected_wait_h,
        miss_probability,
    )
    from flows.config.spend import estimated_run_usd
    from flows.core.budgets import mode_budget_h

    gke = gke_section(profile)
    pools = tpu_pools(gke)
    lines = [f"Fallback chain, capacity {', '.join(gke.capacity_chain)} over zone(s) "
             f"{', '.join(gke.zone_order)} (tried in this order; a slice is "
             f"{gke.num_slices} x {gke.topology}, all slices in one zone):",
             f"  {'mode':<12}{'zone':<14}{'$/chip-h':>9}{'$/run':>11}{'wait here':>11}"
             f"{'mode waits':>12}{'gives up':>10}"]
    steps = []
    for mode in gke.capacity_chain:
        zones = tuple(p.zone for p in pools if p.mode == mode)
        budget, st = mode_budget_h(profile, mode), STOCKOUTS[mode]
        steps.append(Step(mode, zones, budget))
        plan = cost_plan(profile, mode)
        for zone in zones:
            lines.append(f"  {mode:<12}{zone:<14}{plan.usd_per_chip_hour:>9.2f}"
                         f"{plan.usd:>11,.2f}{expected_wait_h(st, 1, budget):>10.2f}h")
        lines[-1] += (f"{expected_wait_h(st, len(zones), budget):>11.2f}h"
                      f"{budget:>9.2f}h" if mode != "reservation" else
                      f"{'0.00h':>12}{'—':>10}")
        if mode != "reservation":
            lines.append(f"  {'':<26}no slice in any of its zones within {budget:g} h: "
                         f"{miss_probability(st, len(zones), budget):.1%}")
    worst = sum(step.budget_h for step in steps)
    priciest = gke.priciest_mode
    lines.append(f"  expected wait for the slice: {chain_expected_wait_h(steps, STOCKOUTS):.2f} h;"
                 " worst case, every mode waits its budget: "
                 + " + ".join(f"{st.budget_h:g}" for st in steps) + f" = {worst:g} h, then "
                 "the stage fails (no slice in any mode)")
    estimate = estimated_run_usd(profile)
    cap = (f"gke.max_usd_per_run ${gke.max_usd_per_run:,.2f}" if gke.max_usd_per_run
           is not None else "no gke.max_usd_per_run")
    lines.append(f"  spend cap: {cap} against ${estimate:,.2f}, a run served by the priciest "
                 f"mode ({priciest}); waiting is not billed")
    lines.append("  (waits: the stockout model's assumed figures, flows/backends/gke/infra/"
                 "capacity_wait.py; the budgets: gke.schedule_budget_s, and gke.queue_budget_s "
                 "for flex-start and queued)")
    return lines


def stage_estimated_chip_hours(profile: Profile, stage: str) -> float:
    """For ``StagePlan.estimated_chip_hours``: the held chip-hours of one stage (0 off GKE)."""
    if profile.gke is None or stage not in tpu_stages(profile):
        return 0.0
    return next(s.held_chip_hours for s in cost_plan(profile).stages if s.stage == stage)


def render_cost(plan: CostPlan) -> list[str]:
    pool = ("a pool that scales from zero" if plan.scales_from_zero
            else "the static pool")
    source = (f"; {plan.price.source}, as of {plan.price.as_of.isoformat()}" if plan.price
              else "")
    lines = [f"TPU cost, capacity {plan.capacity}, at ${plan.usd_per_chip_hour:.2f}/chip-hour "
             f"({plan.pool_chips} chips in {pool}{source}):"]
    for s in plan.stages:
        lines.append(f"  {s.stage:<8} {s.hours:5.2f} h  busy {s.busy_chip_hours:7.1f} "
                     f"chip-h  held {s.held_chip_hours:7.1f} chip-h  ≈ ${s.usd:,.2f}")
    lines.append(f"  total    held {plan.held_chip_hours:.1f} chip-h ≈ ${plan.usd:,.2f} "
                 f"(busy {plan.busy_chip_hours:.1f})")
    if plan.scales_from_zero:
        tail = sum(s.tail_chip_hours for s in plan.stages)
        if tail:
            lines.append(f"  after its pods end each TPU stage still pays its nodes for up "
                         f"to {SCALE_DOWN_TAIL_S / 60:.0f} min, until the autoscaler removes "
                         "them (--scale-down-unneeded-time, then --scale-down-delay-after-add "
                         f"after the cluster's last scale-up): {tail:.1f} chip-h ≈ "
                         f"${tail * plan.usd_per_chip_hour:,.2f}, in the total")
        lines.append("  idle pool: $0.00 per hour: no TPU node exists while nothing trains")
    else:
        # Compute Engine bills a reservation's hosts while it exists, consumed or not
        # (cloud.google.com/compute/docs/instances/reservations-delete: delete it "to stop
        # incurring charges for its reserved resources"); teardown removes only the pool.
        lines.append(f"  idle pool: ${plan.idle_usd_per_hour:,.2f} per hour, busy or not, while "
                     "the reservation exists: `tpurl teardown` removes the pool, not the "
                     "reservation, which bills until it is deleted")
    return lines


def held_chip_hours(chips: int, wall_s: float) -> float:
    """Chip-hours held by a static pool of ``chips`` during ``wall_s`` seconds."""
    return chips * max(wall_s, 0.0) / 3600.0


def stage_held_chip_hours(profile: Profile, wall_s: float, pool_exists: bool = True,
                          stage: str = "train") -> float:
    """What a stage's ``chip_hours`` should carry on GKE: the whole static pool for its wall
    time, or in a mode that scales from zero only the chips the stage's own jobs hold."""
    if profile.gke is None or not pool_exists:
        return 0.0
    chips = (busy_chips(profile, stage) if profile.gke.scales_from_zero
             else profile.gke.total_chips)
    return held_chip_hours(chips, wall_s)


def pool_chip_hours_since(deployed_at: str, now: datetime, chips: int) -> float:
    """Chip-hours billed since the pool was deployed (``deployed_at`` is ISO 8601, with zone)."""
    start = datetime.fromisoformat(deployed_at)
    return held_chip_hours(chips, (now - start).total_seconds())


def render_caps(profile: Profile) -> list[str]:
    """The spend caps beside the estimate they must cover (flows/config/spend.py refuses a cap
    below it when the profile loads)."""
    from flows.config.spend import estimated_run_usd, estimated_stage_usd, scale_down_tail_h
    from flows.config.timeline import timeline_lines

    gke = gke_section(profile)
    timeline = (timeline_lines(gke.train_timeline, scale_down_tail_h(gke, "train") * 60,
                               "queued" in gke.capacity_chain)
                if gke.train_timeline else [])
    if gke.max_usd_per_run is None and not gke.max_usd_per_stage:
        return [*timeline,
                "  spend cap: none (gke.max_usd_per_run stops a run whose TPU time costs more)"]
    lines = timeline
    if gke.max_usd_per_run is not None:
        estimate = estimated_run_usd(profile)
        margin = (f" ({gke.max_usd_per_run / estimate - 1:.0%} above it; gke.spend_margin "
                  f"{gke.spend_margin:.0%})" if gke.spend_margin is not None and estimate else "")
        lines.append(f"  spend cap: ${gke.max_usd_per_run:,.2f} per run against the estimate "
                     f"of ${estimate:,.2f}{margin}; crossing it deletes the JobSet, keeps "
                     "the checkpoints and fails the stage (budget)")
    lines += [f"  spend cap: ${cap:,.2f} for {stage} against its estimate of "
              f"${estimated_stage_usd(profile, stage):,.2f}"
              for stage, cap in gke.max_usd_per_stage.items()]
    return lines


class GkePricing:
    """The Pricing members of the Backend protocol (flows/core/backend.py) on GKE, here beside
    the money they come from; GkeBackend (backend.py) holds one and answers through it."""

    def __init__(self, profile: Profile, gke: GkeSection) -> None:
        self.profile, self.gke = profile, gke

    @property
    def usd_per_chip_hour(self) -> float:
        return self.gke.usd_per_chip_hour

    def estimated_chip_hours(self, stage: str) -> float:
        return stage_estimated_chip_hours(self.profile, stage)

    def held_chip_hours(self, stage: str, wall_s: float) -> float:
        """Held, not busy: the static pool bills every chip for the stage's whole wall time
        (a pool that scales from zero only the stage's own chips); the image is built before
        the cluster exists."""
        return 0.0 if stage == "image" else stage_held_chip_hours(self.profile, wall_s,
                                                                  stage=stage)
