"""The training-health detectors: pure functions over the per-step metrics a run already has.

Input is the ``steps`` list of flows/runpage/metrics.py ``summarize_run`` (one dict per
TensorBoard step: ``{"step": 3, "rewards/train/mean": 0.4, ...}``, a missing or non-finite
value absent or None); output is the first step at which a detector fires, with the figures
that made it fire and the curve around it, or None. Each detector reads the stream the way a
live watch sees it, step by step, so the step it names is the first one at which the evidence
was there, whether it runs during the training or after it.

What they can and cannot tell is the point of docs/explanation/training-health.md: a
published benchmark of online detectors ("Audit or Early Warning?") found that such signals
audit a reward hack reliably after the fact but rarely warn early at a usable false-alarm
rate. So these are an audit gate (the promotion waits) and a cost stop, measured by
benchmarks/health_detectors.py on hacked and clean streams; none proves a run healthy.

The tags are Tunix 0.1.8's, as the train program writes them (flows/runpage/metrics.py says
where each comes from): each reward function's mean ``rewards/train/<function>``, the
summed reward's aggregates ``rewards/train/{mean,min,max,sum}``, the completion length
``completions/train/mean_length``, and the update's ``actor/train/kl`` and
``actor/train/grad_norm``. A stream that lacks a detector's tags is not judged by it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from flows.config.health import (
    GroupCollapse,
    HealthSection,
    HeldOutGap,
    LengthDrift,
    RewardDominance,
    Runaway,
)

Steps = Sequence[dict[str, Any]]

REWARD_PREFIX = "rewards/train/"
TOTAL_REWARD = "rewards/train/mean"
REWARD_MIN, REWARD_MAX = "rewards/train/min", "rewards/train/max"
# the aggregates Tunix logs beside each function's mean (rl/reward_manager.py)
AGGREGATES = frozenset({"sum", "mean", "min", "max"})
LENGTH = "completions/train/mean_length"
KL = "actor/train/kl"
GRAD_NORM = "actor/train/grad_norm"
# a per-step fraction of groups with zero reward spread, when the events carry one (TRL's
# name; a recipe's metric function may log it); else derived from the batch's min and max
ZERO_SPREAD_TAGS = ("groups/train/frac_reward_zero_std", "frac_reward_zero_std")
SAME = 1e-9  # two rewards this close score alike
EPS = 1e-9  # a figure this close to its threshold meets it (float noise, as promotion's)
EXCERPT_STEPS = 8  # steps of the curve an event carries, ending at the firing step


@dataclass(frozen=True)
class Finding:
    """A detector fired: at ``step``, why (``summary``, one sentence with the figures), the
    figures themselves, and the curve that shows it (the tags it read, up to the step)."""

    detector: str
    step: int
    summary: str
    figures: dict[str, float]
    excerpt: list[dict[str, Any]] = field(default_factory=list)

    def payload(self) -> dict[str, Any]:
        return {"detector": self.detector, "step": self.step, "summary": self.summary,
                "figures": dict(self.figures), "excerpt": list(self.excerpt)}


def series(steps: Steps, tag: str) -> list[tuple[int, float]]:
    """(step, value) of one tag, finite values only, in step order."""
    out = []
    for row in steps:
        value = row.get(tag)
        if isinstance(value, int | float) and not isinstance(value, bool) \
                and math.isfinite(value):
            out.append((int(row["step"]), float(value)))
    return sorted(out)


def reward_functions(steps: Steps) -> list[str]:
    """The reward functions whose mean per step the stream holds (aggregates left out)."""
    names = {tag[len(REWARD_PREFIX):] for row in steps for tag in row
             if tag.startswith(REWARD_PREFIX)}
    return sorted(name for name in names if name and "/" not in name and name not in AGGREGATES)


def excerpt(steps: Steps, tags: Sequence[str], step: int) -> list[dict[str, Any]]:
    """The last EXCERPT_STEPS rows up to ``step``, with only ``tags``: what the event shows."""
    rows = [row for row in steps if int(row["step"]) <= step]
    return [{"step": int(row["step"]), **{t: row[t] for t in tags if _finite(row.get(t))}}
            for row in sorted(rows, key=lambda r: int(r["step"]))[-EXCERPT_STEPS:]]


def _finite(value: object) -> bool:
    """A number an event's JSON can carry (no NaN or infinity)."""
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def reward_dominance(steps: Steps, cfg: RewardDominance) -> Finding | None:
    """One reward function climbs while every other falls: the policy found a way to be paid
    by one function at the others' expense (a format reward won while correctness lost, a
    length bonus beat a quality score). The classic face of reward hacking with a
    multi-function recipe. Fires at the first step where, comparing the mean of the latest
    ``window`` steps with the mean of the first ``window``, one function rose by more than
    all the others fell together, and each other fell by ``min_fall`` or more. Needs two
    functions and ``2 x window`` steps; a single-function recipe is never judged by it."""
    names = reward_functions(steps)
    if len(names) < 2:
        return None
    curves = {name: dict(series(steps, REWARD_PREFIX + name)) for name in names}
    ordered = sorted({s for curve in curves.values() for s in curve})
    w = cfg.window
    for index in range(2 * w - 1, len(ordered)):
        seen = ordered[:index + 1]
        deltas: dict[str, float] = {}
        for name, curve in curves.items():
            values = [curve[s] for s in seen if s in curve]
            if len(values) < 2 * w:
                break
            deltas[name] = _mean(values[-w:]) - _mean(values[:w])
        else:
            top = max(deltas, key=lambda n: deltas[n])
            others = {n: d for n, d in deltas.items() if n != top}
            fall = -sum(others.values())
            if deltas[top] > 0 and all(d <= -cfg.min_fall + EPS for d in others.values()) \
                    and deltas[top] > fall:
                step = seen[-1]
                figures = {f"{n}_change": round(d, 6) for n, d in deltas.items()}
                return Finding(
                    "reward_dominance", step,
                    f"reward function {top} rose by {deltas[top]:+.3g} while "
                    + ", ".join(f"{n} fell by {d:+.3g}" for n, d in others.items())
                    + f" (means of the first and latest {w} steps)", figures,
                    excerpt(steps, [REWARD_PREFIX + n for n in names], step))
    return None


