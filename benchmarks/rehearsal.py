"""Benchmark: the rehearsal's wall time per stage and the flow's overhead ratio.

Runs the flow twice on a fresh output root (the venvs are reused if present, as after an
install): a cold run where every stage but the image runs, then an unchanged rerun that must
skip everything. Prints per-stage walls, the sum of the stage programs' walls, and

    overhead = flow wall ÷ sum of the stage subprocesses' walls        (target ≤ 1.10)

plus the total rehearsal time (target ≤ 5 min on 2 cores after install) and the rerun time.
`--save FILE` writes the figures as JSON; `--baseline FILE` (one saved on previous main, in
the same conditions) prints each figure's ratio to it in the same run.
Exits 1 when the cold run left a stage unrun or the rerun ran one. ``--quick`` (the tests'
run) runs the same two calls of the flow with the instant stage programs of
tests/fakes/stage_backend.py in place of the local backend (benchmarks/run_hops.py's), so
the figures are the flow's own cost and the check is the skip decision's.
Usage: .venv/bin/python benchmarks/rehearsal.py [--keep DIR] [--save F] [--baseline F] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", help="output root to use (default: a new temporary dir)")
    parser.add_argument("--save", help="write the figures to this JSON file")
    parser.add_argument("--baseline", help="JSON written by --save on previous main: print ratios")
    parser.add_argument("--quick", action="store_true",
                        help="the instant stage programs in place of MaxText's (the tests' run)")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="tpurl-bench-")

    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from flows.pipeline import rl_post_training

    with contextlib.ExitStack() as stack:
        if args.quick:
            import flows.backends.local.backend as local
            from benchmarks.run_hops import instant_local, patched

            stack.enter_context(patched(local, "LocalBackend", instant_local()))
        stack.enter_context(temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}))
        started = time.monotonic()
        result = rl_post_training(profile="rehearsal", overrides={"local.root": root})
        cold_process_wall = time.monotonic() - started
        started = time.monotonic()
        rerun = rl_post_training(profile="rehearsal", overrides={"local.root": root})
        rerun_wall = time.monotonic() - started

    programs = result.workload_wall_s
    print(f"output root: {root}")
    print(f"{'stage':<8} {'status':<8} {'stage wall s':>12} {'programs s':>11}")
    for stage in result.stages:
        walls = sum(w.wall_s for w in stage.workloads)
        print(f"{stage.stage:<8} {stage.status:<8} {stage.duration_s:12.1f} {walls:11.1f}")
        for run in stage.workloads:
            print(f"  {run.name:<30} {run.wall_s:8.1f} s")
    print(f"flow wall (inside the flow):      {result.wall_s:8.1f} s")
    print(f"flow wall (call incl. API start): {cold_process_wall:8.1f} s")
    print(f"sum of stage program walls:       {programs:8.1f} s")
    programs = programs or float("nan")  # instant programs: no ratio to speak of
    print(f"overhead ratio (flow ÷ programs):  {result.wall_s / programs:8.3f}  (target ≤ 1.10)")
    print(f"overhead ratio incl. API start:    {cold_process_wall / programs:8.3f}")
    print(f"rehearsal ≤ 5 min target:          {'met' if cold_process_wall <= 300 else 'MISSED'}")
    statuses = {s.stage: s.status for s in rerun.stages}
    print(f"unchanged rerun: {rerun_wall:.1f} s, statuses {statuses}")
    figures = {f"stage {s.stage}": s.duration_s for s in result.stages}
    figures |= {f"program {r.name}": r.wall_s for s in result.stages for r in s.workloads}
    figures |= {"flow wall": result.wall_s, "flow call": cold_process_wall, "rerun": rerun_wall}
    if args.save:
        with open(args.save, "w") as out:
            json.dump(figures, out, indent=1)
    if args.baseline:
        with open(args.baseline) as saved:
            before = json.load(saved)
        print(f"{'figure':<40} {'now s':>8} {'main s':>8} {'ratio':>6}")
        for name, now in figures.items():
            then = before.get(name)
            ratio = f"{now / then:6.2f}" if then else "     -"
            print(f"{name:<40} {now:8.1f} {then if then is not None else float('nan'):8.1f} {ratio}")
    unrun = [s.stage for s in result.stages if s.status != "ran" and s.stage != "image"]
    rerun_ran = [name for name, status in statuses.items() if status != "skipped"]
    if unrun or rerun_ran:
        print(f"the cold run did not run {unrun}; the unchanged rerun ran {rerun_ran}")
    return 1 if unrun or rerun_ran else 0


if __name__ == "__main__":
    raise SystemExit(main())
