"""How long a slice takes to come, per capacity mode and zone: a stockout model, its closed
forms for ``tpurl plan --compare-capacity``, and a seeded simulation of a capacity policy
(a chain of modes over zones) for benchmarks/capacity_month.py. Pure.

The model: for each (mode, zone) a TPU slice of the profile's shape is in stock or out of
stock, alternating; out-of-stock spells last an exponential time of mean ``out_mean_h`` and
take ``out_fraction`` of the time in the long run; zones and modes are independent of each
other. A request in one mode over k zones is served as soon as any of its zones is in stock
(the cluster autoscaler tries every node group that fits and backs a failed one off,
kubernetes/autoscaler cluster-autoscaler/clusterstate: node-group backoff 5 min doubling to
30 min, --initial-node-group-backoff-duration / --max-node-group-backoff-duration).

The numbers are assumptions, not measurements. No public source gives TPU v6e stockout
rates: Compute Engine's capacity advice API, which scores obtainability per zone, does not
cover TPUs (cloud.google.com/compute/docs/instances/view-vm-availability, "Limitations");
issue 32 reports GKE's FailedScaleUp in a zone lasting hours; the spot availability traces
behind "Can't Be Late" (NSDI '24, github.com/skypilot-org/spot-traces, GPUs on AWS and GCP)
show unavailability in spells of hours, independent enough between zones that failing over
helps. Replace the figures with your own: the benchmark takes them as options.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from flows.backends.gke.watch.budgets import budgets_for
from flows.config.capacity import MAX_RUN_MODES
from flows.config.profile import Profile


@dataclass(frozen=True)
class ModeStockouts:
    """One mode's stockouts in one zone (the same in every zone of the region)."""

    out_fraction: float  # long-run share of time the zone has no slice for this mode
    out_mean_h: float  # mean length of an out-of-stock spell

    @property
    def in_mean_h(self) -> float:
        """Mean in-stock spell that gives ``out_fraction``: D (1 - p) / p."""
        if self.out_fraction <= 0:
            return math.inf
        return self.out_mean_h * (1 - self.out_fraction) / self.out_fraction


# ASSUMED (see the module's docstring): on-demand v6e-32 out 30 % of the time in a zone in
# spells of 6 h; spot 40 %, 6 h; Dynamic Workload Scheduler (flex-start, queued) draws on
# capacity held for it and waits in its queue: 15 %, 4 h. A reservation's static pool exists.
STOCKOUTS: dict[str, ModeStockouts] = {
    "reservation": ModeStockouts(0.0, 0.0),
    "on-demand": ModeStockouts(0.30, 6.0),
    "spot": ModeStockouts(0.40, 6.0),
    "flex-start": ModeStockouts(0.15, 4.0),
    "queued": ModeStockouts(0.15, 4.0),
}
BACKOFF_MIN_H, BACKOFF_MAX_H = 5 / 60, 30 / 60  # the autoscaler's node-group backoff


def mode_budget_h(profile: Profile, mode: str) -> float:
    """How long the train stage waits for a slice in ``mode`` before the next mode: the queue
    budget for Dynamic Workload Scheduler's modes (they wait for capacity by design), the
    scheduling budget for the others (a FailedScaleUp is a stockout); none on a reservation."""
    if mode == "reservation":
        return 0.0
    budgets = budgets_for(profile, "train")
    return (budgets.queue_s if mode in MAX_RUN_MODES else budgets.schedule_s) / 3600.0


def miss_probability(st: ModeStockouts, zones: int, budget_h: float) -> float:
    """P(no zone of ``zones`` has a slice within ``budget_h``): all out at the request (p^k),
    and none back in time (each residual spell is exponential, mean D)."""
    if st.out_fraction <= 0:
        return 0.0
    return st.out_fraction ** zones * math.exp(-zones * budget_h / st.out_mean_h)


def expected_wait_h(st: ModeStockouts, zones: int, budget_h: float = math.inf) -> float:
    """E[min(wait, budget)] for one mode over ``zones`` independent zones: p^k times the mean
    of the shortest of k residual spells (D / k), cut at the budget."""
    if st.out_fraction <= 0:
        return 0.0
    mean = st.out_mean_h / zones
    cut = 1.0 if math.isinf(budget_h) else 1 - math.exp(-budget_h / mean)
    return st.out_fraction ** zones * mean * cut


@dataclass(frozen=True)
class Step:
    """One step of a capacity policy: a mode, the zones it may take, how long it waits."""

    mode: str
    zones: tuple[str, ...]
    budget_h: float


def chain_expected_wait_h(steps: Sequence[Step], model: dict[str, ModeStockouts]) -> float:
    """Expected wait before the chain's slice, one pass: each step's truncated wait, weighted
    by the chance every step before it missed."""
    total, reach = 0.0, 1.0
    for step in steps:
        st = model[step.mode]
        total += reach * expected_wait_h(st, len(step.zones), step.budget_h)
        reach *= miss_probability(st, len(step.zones), step.budget_h)
    return total


@dataclass
class Stockouts:
    """A sampled calendar of out-of-stock spells per (mode, zone), over ``horizon_h``."""

    model: dict[str, ModeStockouts]
    horizon_h: float
    seed: str  # each (mode, zone) draws from its own stream: policies compared on one calendar
    spells: dict[tuple[str, str], list[tuple[float, float]]] = field(default_factory=dict)

    def _sample(self, mode: str, zone: str) -> list[tuple[float, float]]:
        st, out = self.model[mode], list[tuple[float, float]]()
        if st.out_fraction <= 0:
            return out
        rng = random.Random(f"{self.seed}-{mode}-{zone}")
        t = 0.0
        down = rng.random() < st.out_fraction  # the stationary state at time 0
        while t < self.horizon_h:
            length = rng.expovariate(1 / (st.out_mean_h if down else st.in_mean_h))
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