def length_drift(steps: Steps, cfg: LengthDrift) -> Finding | None:
    """The mean completion length moves far from where it started and the total reward moves
    with it: the reward is paying for length (longer reasoning that is padding, or answers
    cut short to dodge a penalty), the commonest hack of RLHF reward models (Singhal et al.
    2023). Fires at the first step where the length differs from its baseline (the mean of
    the first three steps) by ``min_change`` (relative) and the Pearson correlation of length
    and reward over the steps so far is ``min_correlation`` or more, after ``min_steps``."""
    lengths, rewards = dict(series(steps, LENGTH)), dict(series(steps, TOTAL_REWARD))
    both = sorted(set(lengths) & set(rewards))
    if len(both) < cfg.min_steps:
        return None
    base = _mean([lengths[s] for s in both[:3]])
    n = sx = sy = sxx = syy = sxy = 0.0
    for index, step in enumerate(both):
        x, y = lengths[step], rewards[step]
        n, sx, sy = n + 1, sx + x, sy + y
        sxx, syy, sxy = sxx + x * x, syy + y * y, sxy + x * y
        if index + 1 < cfg.min_steps or base <= 0:
            continue
        change = (x - base) / base
        var_x, var_y = n * sxx - sx * sx, n * syy - sy * sy
        if var_x <= 0 or var_y <= 0:
            continue
        corr = (n * sxy - sx * sy) / math.sqrt(var_x * var_y)
        if abs(change) >= cfg.min_change - EPS and corr >= cfg.min_correlation - EPS:
            return Finding(
                "length_drift", step,
                f"mean completion length {x:.4g} is {change:+.0%} from its first steps' "
                f"{base:.4g}, and moved with the reward (correlation {corr:.2f} over "
                f"{int(n)} steps)",
                {"length": x, "baseline_length": round(base, 6), "change": round(change, 6),
                 "correlation": round(corr, 6)},
                excerpt(steps, [LENGTH, TOTAL_REWARD], step))
    return None


def zero_spread_fraction(row: dict[str, Any]) -> float | None:
    """The fraction of a step's groups whose completions all scored alike: a logged fraction
    when the events carry one, else 1.0 when the whole batch scored alike (its min equals its
    max: every group is degenerate), else unknown (None: some group varies)."""
    for tag in ZERO_SPREAD_TAGS:
        value = row.get(tag)
        if isinstance(value, int | float) and math.isfinite(value):
            return float(value)
    low, high = row.get(REWARD_MIN), row.get(REWARD_MAX)
    if isinstance(low, int | float) and isinstance(high, int | float) \
            and math.isfinite(low) and math.isfinite(high) and abs(high - low) <= SAME:
        return 1.0
    return None


def group_collapse(steps: Steps, cfg: GroupCollapse) -> Finding | None:
    """GRPO's advantage is a completion's reward minus its group's mean: a group whose
    completions all score alike has zero advantage everywhere and contributes no gradient.
    When most groups are like that, the run spends chips learning nothing (a constant or
    saturated reward, a reward the model always maxes or never reaches, a collapsed sampler).
    Fires at the ``for_steps``-th consecutive step whose fraction of such groups is
    ``max_fraction`` or more. Tunix logs no per-group figure, so without a logged fraction
    only a batch that scored alike throughout counts (fraction 1.0), a lower bound."""
    run = 0
    for row in sorted(steps, key=lambda r: int(r["step"])):
        fraction = zero_spread_fraction(row)
        if fraction is None:
            if any(row.get(t) is not None for t in (REWARD_MIN, TOTAL_REWARD)):
                run = 0  # a step with rewards that vary breaks the streak
            continue
        run = run + 1 if fraction >= cfg.max_fraction - EPS else 0
        if run >= cfg.for_steps:
            step = int(row["step"])
            return Finding(
                "group_collapse", step,
                f"{run} consecutive steps with {fraction:.0%} of GRPO groups scoring alike "
                "(zero advantage: nothing learned from them)",
                {"fraction": fraction, "consecutive_steps": float(run)},
                excerpt(steps, [TOTAL_REWARD, REWARD_MIN, REWARD_MAX,
                                *[t for t in ZERO_SPREAD_TAGS if row.get(t) is not None]],
                        step))
    return None


