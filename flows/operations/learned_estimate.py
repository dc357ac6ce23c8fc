"""The training estimate `tpurl plan` prints: measured where the profile has run before, the
profile's guess where it has not, and always saying which (pure).

Measured means: the profile's last runs on the same slice and step size (chips and
completions per step) that trained and measured their steps (flows/core/throughput.py).
Their median step time gives the steps' hours; their billed start-up is what the train
stage held beyond its steps (its chip-hours over the chips, less the steps it logged times
the step time), the median of those. The spend cap is not moved by it: the cap is built from
the profile's stated hours (gke.estimated_hours.train or gke.train_timeline, checked when
the profile loads), and the plan names the figure to put there.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from flows.core.throughput import COMPLETION_LENGTH
from flows.run.result import PipelineResult

RUNS_LEARNT_FROM = 3


@dataclass(frozen=True)
class TrainEstimate:
    hours: float  # billed hours training holds the slice
    usd: float
    measured: bool
    runs: int = 0  # results it was learnt from
    step_s: float = 0.0
    startup_h: float = 0.0


def _measured_run(result: PipelineResult, chips: int,
                  completions: int) -> tuple[float, float] | None:
    """(step seconds, billed start-up hours) of one earlier run, or None when it does not
    describe this plan: another slice or step size, no measured step, no training held."""
    t = result.throughput
    if not t or t.get("cpu") or t.get("chips") != chips \
            or t.get("completions_per_step") != completions:
        return None
    step_s = t.get("step_s")
    train = next((s for s in result.stages if s.stage == "train" and s.status == "ran"), None)
    if not isinstance(step_s, int | float) or step_s <= 0 or train is None \
            or train.chip_hours <= 0:
        return None
    steps = sum(1 for s in result.metrics.get("steps", []) if s.get(COMPLETION_LENGTH)
                is not None)
    held_h = train.chip_hours / chips
    return float(step_s), max(held_h - steps * float(step_s) / 3600.0, 0.0)


def train_estimate(guess_hours: float, planned_steps: int | None, chips: int,
                   usd_per_chip_hour: float, completions: int,
                   results: list[PipelineResult]) -> TrainEstimate:
    """The measured estimate from the newest matching results, else the guess."""
    found = [m for r in results if (m := _measured_run(r, chips, completions))]
    found = found[:RUNS_LEARNT_FROM]
    if not found or not planned_steps:
        return TrainEstimate(guess_hours, round(guess_hours * chips * usd_per_chip_hour, 2),
                             measured=False)
    step_s = statistics.median(m[0] for m in found)
    startup_h = statistics.median(m[1] for m in found)
    hours = startup_h + planned_steps * step_s / 3600.0
    return TrainEstimate(round(hours, 3), round(hours * chips * usd_per_chip_hour, 2), True,
                         len(found), round(step_s, 2), round(startup_h, 3))


def estimate_lines(estimate: TrainEstimate, planned_steps: int | None,
                   guess_hours: float, unread: str = "") -> list[str]:
    """What the plan prints about training's hours and dollars: which figure it is."""
    if estimate.measured:
        return [f"training estimate: MEASURED from the last {estimate.runs} run(s) of this "
                f"profile on the same slice: {estimate.step_s:g} s per step and "
                f"{estimate.startup_h * 60:.1f} min billed start-up, so {planned_steps} "
                f"step(s) hold the slice {estimate.hours:g} h (${estimate.usd:,.2f}); the "
                f"profile's guess was {guess_hours:g} h, and the spend cap follows the guess: "
                f"set gke.estimated_hours.train (or gke.train_timeline's phases) to "
                f"{estimate.hours:g} h to bring it in line"]
    why = unread or "no run of this profile on this slice has measured its steps yet"
    return [f"training estimate: GUESS, the profile's gke.estimated_hours.train = "
            f"{guess_hours:g} h (${estimate.usd:,.2f}); {why}"]


def planned_rate_line(hours: float, steps: int | None, completions: int,
                      completion_tokens: int, chips: int, usd_per_chip_hour: float) -> str:
    """The tokens/s per chip and $ per million tokens an estimate implies, were every
    completion as long as the profile allows (max_target_length less the prompt's
    max_prefill_predict_length): an upper bound on tokens, so a lower bound on $ per million.
    Start-up is inside the hours, so the figure is the whole training's, not the steps'."""
    if not steps or hours <= 0 or chips <= 0 or completion_tokens <= 0:
        return ""
    tokens = steps * completions * completion_tokens
    rate = tokens / (hours * 3600.0) / chips
    usd = hours * chips * usd_per_chip_hour / tokens * 1e6
    return (f"  which is at most {rate:,.0f} generated tokens/s per chip and at least "
            f"${usd:,.2f} per million tokens ({steps} steps x {completions} completions x "
            f"{completion_tokens} tokens, every completion at its longest, start-up included)")
