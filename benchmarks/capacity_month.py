"""Benchmark: a month of the weekly schedule plus event-triggered retrains, per capacity mode.

Runs benchmarks/simulation/month.py (a discrete-event simulation, pure) for each mode and
prints, per mode:

    runs              training runs in the month (announcements during a run coalesce)
    held chip-h       billed TPU chip-hours
    idle chip-h       billed while no run wanted the chips (goal: 0 outside reservation)
    overhead chip-h   billed for a run but not training: slice boot, scale-down tail
    waiting h         waiting for capacity, not billed (reported apart from training)
    preemptions, lost chip-h   spot: work repeated from the newest checkpoint
    train wall ratio  mean train-stage wall time (waiting excluded) / the static pool's
                      (goal <= 1.10)
    $                 held chip-hours at the profile's price for the mode (— if none given)

Then, with stockouts (flows/backends/gke/infra/capacity_wait.py: per mode and
zone, spells of hours, independent between zones), --months months of the same calendar under
four capacity policies, and for each the time to the slice (p50/p95 over every run, waiting
not billed), the dollars per trained model, and which mode and zone served:

    one zone on-demand (today)   on-demand in gke.zone; today's stage gives up after 3
                                 attempts of gke.schedule_budget_s (the share is printed)
    every zone on-demand         on-demand over the region's zones (--zones)
    fallback chain               --chain (flex-start, on-demand, spot) over every zone, each
                                 mode for its budget, then the next, then over again
    queued provisioning          queued over every zone, the queue budget, then over again

Prices come from the tutorial profile plus any --price MODE=USD given here; spot,
flex-start and queued have no cited default, and where none is given an ASSUMED fraction of
the on-demand list price is used and printed as such. The capacity timings and the stockout
figures are assumptions (MonthAssumptions, capacity_wait.STOCKOUTS); pass your own.
A pure simulation of seconds: its quick run is the month-cost page's command block, run as
written by tests/test_howto_figures.py, which also checks the page holds its figures.
Usage: .venv/bin/python benchmarks/capacity_month.py [--price spot=1.0 --price flex-start=1.5]
       [--provision-h 0.25] [--flex-wait-h 1] [--spot-rate 0.05] [--days 30] [--months 200]
       [--out MODE=FRACTION,HOURS ...] [--zones us-east5-b,us-east5-a,us-east5-c]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.simulation.month import MonthAssumptions, simulate
from benchmarks.simulation.policy_month import simulate_policy
from flows.backends.gke.infra.capacity_wait import (
    STOCKOUTS,
    ModeStockouts,
    Step,
)
from flows.backends.gke.infra.preflight.zones import pair_problem
from flows.config import load_profile
from flows.config.capacity import CAPACITY_MODES
from flows.core.budgets import mode_budget_h
from flows.operations.preemption_cost import preemption_cost

# ASSUMED when --price does not give them: fractions of the on-demand list price (no cited
# v6e price ships for these modes; read yours from https://cloud.google.com/tpu/pricing)
ASSUMED_PRICE_FRACTION = {"spot": 0.5, "flex-start": 0.7, "queued": 0.7}

REQUIRED = {"gke.project": "bench-proj", "gke.region": "us-east5", "gke.zone": "us-east5-b",
            "gke.cluster": "bench", "gke.bucket": "bench-bucket", "gke.reservation": "res",
            "gke.authorized_cidr": "203.0.113.0/24"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--price", action="append", default=[], metavar="MODE=USD")
    parser.add_argument("--provision-h", type=float, default=MonthAssumptions.provision_h)
    parser.add_argument("--flex-wait-h", type=float, default=MonthAssumptions.flex_wait_h)
    parser.add_argument("--spot-rate", type=float,
                        default=MonthAssumptions.spot_preemptions_per_h)
    parser.add_argument("--days", type=int, default=MonthAssumptions.days)
    parser.add_argument("--months", type=int, default=200)
    parser.add_argument("--zones", default="us-east5-b,us-east5-a,us-east5-c")
    parser.add_argument("--chain", default="flex-start,on-demand,spot")
    parser.add_argument("--out", action="append", default=[], metavar="MODE=FRACTION,HOURS",
                        help="a mode's stockouts: share of time out, mean spell in hours")
    args = parser.parse_args()

    profile = load_profile("qwen3-30b-a3b-v6e-32", REQUIRED, environ={})
    assert profile.gke is not None
    prices = {m: p.usd_per_chip_hour for m, p in profile.gke.prices.items()}
    given = {k: float(v) for k, v in (p.split("=", 1) for p in args.price)}
    assumed = {m: f * prices["on-demand"] for m, f in ASSUMED_PRICE_FRACTION.items()
               if m not in given and m not in prices}
    prices.update({**assumed, **given})
    hours = profile.gke.estimated_hours
    lost = preemption_cost(profile)  # the work a preemption repeats: the profile's period
    base = MonthAssumptions(days=args.days, chips=profile.gke.total_chips,
                            train_h=hours["train"], cpu_h=hours["convert"] + hours["export"],
                            checkpoint_every_h=lost.checkpoint_period * lost.step_min / 60)
    a = dataclasses.replace(base, provision_h=args.provision_h, flex_wait_h=args.flex_wait_h,
                            spot_preemptions_per_h=args.spot_rate)
    results = {mode: simulate(mode, a) for mode in CAPACITY_MODES}
    static_wall = sum(results["reservation"].train_wall_h) / results["reservation"].runs

    print(f"{a.days} days, {a.chips} chips, train {a.train_h:g} h/run; assumptions: provision "
          f"{a.provision_h:g} h, flex-start wait {a.flex_wait_h:g} h, scale-down after "
          f"{a.scale_down_unneeded_h * 60:.0f} min, spot {a.spot_preemptions_per_h:g} "
          f"preemptions/h, checkpoint every {a.checkpoint_every_h:g} h")
    print(f"{'mode':<12}{'runs':>5}{'held ch':>10}{'idle ch':>10}{'overhd ch':>10}"
          f"{'wait h':>8}{'preempt':>8}{'lost ch':>9}{'wall ratio':>11}{'$':>12}")
    for mode, r in results.items():
        wall = sum(r.train_wall_h) / r.runs / static_wall if r.runs else 0.0
        usd = f"{r.held_chip_h * prices[mode]:,.2f}" if mode in prices else "—"
        print(f"{mode:<12}{r.runs:>5}{r.held_chip_h:>10.1f}{r.idle_chip_h:>10.1f}"
              f"{r.overhead_chip_h:>10.1f}{r.waiting_h:>8.2f}{r.preemptions:>8}"
              f"{r.lost_chip_h:>9.1f}{wall:>11.3f}{usd:>12}")
    static = results["reservation"]
    for mode in ("on-demand", "spot", "flex-start"):
        r = results[mode]
        print(f"{mode}: idle {r.idle_chip_h:.1f} chip-h (static pool {static.idle_chip_h:.1f});"
              f" held / static = {r.held_chip_h / static.held_chip_h:.3f}")
    if assumed:
        print("ASSUMED prices (no --price given): " + ", ".join(
            f"{m} ${v:.2f} ({ASSUMED_PRICE_FRACTION[m]:.0%} of on-demand)"
            for m, v in assumed.items()))
    _stockout_policies(args, profile, a, prices)
    return 0


def _stockout_policies(args: argparse.Namespace, profile, a: MonthAssumptions,
                       prices: dict[str, float]) -> None:
    model = dict(STOCKOUTS)
    for item in args.out:
        mode, figures = item.split("=", 1)
        fraction, hours = (float(x) for x in figures.split(","))
        model[mode] = ModeStockouts(fraction, hours)
    zones = tuple(args.zones.split(","))
    accelerator = profile.gke.machine.accelerator_label

    def serving(mode: str) -> tuple[str, ...]:
        """The zones the product lets ``mode`` use (pre-flight refuses the others)."""
        return tuple(z for z in zones if pair_problem(mode, z, accelerator, set(zones)) is None)

    budget = {m: mode_budget_h(profile, m) for m in CAPACITY_MODES}
    today_gives_up_h = 3 * budget["on-demand"]  # the stage's attempt and its two retries
    policies = {
        "one zone on-demand (today)": [Step("on-demand", zones[:1], budget["on-demand"])],
        "every zone on-demand": [Step("on-demand", zones, budget["on-demand"])],
        f"fallback chain ({args.chain})": [Step(m, serving(m), budget[m])
                                           for m in args.chain.split(",") if serving(m)],
        "queued provisioning": [Step("queued", serving("queued"), budget["queued"])],
    }
    print("\nStockouts (ASSUMED, flows/backends/gke/infra/capacity_wait.py; per zone, "
          "independent): " + "; ".join(f"{m} out {st.out_fraction:.0%} of the time in "
                                        f"spells of {st.out_mean_h:g} h" for m, st in
                                        model.items() if st.out_fraction > 0))
    print("budgets per mode: " + ", ".join(f"{m} {budget[m]:g} h" for m in CAPACITY_MODES
                                           if m != "reservation")
          + f"; zones {', '.join(zones)}; {args.months} months of the calendar, "
          f"the same stockouts for every policy")
    print(f"{'policy':<46}{'runs':>6}{'p50 h':>7}{'p95 h':>7}{'p99 h':>7}{'mean h':>8}"
          f"{'$/model':>10}{'preempt':>8}  served by (attempts)")
    for name, steps in policies.items():
        r = simulate_policy(name, steps, model, prices, a, args.months)
        served = ", ".join(f"{k} {v}" for k, v in sorted(r.served.items(),
                                                         key=lambda kv: -kv[1])[:4])
        print(f"{name:<46}{r.runs:>6}{r.percentile(0.5):>7.2f}{r.percentile(0.95):>7.2f}"
              f"{r.percentile(0.99):>7.2f}{r.mean_wait_h:>8.2f}{r.usd_per_model:>10,.2f}"
              f"{r.preemptions:>8}  {served}")
        if name.endswith("(today)"):
            lost = sum(w > today_gives_up_h for w in r.waits_h) / max(r.runs, 1)
            print(f"{'':<46}today's stage gives up after {today_gives_up_h:g} h: "
                  f"{lost:.1%} of the runs fail and wait for a rerun")


if __name__ == "__main__":
    raise SystemExit(main())
