"""Has the champion regressed? A watch's new score against a recorded one (pure).

A champion is watched again and again (every night, say). Testing each watch at a fixed
level ``alpha`` would make a false alarm on an unchanged champion near certain over enough
nights: with 5 % per watch, 2 in 5 unchanged champions are rolled back within 30 watches
(benchmarks/watch.py).
So each watch spends its own share of one error budget: the k-th watch of a champion on a
set tests at ``alpha_k = alpha * 6 / (pi^2 k^2)``. The shares sum to ``alpha`` over any
number of watches (sum of 1/k^2 is pi^2 / 6), so by the union bound the chance that an
unchanged champion is EVER declared regressed, however long it is watched, is at most
``alpha``. This is the simplest alpha-spending rule that needs no horizon (a schedule runs
without end) and no state but the watch's number; the price is power that falls slowly
with k (the threshold grows like sqrt(2 ln k)), which benchmarks/watch.py measures.

The statistic is one-sided: a drop ``reference - watched`` of the metric, divided by the
standard error of that difference, each side's error read back from its recorded 95 %
interval (half-width / 1.96: the normal interval of the mean reward, the Wilson interval of
an accuracy, flows/core/scores.py). A drop smaller than ``min_drop`` is never a regression,
however sure (a team may not want to roll back over a hair), and no drop is a hold. A drop
with no spread to estimate (both intervals a point: one sample each, or samples all equal)
decides nothing: such a watch is "inconclusive", never a regression.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

from flows.core.scores import Z95, Interval

# sum over k >= 1 of 1/k^2: the alpha-spending weights 1/(ZETA2 k^2) sum to one
ZETA2 = math.pi ** 2 / 6

Verdict = Literal["regressed", "holds", "inconclusive", "baseline"]


@dataclass(frozen=True)
class WatchDecision:
    """One watch's verdict, with every number it was reached from (the evidence)."""

    verdict: Verdict
    metric: str
    watched: float
    reference: float
    drop: float  # reference - watched: positive when the champion scores lower now
    z: float  # drop / standard error of the difference (0 when it cannot be estimated)
    threshold: float  # the z this watch had to exceed
    watch_number: int  # the k of alpha_k: this watch's number for the champion on the set
    alpha_spent: float  # alpha_k
    reason: str

    @property
    def regressed(self) -> bool:
        return self.verdict == "regressed"


def alpha_share(alpha: float, watch_number: int) -> float:
    """``alpha_k``: the share of the false-alarm budget the k-th watch may spend. Their sum
    over every k is ``alpha`` (see the module's docstring)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha: {alpha} is not between 0 and 1")
    if watch_number < 1:
        raise ValueError(f"watch_number: {watch_number} is not 1 or more")
    return alpha / (ZETA2 * watch_number * watch_number)


def z_threshold(alpha: float, watch_number: int) -> float:
    """The one-sided normal quantile the k-th watch's z must exceed."""
    return NormalDist().inv_cdf(1.0 - alpha_share(alpha, watch_number))


def standard_error(interval: Interval) -> float:
    """A recorded 95 % interval's standard error: half its width over 1.96 (0 for a point).
    Wilson intervals are asymmetric near 0 and 1; their half-width is a fair scale there."""
    return max(interval.high - interval.low, 0.0) / (2 * Z95)


def judge_watch(metric: str, reference: Interval, watched: Interval, watch_number: int,
                alpha: float, min_drop: float = 0.0) -> WatchDecision:
    """Regressed only when the drop is at least ``min_drop`` AND significant at this watch's
    share of ``alpha`` (the reference's and the watch's errors combined)."""
    threshold = z_threshold(alpha, watch_number)
    share = alpha_share(alpha, watch_number)
    drop = reference.value - watched.value
    se = math.hypot(standard_error(reference), standard_error(watched))
    z = drop / se if se > 0 else 0.0
    numbers = (f"{metric} {watched.value:.4f} [{watched.low:.4f}, {watched.high:.4f}] vs "
               f"recorded {reference.value:.4f} [{reference.low:.4f}, {reference.high:.4f}]: "
               f"drop {drop:+.4f}")
    if drop <= 1e-12 or drop < min_drop - 1e-12:  # equal within float noise: at the limit
        verdict: Verdict = "holds"
        why = f"below watch.min_drop {min_drop:g}" if drop > 1e-12 else "no drop"
    elif se <= 0:
        verdict = "inconclusive"
        why = ("no spread to estimate (both intervals are points: one reward sample each, or "
               "samples all equal), so no drop can be judged significant; raise eval.batches")
    elif z > threshold:
        verdict = "regressed"
        why = (f"z {z:.2f} > {threshold:.2f}, the threshold of watch {watch_number} "
               f"(alpha {share:.4g} of {alpha:g})")
    else:
        verdict = "holds"
        why = (f"z {z:.2f} <= {threshold:.2f}, the threshold of watch {watch_number} "
               f"(alpha {share:.4g} of {alpha:g}): not significant")
    return WatchDecision(verdict=verdict, metric=metric, watched=watched.value,
                         reference=reference.value, drop=drop, z=z, threshold=threshold,
                         watch_number=watch_number, alpha_spent=share,
                         reason=f"{numbers}; {why}")
