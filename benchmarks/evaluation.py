"""What the evaluate stage adds to the rehearsal's wall time, and to the tutorial's chip-hours.

Usage: python benchmarks/evaluation.py [RESULT.json]

Reads a persisted rehearsal result (default: the rehearsal profile's
``tpurl-results/rehearsal/latest.json``, written by ``tpurl run rehearsal``) and prints the
evaluate stage's wall time and its programs' walls beside the rest of the run, as measured in
that run; then the tutorial's chip-hour estimate (flows/core/eval_estimate.py). For a first
run of a base both programs run; a later run reuses the base score. Run it after a run that
evaluated (the rehearsal profile's eval section), on a quiet machine for figures worth
quoting, and note the load average it prints. Exits non-zero when the result holds no
evaluate stage. Its quick run (the tests') reads the rehearsal test's first run's result:
RESULT.json given, milliseconds.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from flows.config import load_profile
from flows.core.eval_estimate import tutorial_estimate
from flows.run.result import PipelineResult, result_uris


def _last_full_run(folder: Path) -> PipelineResult | None:
    """The newest result in ``folder`` whose train stage ran."""
    found = []
    for candidate in folder.glob("*.json"):
        try:
            result = PipelineResult.model_validate_json(candidate.read_text())
        except ValueError:
            continue  # the promoted pointer, its history: not results
        if any(s.stage == "train" and s.status == "ran" for s in result.stages):
            found.append(result)
    return max(found, key=lambda r: r.started_at) if found else None


def main() -> None:
    if len(sys.argv) > 1:
        path = Path(sys.argv[1])
    else:
        path = Path(result_uris(load_profile("rehearsal"), "latest")[1].removeprefix("file://"))
    result = PipelineResult.model_validate_json(path.read_text())
    stages = {s.stage: s for s in result.stages}
    if "evaluate" not in stages:
        raise SystemExit(f"{path}: this run did not evaluate (no eval section?)")
    evaluate = stages["evaluate"]
    rest = sum(s.duration_s for name, s in stages.items() if name != "evaluate")
    if stages["train"].status != "ran":  # a run that only evaluated: its other stages were
        baseline = _last_full_run(path.parent)  # skipped, so compare with one that ran them
        if baseline is not None:
            rest = sum(s.duration_s for s in baseline.stages if s.stage != "evaluate")
            print(f"(the five stages' walls are from {baseline.started_at}, the last run "
                  "here that ran them)")
    print(f"result {path} ({result.started_at}), load average now "
          f"{os.getloadavg()[0]:.1f}")
    print(f"stages before evaluate: {rest:.1f} s; evaluate: {evaluate.duration_s:.1f} s "
          f"({evaluate.status}); evaluate / the rest = {evaluate.duration_s / max(rest, 1e-9):.2f}")
    for run in evaluate.workloads:
        print(f"  {run.name}: {run.wall_s:.1f} s")
    if len(evaluate.workloads) == 1:
        print("  (the base score was reused: a later run of the same base pays this only)")
    est = tutorial_estimate()
    print(f"tutorial (qwen3-30b-a3b-v6e-32), by estimate: {est.hours_per_model:.2f} h per model "
          f"on {est.chips} chips for {est.rows} rows: {est.first_run_chip_hours:.1f} chip-hours "
          f"on a base's first run, {est.later_run_chip_hours:.1f} after")


if __name__ == "__main__":
    main()
