"""Benchmark: how often the watch rolls back an unchanged champion, and how often it catches
a regressed one, over many simulated watches.

Each simulated champion has a recorded promotion score: the mean of ROWS rewards drawn from
a normal distribution (mean 0.5, sd 0.3, about what the rehearsal's rewards spread), with
its 95 % interval as flows/core/scores.py computes it. It is then watched WATCHES times,
each watch scoring ROWS fresh rows. This is the noisy case: a watch on the promotion's own
held-out set with greedy sampling scores an unchanged model identically, so no drop at all.
Every watch is judged by flows/core/watch_decision.py ``judge_watch`` (the watch's own code)
with its number k; a champion counts as a false alarm when ANY of its watches says
regressed. Beside it, the same watches judged at a fixed alpha each (no spending), to show
what the spending prevents. Then champions whose watched rewards dropped by DROP: the share
caught on the first watch, and within all WATCHES.

Exits 1 when the measured false-alarm rate of the sequential test exceeds alpha by more than
three standard errors of the estimate (what the module promises), or when no regressed
champion was caught. ``--quick`` (the tests' run: tests/core/test_watch_decision.py) is 200
champions, 10 watches.
Usage: .venv/bin/python -m benchmarks.watch [--champions N] [--watches N] [--rows N]
       [--drop D] [--alpha A] [--seed S] [--quick]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flows.core.scores import Interval, mean_interval  # noqa: E402
from flows.core.watch_decision import judge_watch  # noqa: E402

MEAN, SD = 0.5, 0.3


def _score(rng: random.Random, mean: float, rows: int) -> Interval:
    rewards = [rng.gauss(mean, SD) for _ in range(rows)]
    return mean_interval(rewards, 0.0)


def _fixed_alpha_alarm(reference: Interval, watched: Interval, alpha: float) -> bool:
    """The naive rule: every watch tested at ``alpha`` (watch number 1 of a budget whose
    single share is alpha: the threshold z_(1-alpha))."""
    from statistics import NormalDist

    from flows.core.watch_decision import standard_error

    se = math.hypot(standard_error(reference), standard_error(watched))
    return se > 0 and (reference.value - watched.value) / se > NormalDist().inv_cdf(1 - alpha)


def simulate(champions: int, watches: int, rows: int, drop: float, alpha: float,
             seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    sequential = naive = caught_first = caught_any = 0
    for _ in range(champions):
        reference = _score(rng, MEAN, rows)
        fired = fired_naive = False
        for k in range(1, watches + 1):
            watched = _score(rng, MEAN, rows)
            fired = fired or judge_watch("mean_reward", reference, watched, k, alpha).regressed
            fired_naive = fired_naive or _fixed_alpha_alarm(reference, watched, alpha)
        sequential += fired
        naive += fired_naive
        reference = _score(rng, MEAN, rows)
        for k in range(1, watches + 1):
            if judge_watch("mean_reward", reference, _score(rng, MEAN - drop, rows), k,
                           alpha).regressed:
                caught_first += k == 1
                caught_any += 1
                break
    return {"false_alarm": sequential / champions, "naive_false_alarm": naive / champions,
            "power_first": caught_first / champions, "power_any": caught_any / champions}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--champions", type=int, default=2000)
    parser.add_argument("--watches", type=int, default=30)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--drop", type=float, default=0.15)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.champions, args.watches = 200, 10
    found = simulate(args.champions, args.watches, args.rows, args.drop, args.alpha, args.seed)
    error = math.sqrt(args.alpha * (1 - args.alpha) / args.champions)
    print(f"{args.champions} champions x {args.watches} watches, {args.rows} rows each, "
          f"rewards sd {SD}, alpha {args.alpha}, seed {args.seed}")
    print(f"false alarms (sequential): {found['false_alarm']:.4f} of unchanged champions ever "
          f"declared regressed (bound {args.alpha}, +-{error:.4f})")
    print(f"false alarms (fixed alpha each watch): {found['naive_false_alarm']:.4f}")
    print(f"power on a drop of {args.drop}: {found['power_first']:.4f} caught on the first "
          f"watch, {found['power_any']:.4f} within {args.watches}")
    if found["false_alarm"] > args.alpha + 3 * error:
        print("goal: false alarms within alpha: missed")
        return 1
    if found["power_any"] <= 0:
        print("goal: a regressed champion caught: missed")
        return 1
    print("goal: false alarms within alpha, regressions caught: met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
