"""What the evaluate stage adds, by estimate, for the plan (pure).

Rehearsal: the measured wall time of one evaluation program on the tiny model
(benchmarks/evaluation.py prints it from a run's result; the figure below is the one
measured when this was written). Two programs run on a base's first run, one afterwards (the
base score is reused).

Tutorial (qwen3-30b-a3b-v6e-32): no evaluation has run on a slice, so the estimate is
derived from the tutorial profile's own training estimate: an evaluation holds the same
slice as training (its rollout is the same vLLM engine), for a start-up like training's plus
one greedy completion per held-out row, at the per-completion time the training estimate
implies (train hours / completions trained; an upper bound, since that time includes the
gradient steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from flows.common.paths import REPO_ROOT

# benchmarks/evaluation.py on a rehearsal run, 2 cores at load ≈ 8 (other jobs running), 4
# held-out rows: evaluate-base 158.5 s, evaluate-trained 234.7 s (their mean, rounded)
REHEARSAL_EVAL_PROGRAM_S = 200.0
TUTORIAL_PROFILE = REPO_ROOT / "deployments/profiles/qwen3-30b-a3b-v6e-32.yaml"
STARTUP_H = 0.25  # a guess: checkpoint restore and vLLM start on the slice, as in training
RL_DEFAULT_TEST_BATCHES = 5  # maxtext/configs/post_train/rl.yml num_test_batches


@dataclass(frozen=True)
class EvalEstimate:
    chips: int
    rows: int
    hours_per_model: float

    @property
    def first_run_chip_hours(self) -> float:  # base and trained
        return 2 * self.hours_per_model * self.chips

    @property
    def later_run_chip_hours(self) -> float:  # the base score is reused
        return self.hours_per_model * self.chips


def tutorial_estimate(path: Path = TUTORIAL_PROFILE,
                      test_batches: int = RL_DEFAULT_TEST_BATCHES) -> EvalEstimate:
    data = yaml.safe_load(path.read_text())
    args, gke = data["train"]["args"], data["gke"]
    chips = math.prod(int(d) for d in str(gke["topology"]).split("x")) * int(
        gke.get("num_slices", 1))
    batch = int(args["batch_size"])
    completions = int(args["num_batches"]) * batch * int(args.get("rl.num_generations", 1))
    per_completion_h = float(gke["estimated_hours"]["train"]) / completions
    rows = test_batches * batch
    return EvalEstimate(chips=chips, rows=rows,
                        hours_per_model=STARTUP_H + rows * per_completion_h)


def plan_notes(rows_here: int) -> list[str]:
    est = tutorial_estimate()
    return [f"adds here ≈ {REHEARSAL_EVAL_PROGRAM_S:.0f} s per evaluation program "
            f"({rows_here} rows; 2 programs on a base's first run, 1 after: the base score "
            "is reused; measured, benchmarks/evaluation.py)",
            f"would add on the tutorial's v6e slice ≈ {est.first_run_chip_hours:.1f} chip-hours "
            f"on a base's first run, {est.later_run_chip_hours:.1f} after ({est.chips} chips, "
            f"{est.rows} rows, {est.hours_per_model:.2f} h per model: estimated from its "
            "train estimate; flows/core/eval_estimate.py)"]
