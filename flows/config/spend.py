"""The spend cap (``gke.max_usd_per_run``, ``gke.max_usd_per_stage``): what a run may cost.

Why a cap beside the time budgets: a budget in seconds does not say what the seconds cost, and
the first run on a new project is exactly where nobody knows yet how long anything takes. The
watch charges the chip-hours the stage holds at the mode's price as it goes
(flows/backends/gke/watch/spend.py) and stops the stage when the cap is crossed.

A cap below the plan's own estimate would stop every run that goes as planned, so it is
refused when the profile loads. The estimate here is the plan's (held chip-hours of
flows/backends/gke/infra/cost.py, the same rule, kept equal by a test): the config layer
cannot import a backend.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.config.eval_hours import stage_hours, tpu_stages
from flows.config.gke_section import gke_section
from flows.config.limits import limits
from flows.config.timeline import TrainTimeline

if TYPE_CHECKING:
    from flows.config.gke import GkeSection
    from flows.config.profile import Profile

SpendStage = Literal["convert", "train", "export", "evaluate"]
# After a stage's last TPU pod ends its nodes stay, billed, until the cluster autoscaler
# removes them: once unneeded for --scale-down-unneeded-time, and not within
# --scale-down-delay-after-add of any scale-up in the cluster, 10 minutes each by default
# (kubernetes/autoscaler cluster-autoscaler/main.go flags; core/static_autoscaler.go RunOnce
# tracks the unneeded nodes every loop and skips the removal while lastScaleUpTime +
# ScaleDownDelayAfterAdd is after now). The CPU pool scales up for the next stage right
# after training, so the delay runs from then; a scale-up just before the unneeded time is
# up holds the nodes for both: the tail is at most their sum, and that bound is what the
# plan and the cap count (the meter charges what the nodes really live). GKE runs the
# autoscaler for the cluster and does not expose the flags; its default "balanced" profile
# keeps the upstream behaviour (GKE "About cluster autoscaling", autoscaling profiles).
# The scan interval (10 s) and the VM's deletion add a little more; not counted.
SCALE_DOWN_UNNEEDED_S = 600.0
SCALE_DOWN_DELAY_AFTER_ADD_S = 600.0
SCALE_DOWN_TAIL_S = SCALE_DOWN_UNNEEDED_S + SCALE_DOWN_DELAY_AFTER_ADD_S
# the stages that hold the slice whatever the capacity mode: their programs run on the TPUs
ON_SLICE = frozenset({"train", "evaluate"})


class GkeSpend(BaseModel):
    """USD caps on the TPU time a run (and optionally each stage) may hold; None: no cap."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    max_usd_per_run: float | None = Field(None, gt=0)
    """Stop a run whose TPU time would cost more (the budget category)."""
    max_usd_per_stage: dict[SpendStage, float] = Field(default_factory=dict)
    """The same cap per TPU stage."""
    # the cap must stand this fraction above the estimate (0.2: 20 %), so a run a little
    # slower than planned is not stopped; unset: the estimate itself is the floor
    spend_margin: float | None = Field(None, ge=0)
    """How far above the estimate max_usd_per_run must be (0.2: 20 %)."""
    train_timeline: TrainTimeline | None = None
    """Training's phases in minutes; when given, the training estimate is its billed phases."""


def stage_chips_held(gke: GkeSection, stage: str) -> int:
    """Chips billed while ``stage`` runs: the whole static pool on a reservation; in a mode
    that scales from zero only what the stage's own jobs bring up (none for CPU-pool work)."""
    if not gke.scales_from_zero:
        return gke.total_chips
    on_tpu = stage in ON_SLICE or gke.conversion_placement == "tpu-hosts"
    return gke.total_chips if on_tpu else 0


def scale_down_tail_h(gke: GkeSection, stage: str) -> float:
    """Hours the stage's TPU nodes are billed after its pods end, at most: the autoscaler's
    scale-down delays in a mode that scales from zero; none on a static pool (counted in its
    wall time) or for a stage that brings no TPU node up."""
    if not gke.scales_from_zero or not stage_chips_held(gke, stage):
        return 0.0
    return SCALE_DOWN_TAIL_S / 3600.0


def billed_stage_hours(profile: Profile, stage: str) -> float:
    """The stage's estimated hours plus the scale-down tail GCP bills after them."""
    gke = gke_section(profile)
    return stage_hours(profile, stage) + scale_down_tail_h(gke, stage)


def estimated_stage_usd(profile: Profile, stage: str) -> float:
    """At the price of the chain's priciest mode (gke.capacity): a run may be served by any
    mode of it, so a cap must admit the dearest (one mode: its price)."""
    gke = gke_section(profile)
    return billed_stage_hours(profile, stage) * stage_chips_held(gke, stage) * \
        gke.mode_usd_per_chip_hour(gke.priciest_mode)


