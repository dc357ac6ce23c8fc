"""How long a slice takes to come, per capacity mode and zone: a stockout model and its closed
forms for ``tpurl plan --compare-capacity``. Pure. The seeded simulation of a capacity policy
(a chain of modes over zones) on the same model is benchmarks/simulation/stockouts.py.

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
operators report GKE's FailedScaleUp for TPUs in a zone lasting hours; the spot availability traces
behind "Can't Be Late" (NSDI '24, github.com/skypilot-org/spot-traces, GPUs on AWS and GCP)
show unavailability in spells of hours, independent enough between zones that failing over
helps. Replace the figures with your own: the benchmark takes them as options.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ModeStockouts:
    """One mode's stockouts in one zone (the same in every zone of the region)."""

    out_fraction: float  # long-run share of time the zone has no slice for this mode
    out_mean_h: float  # mean length of an out-of-stock spell


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
