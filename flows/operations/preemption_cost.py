"""What one preemption of training costs a GKE profile, from its own fields (pure).

Why a computation and not a sentence: the answer depends on the profile (how often it
checkpoints, how long a step and a restart take, how many chips at which price, how much
room its spend cap leaves above the plan's estimate), and a figure written by hand would
drift from all of them. docs/how-to/preemption-cost.md shows it for the shipped profiles and
a test recomputes it there.

A preemption (a spot reclaim, a maintenance event, a revoked queued slice) fails the
training JobSet; the flow deletes it and submits the next one, which resumes from the newest
actor checkpoint (flows/backends/gke/recovery.py; at most ``gke.preemption_budget`` + 1
JobSets per stage). What that costs on top of a run that went as planned:

- the steps since the newest checkpoint, trained again: at most one checkpoint period
  (``train.args.checkpoint_period``; MaxText 0.2.4's RL default is 50, maxtext/configs/
  post_train/rl.yml), never more than the run's ``num_batches``;
- the restart: the training timeline's phases between the slice's nodes existing and the
  first step (``gke.train_timeline``: the workers register with the Pathways head, the
  checkpoint loads, vLLM starts, the first steps compile), billed again; the head's image
  pull and the scale-up come again too, in wall time, unbilled (billed with queued capacity,
  whose slice exists before the head starts: flows/config/timeline.py ``is_billed``).

Both are charged at the price the spend cap is checked against (the chain's priciest mode,
flows/config/spend.py), so the result says directly whether the cap leaves room for one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from flows.config.profile import Profile
from flows.config.spend import estimated_run_usd
from flows.config.timeline import is_billed
from flows.core.budgets import budgets_for

# maxtext/configs/post_train/rl.yml (MaxText 0.2.4): checkpoint_period: 50
RL_CHECKPOINT_PERIOD = 50
# the phases a resubmitted JobSet goes through again before its first step
RESTART_PHASES = ("image_pull", "scale_up", "pathways_registration", "checkpoint_load",
                  "vllm_start", "first_compiles")


@dataclass(frozen=True)
class PreemptionCost:
    """One preemption of training, for one profile; minutes and US dollars."""

    profile: str
    budget: int  # preemptions a stage resubmits (gke.preemption_budget, default 3)
    chips: int
    usd_per_chip_hour: float
    mode: str  # the capacity mode whose price is charged (the chain's priciest)
    step_min: float  # one training step
    step_source: str  # where step_min comes from
    checkpoint_period: int  # steps between checkpoints (capped at num_batches)
    lost_min: float  # at most: the steps since the newest checkpoint
    restart_billed_min: float  # the restart's phases the slice is billed for
    restart_unbilled_min: float  # the restart's wall time before the slice exists
    restart_stated: bool  # False: no gke.train_timeline states the restart's phases
    cap_usd: float | None  # gke.max_usd_per_run
    estimate_usd: float  # the plan's estimate of the run, which the cap must stand above

    @property
    def usd(self) -> float:
        """What one preemption adds to the run's TPU bill, at most."""
        return (self.lost_min + self.restart_billed_min) / 60.0 * self.chips * \
            self.usd_per_chip_hour

    @property
    def wall_min(self) -> float:
        """What one preemption adds to the run's wall time, at most."""
        return self.lost_min + self.restart_billed_min + self.restart_unbilled_min

    @property
    def room_usd(self) -> float | None:
        """What the cap leaves above the plan's estimate (None: no cap)."""
        return None if self.cap_usd is None else self.cap_usd - self.estimate_usd

    @property
    def preemptions_in_cap(self) -> int | None:
        """How many preemptions the cap's room pays for before the run is stopped."""
        room = self.room_usd
        if room is None:
            return None
        return max(0, math.floor(room / self.usd)) if self.usd > 0 else self.budget


def preemption_cost(profile: Profile) -> PreemptionCost:
    """Pure: the cost of one preemption of the profile's training (a GKE profile)."""
    gke = profile.gke
    if gke is None:
        raise ValueError(f"{profile.name} is not a GKE profile: nothing is preempted")
    args = profile.train.args
    batches = int(args.get("num_batches") or 1)
    period = min(int(args.get("checkpoint_period") or RL_CHECKPOINT_PERIOD), batches)
    timeline = gke.train_timeline
    slice_first = "queued" in gke.capacity_chain
    if timeline is not None:
        step_min = timeline.steps / batches
        source = f"gke.train_timeline.steps {timeline.steps:g} min over {batches} steps"
        billed = sum(getattr(timeline, name) for name in RESTART_PHASES
                     if is_billed(name, slice_first))
        unbilled = sum(getattr(timeline, name) for name in RESTART_PHASES
                       if not is_billed(name, slice_first))
    else:
        hours = float(gke.estimated_hours.get("train", 0.0))
        step_min = hours * 60.0 / batches
        source = (f"gke.estimated_hours.train {hours:g} h over {batches} steps (start-up "
                  "included: an upper bound)")
        billed = unbilled = 0.0
    mode = gke.priciest_mode
    return PreemptionCost(
        profile=profile.name, budget=budgets_for(profile, "train").preemptions,
        chips=gke.total_chips, usd_per_chip_hour=gke.mode_usd_per_chip_hour(mode), mode=mode,
        step_min=step_min, step_source=source, checkpoint_period=period,
        lost_min=period * step_min, restart_billed_min=billed, restart_unbilled_min=unbilled,
        restart_stated=timeline is not None, cap_usd=gke.max_usd_per_run,
        estimate_usd=estimated_run_usd(profile))


def cost_lines(cost: PreemptionCost) -> list[str]:
    """The figures as the how-to page states them, one line each (pure)."""
    restart = (f"{cost.restart_billed_min:g} min billed, {cost.restart_unbilled_min:g} min "
               "unbilled (gke.train_timeline)" if cost.restart_stated else
               "not stated (the profile has no gke.train_timeline): not counted")
    if cost.cap_usd is None:
        cap = "no gke.max_usd_per_run: no cap stops the run"
    else:
        fits = cost.preemptions_in_cap
        cap = (f"gke.max_usd_per_run ${cost.cap_usd:,.2f}, the plan's estimate "
               f"${cost.estimate_usd:,.2f}: room ${cost.room_usd:,.2f}, "
               + ("not enough for one preemption (the cap stops the run)" if fits == 0 else
                  f"enough for {fits} preemption(s)"))
    return [
        f"preemption budget: {cost.budget} (at most {cost.budget + 1} training JobSets)",
        f"one step: {cost.step_min:g} min ({cost.step_source})",
        f"checkpoint every {cost.checkpoint_period} step(s): up to {cost.lost_min:g} min of "
        "training lost",
        f"restart: {restart}",
        f"one preemption: up to ${cost.usd:,.2f} ({cost.chips} chips at "
        f"${cost.usd_per_chip_hour:.2f}/chip-hour, {cost.mode}), up to {cost.wall_min:g} min "
        "longer",
        f"spend cap: {cap}",
    ]