def estimated_run_usd(profile: Profile) -> float:
    """Every stage that holds TPU time in this profile (evaluate too, when it runs), at the
    chain's priciest mode."""
    return sum(estimated_stage_usd(profile, stage) for stage in tpu_stages(profile))


def stage_estimates(profile: Profile) -> dict[str, tuple[float, float]]:
    """Each TPU stage's (usd, chip-hours) as the plan estimates them, at the chain's priciest
    mode: what the spend ledger records before the run's first TPU stage. A profile without
    a gke section spends nothing it pays for (the rehearsal): none."""
    if profile.gke is None:
        return {}
    gke = gke_section(profile)
    return {stage: (estimated_stage_usd(profile, stage),
                    billed_stage_hours(profile, stage) * stage_chips_held(gke, stage))
            for stage in tpu_stages(profile)}


def cents_up(usd: float) -> float:
    """A figure a fix names, rounded up to the cent: rounded to the nearest, a cap set to it
    can fall a fraction of a cent below the estimate and be refused again."""
    up = math.ceil(round(usd * 100, 6)) / 100  # 10.8 * 100 is 1080.0000000000002
    return up if up >= usd - 1e-9 else up + 0.01


@limits({"gke.max_usd_per_run": "at least the plan's estimate, plus gke.spend_margin",
         "gke.max_usd_per_stage": "each cap above 0 and at least its stage's estimate; only "
                                  "stages the profile runs"})
def spend_issues(profile: Profile) -> list[Issue]:
    """A cap below the estimate it guards, or a stage cap above the run's: refused, with the
    figures and both ways out (raise the cap, or fix the estimate)."""
    gke = profile.gke
    if gke is None:
        return []
    issues = []
    run_cap, estimate = gke.max_usd_per_run, estimated_run_usd(profile)
    # compared a hair below, so a cap set to the figure a fix names (cents_up: 10.8 * 1.2 is
    # 10.799999999999999, and 10.8 * 100 is 1080.0000000000002) is never refused again
    floor = estimate * (1 + (gke.spend_margin or 0.0))
    if run_cap is not None and estimate - 1e-9 <= run_cap < floor - 1e-9:
        issues.append(Issue("gke.max_usd_per_run", f"${run_cap:,.2f} is less than "
                            f"gke.spend_margin {gke.spend_margin:.0%} above the plan's estimate "
                            f"of ${estimate:,.2f}", f"set gke.max_usd_per_run to at least "
                            f"{cents_up(floor):.2f}, or lower gke.spend_margin", Failure.CONFIG_SPEND_CAP))
    if run_cap is not None and run_cap < estimate - 1e-9:
        issues.append(Issue("gke.max_usd_per_run", f"${run_cap:,.2f} is below the plan's "
                            f"estimate of ${estimate:,.2f} (capacity {gke.priciest_mode}, "
                            f"{gke.total_chips} chips at "
                            f"${gke.mode_usd_per_chip_hour(gke.priciest_mode):.2f}/chip-h, "
                            "gke.estimated_hours): every run would be stopped",
                            f"set gke.max_usd_per_run to at least {cents_up(floor):.2f}"
                            + (f" (the estimate plus gke.spend_margin {gke.spend_margin:.0%})"
                               if floor > estimate else "")
                            + ", or lower gke.estimated_hours if the estimate is wrong",
                            Failure.CONFIG_SPEND_CAP))
    for stage, cap in gke.max_usd_per_stage.items():
        if stage not in tpu_stages(profile):
            issues.append(Issue(f"gke.max_usd_per_stage.{stage}", f"caps {stage}, which this "
                                "profile does not run (it has no eval section)",
                                "remove the key, or add the eval section", Failure.CONFIG_SPEND_CAP))
            continue
        stage_estimate = estimated_stage_usd(profile, stage)
        if cap <= 0:
            issues.append(Issue(f"gke.max_usd_per_stage.{stage}", f"{cap:g} is not positive",
                                "give a cap in USD above 0, or remove the key",
                                Failure.CONFIG_SPEND_CAP))
        elif cap < stage_estimate - 1e-9:
            issues.append(Issue(f"gke.max_usd_per_stage.{stage}", f"${cap:,.2f} is below the "
                                f"plan's estimate for {stage} of ${stage_estimate:,.2f}",
                                f"set gke.max_usd_per_stage.{stage} to at least "
                                f"{cents_up(stage_estimate):.2f}, or lower "
                                f"gke.estimated_hours.{stage}", Failure.CONFIG_SPEND_CAP))
    return issues
