"""A profile's ``health`` section: what the training sentinel does when a detector fires.

Every detector (flows/health/detectors.py) always runs; a profile only chooses, per detector,
what its finding does: ``warn`` (the run page, the log and a ``tpurl.train.suspect`` event),
``hold`` (the same, and a passing promotion waits for `tpurl promote --clear`), or ``stop``
(the same, and a GKE training's JobSet is deleted the way a spend cap deletes it, its
checkpoints kept). There is no "off": a finding is never silent. The default is ``hold``: a
reward hack costs nothing more while it waits for a person, and a model trained on one is not
served by accident. Not run-tunable: a run's overrides cannot wave its own promotion through.

The thresholds live here with their defaults, so a profile can tune one detector without
copying the rest; each default's reason is in its docstring (and so in the profile
reference), the detector's reasoning in flows/health/detectors.py.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from flows.config.section_base import StrictModel

Policy = Literal["warn", "hold", "stop"]
POLICIES: tuple[Policy, ...] = ("warn", "hold", "stop")


class RewardDominance(StrictModel):
    """One reward function rising while every other falls (needs two functions or more)."""

    policy: Policy = "hold"
    """warn, hold or stop (see the section)."""
    window: int = Field(default=3, ge=1)
    """Steps averaged at each end: the first ``window`` steps are the baseline, the latest
    ``window`` the present. 3: a GRPO step's mean over a few groups is noisy, and three
    steps still let a two-step hack of a short run show."""
    min_fall: float = Field(default=0.1, gt=0)
    """How far (absolute, in the function's own units) each other function must fall from
    its baseline. 0.1: a tenth of the usual 0..1 reward scale, above the step-to-step noise
    of the rehearsal's and GSM8K-style correctness rewards."""


class LengthDrift(StrictModel):
    """Completion length moving with the reward: the reward paid for length."""

    policy: Policy = "hold"
    """warn, hold or stop (see the section)."""
    min_change: float = Field(default=0.5, gt=0)
    """The relative change of the mean completion length from its baseline (0.5: half as
    long again, or half as long). Length hacking in RLHF runs (Singhal et al. 2023, "A Long
    Way to Go") moved length by 50 % to 3x while the reward rose; healthy GRPO math runs
    drift by tens of percent."""
    min_correlation: float = Field(default=0.8, gt=0, le=1)
    """The Pearson correlation of length with the total reward over the steps so far. 0.8:
    a reward that follows length this closely is explained by it."""
    min_steps: int = Field(default=4, ge=3)
    """Steps needed before a correlation means anything."""


class GroupCollapse(StrictModel):
    """Within-group reward variance collapsing: every completion of a group scores alike,
    its advantage is zero and the step teaches nothing."""

    policy: Policy = "hold"
    """warn, hold or stop (see the section)."""
    max_fraction: float = Field(default=0.9, gt=0, le=1)
    """The fraction of groups whose completions all score alike, at or above which a step
    counts as collapsed. 0.9: runs that still learn show 0.3 to 0.75 (TRL's
    ``frac_reward_zero_std`` in published GRPO logs); DAPO's dynamic sampling exists
    because near 1 the gradient vanishes."""
    for_steps: int = Field(default=2, ge=1)
    """Consecutive collapsed steps before it fires. 2: one collapsed step happens by chance
    with small groups; two in a row with a constant reward always."""


class Runaway(StrictModel):
    """A training statistic (KL to the reference, the gradient norm) running away."""

    policy: Policy = "hold"
    """warn, hold or stop (see the section)."""
    factor: float = Field(default=10.0, gt=1)
    """How many times its early median the value must reach. 10: published GRPO/PPO KL and
    grad-norm curves wander within a few times their early level; a tenfold jump is the
    policy leaving the reference (or a loss spike), not drift."""
    floor: float = Field(default=0.0, ge=0)
    """Below this the value never counts as runaway (an early median near zero makes any
    later value a large multiple of it)."""
    baseline_steps: int = Field(default=3, ge=1)
    """Early steps whose median is the baseline."""


class HeldOutGap(StrictModel):
    """The training reward rising while the held-out score does not (after evaluation)."""

    policy: Policy = "hold"
    """warn or hold (the training has ended when the held-out score exists: stop acts as
    hold)."""
    min_train_rise: float = Field(default=0.1, gt=0)
    """How much the training reward's latest steps must exceed its first steps (mean over
    ``window``). 0.1: a tenth of the usual 0..1 scale."""
    max_heldout_gain: float = 0.0
    """The held-out gain over the base model at or below which the rise is suspect (0.0:
    no gain at all)."""
    window: int = Field(default=3, ge=1)
    """Steps averaged at each end of the training reward."""


class HealthSection(StrictModel):
    """The training sentinel's policy per detector (every detector always runs)."""

    reward_dominance: RewardDominance = RewardDominance()
    """One reward function rising while every other falls."""
    length_drift: LengthDrift = LengthDrift()
    """Completion length moving with the reward."""
    group_collapse: GroupCollapse = GroupCollapse()
    """The fraction of GRPO groups whose completions all score alike."""
    kl_runaway: Runaway = Runaway(floor=0.05)
    """KL to the reference running away (floor 0.05: below it a GRPO run with beta 0.04 is
    still near its reference whatever the ratio)."""
    grad_norm_runaway: Runaway = Runaway(floor=1.0)
    """The gradient norm running away (floor 1.0: at or below a usual clipping norm)."""
    heldout_gap: HeldOutGap = HeldOutGap()
    """The training reward rising while the held-out score does not."""

    def policy_of(self, detector: str) -> Policy:
        return getattr(self, detector).policy
