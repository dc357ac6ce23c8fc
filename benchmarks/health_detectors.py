"""Benchmark: each training-health detector's firing step on hacked metric streams and its
false alarms on clean ones.

The streams are tests/support/health_streams.py's (GRPO-shaped runs of 60 steps, each hack
starting at step 30) and the rehearsal's own recorded stream (tests/golden/health/). Per
detector it prints how many hacked streams it caught, the median and worst lag from the
hack's onset to its firing step, and how many clean streams it fired on (any detector firing
on a clean stream is a false alarm of that detector). The held-out detector fires at the last
step by design: it needs the evaluation. Exits 1 when a detector missed a hack or fired on the
rehearsal's own reward. ``--quick`` (the tests' run, tests/health/test_benchmark.py) uses 5
seeds instead of 200.
Usage: .venv/bin/python -m benchmarks.health_detectors [--seeds N] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flows.config.health import HealthSection  # noqa: E402
from flows.health.detectors import DETECTORS, examine  # noqa: E402
from tests.support import health_streams as hs  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="5 seeds (the tests' run)")
    args = parser.parse_args()
    seeds = range(5 if args.quick else args.seeds)
    health = HealthSection()
    false_alarms = dict.fromkeys(DETECTORS, 0)
    for seed in seeds:
        for finding in examine(hs.clean(seed), health, hs.CLEAN_HELDOUT_GAIN):
            false_alarms[finding.detector] += 1
    own = examine(hs.recorded("rehearsal-own-reward"), health, 0.0)
    print(f"{len(seeds)} clean and {len(seeds)} hacked streams per detector, "
          f"{hs.STEPS} steps, hacks from step {hs.ONSET}")
    print(f"{'detector':<20} {'caught':>8} {'median lag':>11} {'worst lag':>10} "
          f"{'false alarms':>13}")
    missed = 0
    for name in DETECTORS:
        make, gain = hs.HACKS[name]
        lags = []
        for seed in seeds:
            found = [f for f in examine(make(seed), health, gain) if f.detector == name]
            if found:
                lags.append(found[0].step - hs.ONSET)
        missed += len(seeds) - len(lags)
        median = f"{statistics.median(lags):.0f}" if lags else "-"
        worst = f"{max(lags)}" if lags else "-"
        print(f"{name:<20} {len(lags):>4}/{len(seeds):<3} {median:>11} {worst:>10} "
              f"{false_alarms[name]:>9}/{len(seeds):<3}")
    print(f"rehearsal's own reward (recorded): {len(own)} finding(s)"
          + "".join(f"; {f.detector} at step {f.step}" for f in own))
    return 1 if missed or own else 0


if __name__ == "__main__":
    sys.exit(main())
