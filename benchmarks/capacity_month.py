"""Benchmark: a month of the weekly schedule plus event-triggered retrains, per capacity mode.

Runs flows/backends/gke/infra/month.py (a discrete-event simulation, pure) for each mode and
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

Prices come from the tutorial profile plus any --price MODE=USD given here (spot and
flex-start have no cited default). The capacity timings are assumptions (see
MonthAssumptions); pass your own measurements.
Usage: .venv/bin/python benchmarks/capacity_month.py [--price spot=1.0 --price flex-start=1.5]
       [--provision-h 0.25] [--flex-wait-h 1] [--spot-rate 0.05] [--days 30]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flows.backends.gke.infra.month import MonthAssumptions, simulate
from flows.config import load_profile
from flows.config.capacity import CAPACITY_MODES

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
    args = parser.parse_args()

    profile = load_profile("qwen3-30b-a3b-v6e-32", REQUIRED, environ={})
    assert profile.gke is not None
    prices = {m: p.usd_per_chip_hour for m, p in profile.gke.prices.items()}
    prices.update({k: float(v) for k, v in (p.split("=", 1) for p in args.price)})
    hours = profile.gke.estimated_hours
    base = MonthAssumptions(days=args.days, chips=profile.gke.total_chips,
                            train_h=hours["train"], cpu_h=hours["convert"] + hours["export"])
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
