"""Metric streams for the training-health detectors: clean GRPO runs and runs that hack.

Each stream is a ``summarize_run`` steps list (flows/runpage/metrics.py) with Tunix's tags,
made from a seed so a test or the benchmark sees the same numbers every time. The shapes
follow what published GRPO logs show: a correctness reward rising slowly with step-to-step
noise, a format reward saturating early, completion length wandering within tens of percent,
KL growing from near zero to a few hundredths, a gradient norm of a few units. Each hack
starts at ``onset`` and has the face its detector is built for; ``ONSET`` is where the
benchmark reads the lag from. The rehearsal's own recorded stream is in
tests/golden/health/rehearsal-own-reward.json.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "health"
STEPS, ONSET = 60, 30
Stream = list[dict[str, Any]]


def recorded(name: str) -> Stream:
    steps: Stream = json.loads((GOLDEN / f"{name}.json").read_text())["steps"]
    return steps


def clean(seed: int, steps: int = STEPS) -> Stream:
    """A healthy two-function run: correctness rises from ~0.2 toward ~0.6 with noise, format
    saturates near 1, length wanders +-15 %, KL and grad norm stay within a few times their
    start, groups vary (min below max; about a third of groups score alike)."""
    rng = random.Random(seed)
    out: Stream = []
    for step in range(steps):
        progress = step / max(steps - 1, 1)
        correct = min(1.0, max(0.0, 0.2 + 0.4 * progress + rng.gauss(0, 0.05)))
        fmt = min(1.0, max(0.0, 1.0 - 0.6 * math.exp(-step / 4) + rng.gauss(0, 0.03)))
        total = correct + fmt
        spread = 0.3 + rng.random() * 0.4
        out.append({
            "step": step,
            "rewards/train/correctness": correct, "rewards/train/format": fmt,
            "rewards/train/mean": total, "rewards/train/min": total - spread,
            "rewards/train/max": total + spread,
            "completions/train/mean_length": 200 * (1 + 0.15 * math.sin(step / 7 + seed))
            + rng.gauss(0, 8),
            "actor/train/kl": 0.002 + 0.02 * progress + abs(rng.gauss(0, 0.002)),
            "actor/train/grad_norm": 1.5 + rng.random() * 1.5,
            "groups/train/frac_reward_zero_std": 0.25 + rng.random() * 0.3,
        })
    return out


def dominance_hack(seed: int, onset: int = ONSET) -> Stream:
    """From ``onset`` the format reward is gamed to its top while correctness collapses."""
    out = clean(seed)
    for row in out[onset:]:
        k = min(1.0, (row["step"] - onset + 1) / 6)
        row["rewards/train/format"] = 1.0 + 0.8 * k
        row["rewards/train/correctness"] = max(0.0, row["rewards/train/correctness"] - 0.45 * k)
        row["rewards/train/mean"] = row["rewards/train/format"] + row["rewards/train/correctness"]
    return out


def length_hack(seed: int, onset: int = ONSET) -> Stream:
    """From ``onset`` completions grow (to 3x) and the reward follows the length."""
    out = clean(seed)
    for row in out[onset:]:
        k = min(1.0, (row["step"] - onset + 1) / 10)
        row["completions/train/mean_length"] *= 1 + 2 * k
        row["rewards/train/mean"] += 1.2 * k
    return out


def collapse(seed: int, onset: int = ONSET, logged: bool = False) -> Stream:
    """From ``onset`` every group scores alike (a constant reward, or one always maxed): the
    batch's min equals its max; with ``logged`` the fraction is logged instead."""
    out = clean(seed)
    for row in out[onset:]:
        if logged:
            row["groups/train/frac_reward_zero_std"] = 0.95
        else:
            row.pop("groups/train/frac_reward_zero_std")
            row["rewards/train/min"] = row["rewards/train/max"] = row["rewards/train/mean"]
    if not logged:
        for row in out:
            row.pop("groups/train/frac_reward_zero_std", None)
    return out


def kl_blowup(seed: int, onset: int = ONSET) -> Stream:
    """From ``onset`` the KL to the reference climbs to 40x its start."""
    out = clean(seed)
    for row in out[onset:]:
        row["actor/train/kl"] *= 1 + 3 * (row["step"] - onset + 1)
    return out


def grad_spike(seed: int, onset: int = ONSET) -> Stream:
    """From ``onset`` the gradient norm grows tenfold and more (a loss spike)."""
    out = clean(seed)
    for row in out[onset:]:
        row["actor/train/grad_norm"] *= 1 + 4 * (row["step"] - onset + 1)
    return out


def rising(seed: int) -> Stream:
    """A clean run whose training reward rises: the held-out detector's input, judged with a
    held-out gain of zero (hacked) or of a real one (clean)."""
    return clean(seed)


# per detector: the hacked stream that should fire it, and the held-out gain it is judged with
HACKS: dict[str, tuple[Callable[[int], Stream], float | None]] = {
    "reward_dominance": (dominance_hack, None),
    "length_drift": (length_hack, None),
    "group_collapse": (collapse, None),
    "kl_runaway": (kl_blowup, None),
    "grad_norm_runaway": (grad_spike, None),
    "heldout_gap": (rising, 0.0),
}
CLEAN_HELDOUT_GAIN = 0.05  # a clean run's held-out gain over its base
