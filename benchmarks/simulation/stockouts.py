"""A sampled calendar of stockouts and the time a capacity policy takes to get its slice on
it: the seeded simulation that benchmarks/simulation/policy_month.py runs over months. Pure.

The model is flows/backends/gke/infra/capacity_wait.py's (each mode and zone alternates in
and out of stock, out-of-stock spells exponential of mean ``out_mean_h``); this module draws
one calendar of it. A zone back in stock is seen at the cluster autoscaler's next retry of
its node group: kubernetes/autoscaler cluster-autoscaler/clusterstate backs a failed group
off 5 min doubling to 30 min (--initial-node-group-backoff-duration /
--max-node-group-backoff-duration).
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from flows.backends.gke.infra.capacity_wait import ModeStockouts, Step

BACKOFF_MIN_H, BACKOFF_MAX_H = 5 / 60, 30 / 60  # the autoscaler's node-group backoff


def in_mean_h(st: ModeStockouts) -> float:
    """Mean in-stock spell that gives ``out_fraction``: D (1 - p) / p."""
    if st.out_fraction <= 0:
        return math.inf
    return st.out_mean_h * (1 - st.out_fraction) / st.out_fraction


@dataclass
class Stockouts:
    """A sampled calendar of out-of-stock spells per (mode, zone), over ``horizon_h``."""

    model: dict[str, ModeStockouts]
    horizon_h: float
    seed: str  # each (mode, zone) draws from its own stream: policies compared on one calendar
    spells: dict[tuple[str, str], list[tuple[float, float]]] = field(default_factory=dict)

    def _sample(self, mode: str, zone: str) -> list[tuple[float, float]]:
        st, out = self.model[mode], []
        if st.out_fraction <= 0:
            return out
        rng = random.Random(f"{self.seed}-{mode}-{zone}")
        t = 0.0
        down = rng.random() < st.out_fraction  # the stationary state at time 0
        while t < self.horizon_h:
            length = rng.expovariate(1 / (st.out_mean_h if down else in_mean_h(st)))
            if down:
                out.append((t, t + length))
            t += length
            down = not down
        return out

    def back_at(self, mode: str, zone: str, t: float) -> float:
        """The first time at or after ``t`` the zone has a slice in ``mode``."""
        key = (mode, zone)
        if key not in self.spells:
            self.spells[key] = self._sample(mode, zone)
        spells = self.spells[key]
        at = bisect.bisect_right(spells, (t, math.inf)) - 1  # the last spell starting by t
        if at >= 0 and spells[at][0] <= t < spells[at][1]:
            return spells[at][1]
        return t


def _seen_at(asked: float, back: float) -> float:
    """When the autoscaler's retries (backoff 5 min doubling to 30) first find the zone back:
    retries at 0, 5, 15, 35, 65 min after the ask, then every 30 min."""
    if back <= asked:
        return asked
    t, wait = asked, BACKOFF_MIN_H
    while wait < BACKOFF_MAX_H:  # the doubling steps
        t += wait
        if t >= back:
            return t
        wait *= 2
    return t + math.ceil((back - t) / BACKOFF_MAX_H) * BACKOFF_MAX_H


def time_to_slice(steps: Sequence[Step], stock: Stockouts, t0: float,
                  max_rounds: int = 50) -> tuple[float, str, str]:
    """(hours from ``t0`` to the slice, the mode and zone that served): each step in turn for
    its budget, over again from the first when the last misses (the stage's retry)."""
    t = t0
    for _ in range(max_rounds):
        for step in steps:
            found = [(_seen_at(t, stock.back_at(step.mode, z, t)), i, z)
                     for i, z in enumerate(step.zones)]  # a tie goes to the preferred zone
            got, _, zone = min(found)
            if got - t <= step.budget_h or math.isinf(step.budget_h):
                return got - t0, step.mode, zone
            t += step.budget_h
    return t - t0, steps[-1].mode, steps[-1].zones[0]