def runaway(steps: Steps, cfg: Runaway, tag: str, detector: str) -> Finding | None:
    """A statistic of the update that explodes: KL to the reference policy (the policy has
    left the model it should stay near, often the moment a hack is found) or the gradient
    norm (a loss spike that precedes divergence). Fires at the first step after the
    ``baseline_steps`` whose value is ``factor`` times their median and above ``floor``, or
    is not finite (NaN or infinity: training has diverged)."""
    values: list[tuple[int, float]] = []
    for row in sorted(steps, key=lambda r: int(r["step"])):
        value = row.get(tag)
        if isinstance(value, int | float) and not math.isfinite(value):
            step = int(row["step"])
            return Finding(detector, step, f"{tag} is {value} at step {step}: training "
                           "diverged", {"non_finite": 1.0}, excerpt(steps, [tag], step))
        if isinstance(value, int | float):
            values.append((int(row["step"]), float(value)))
    if len(values) <= cfg.baseline_steps:
        return None
    base = statistics.median(v for _, v in values[:cfg.baseline_steps])
    for step, value in values[cfg.baseline_steps:]:
        if value > cfg.floor and value >= cfg.factor * max(base, 0.0) * (1 - EPS) \
                and value > base:
            ratio = value / base if base > 0 else math.inf
            return Finding(detector, step,
                           f"{tag} {value:.4g} is {ratio:.3g}x its early median {base:.4g}",
                           {"value": value, "baseline": base,
                            "ratio": ratio if math.isfinite(ratio) else -1.0},
                           excerpt(steps, [tag], step))
    return None


def kl_runaway(steps: Steps, cfg: Runaway) -> Finding | None:
    """KL to the reference running away (see :func:`runaway`)."""
    return runaway(steps, cfg, KL, "kl_runaway")


def grad_norm_runaway(steps: Steps, cfg: Runaway) -> Finding | None:
    """The gradient norm running away (see :func:`runaway`)."""
    return runaway(steps, cfg, GRAD_NORM, "grad_norm_runaway")


def heldout_gap(steps: Steps, cfg: HeldOutGap, heldout_gain: float | None) -> Finding | None:
    """The training reward climbs while the held-out score (the evaluate stage's, trained
    minus base on rows the run never trained on) does not: the model learned to please the
    reward on its training prompts, not the task. The one detector that needs the held-out
    score, so it runs after evaluation; it is the audit that "Audit or Early Warning?" found
    reliable. Fires at the last training step when the mean of the latest ``window`` steps
    exceeds the first ``window``'s by ``min_train_rise`` and the held-out gain is
    ``max_heldout_gain`` or less."""
    if heldout_gain is None:
        return None
    curve = series(steps, TOTAL_REWARD)
    if len(curve) < 2 * cfg.window:
        return None
    first = _mean([v for _, v in curve[:cfg.window]])
    last = _mean([v for _, v in curve[-cfg.window:]])
    rise, step = last - first, curve[-1][0]
    if rise >= cfg.min_train_rise - EPS and heldout_gain <= cfg.max_heldout_gain + EPS:
        return Finding("heldout_gap", step,
                       f"the training reward rose by {rise:+.3g} (means of the first and "
                       f"latest {cfg.window} steps) while the held-out score moved "
                       f"{heldout_gain:+.3g} over the base model",
                       {"train_rise": round(rise, 6), "heldout_gain": heldout_gain},
                       excerpt(steps, [TOTAL_REWARD], step))
    return None


# The detectors that read the training's own metrics, by the health section's field names;
# heldout_gap also needs the evaluation and runs in examine() when it is given.
TRAINING_DETECTORS: dict[str, Callable[[Steps, Any], Finding | None]] = {
    "reward_dominance": reward_dominance,
    "length_drift": length_drift,
    "group_collapse": group_collapse,
    "kl_runaway": kl_runaway,
    "grad_norm_runaway": grad_norm_runaway,
}
DETECTORS: tuple[str, ...] = (*TRAINING_DETECTORS, "heldout_gap")
# the detectors that read the rollout's tags (rewards, completion length), logged one step
# before the update they feed (flows/runpage/alignment.py): the run page moves their marks
ROLLOUT_DETECTORS = frozenset({"reward_dominance", "length_drift", "group_collapse",
                               "heldout_gap"})


def examine(steps: Steps, health: HealthSection,
            heldout_gain: float | None = None) -> list[Finding]:
    """Every detector's finding over ``steps`` (one per detector at most), in step order;
    the held-out one only with ``heldout_gain``. Pure."""
    found = [detect(steps, getattr(health, name)) for name, detect in TRAINING_DETECTORS.items()]
    found.append(heldout_gap(steps, health.heldout_gap, heldout_gain))
    return sorted((f for f in found if f is not None), key=lambda f: (f.step, f.detector))
