"""Months of the tutorial's calendar under a capacity policy (a chain of modes over zones):
how long each run waits for its slice, which mode and zone serve it, and what each trained
model costs. Pure and seeded; benchmarks/capacity_month.py prints it.

A run asks for its slice when it starts (the calendar of month.py: the weekly schedule plus
coalesced retrains) and gets it as stockouts.time_to_slice says; the slice boots
(``provision_h``, billed), trains, and stays billed for the autoscaler's scale-down delay.
A spot slice may be preempted (``spot_preemptions_per_h``); the stage then resubmits the same
training through the same policy from its first mode, resuming from the newest checkpoint,
and the work since it is paid twice. Waiting is not billed. Every month draws its own
stockouts (independent per mode and zone, stockouts.Stockouts).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from benchmarks.simulation.month import MonthAssumptions, run_starts
from benchmarks.simulation.stockouts import Stockouts, time_to_slice
from flows.backends.gke.infra.capacity_wait import ModeStockouts, Step


@dataclass
class PolicyMonths:
    """What a policy gave over the simulated months."""

    name: str
    waits_h: list[float] = field(default_factory=list)  # first slice of each run
    usd: float = 0.0
    runs: int = 0
    preemptions: int = 0
    served: dict[str, int] = field(default_factory=dict)  # "mode zone" → attempts served

    def percentile(self, q: float) -> float:
        """The q-quantile of the waits (nearest rank)."""
        ordered = sorted(self.waits_h)
        if not ordered:
            return 0.0
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]

    @property
    def mean_wait_h(self) -> float:
        return sum(self.waits_h) / len(self.waits_h) if self.waits_h else 0.0

    @property
    def usd_per_model(self) -> float:
        return self.usd / self.runs if self.runs else 0.0


def _train(steps: Sequence[Step], stock: Stockouts, start: float, a: MonthAssumptions,
           prices: dict[str, float], rng: random.Random, out: PolicyMonths) -> None:
    """One run: slice, boot, train (spot may be preempted and the policy asked again)."""
    t, left, first = start, a.train_h, True
    while left > 1e-9:
        wait, mode, zone = time_to_slice(steps, stock, t)
        if first:
            out.waits_h.append(wait)
            first = False
        key = f"{mode} {zone}"
        out.served[key] = out.served.get(key, 0) + 1
        t += wait + a.provision_h
        until = (rng.expovariate(a.spot_preemptions_per_h)
                 if mode == "spot" and a.spot_preemptions_per_h > 0 else float("inf"))
        ran = min(until, left)
        tail = a.scale_down_unneeded_h if mode != "reservation" else 0.0
        out.usd += (a.provision_h + ran + tail) * a.chips * prices[mode]
        t += ran
        if until >= left:
            return
        out.preemptions += 1
        left -= (ran // a.checkpoint_every_h) * a.checkpoint_every_h


def simulate_policy(name: str, steps: Sequence[Step], model: dict[str, ModeStockouts],
                    prices: dict[str, float], a: MonthAssumptions, months: int = 200
                    ) -> PolicyMonths:
    """``months`` independent months of the calendar under the policy (seeded by its name)."""
    out = PolicyMonths(name)
    horizon = a.days * 24.0 + 2000.0  # room for the last run's wait
    starts = run_starts(a, a.cpu_h + a.train_h + 1.0)
    for month in range(months):
        rng = random.Random(f"{a.seed}-{name}-{month}")
        stock = Stockouts(model, horizon, f"{a.seed}-stock-{month}")
        for start in starts:
            out.runs += 1
            _train(steps, stock, start, a, prices, rng, out)
    return out
