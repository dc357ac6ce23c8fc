"""What the evaluate stage adds, by estimate, for the plan (pure).

Rehearsal: the measured wall time of one evaluation program on the tiny model
(benchmarks/evaluation.py prints it from a run's result; the figure below is the one
measured when this was written), and what the tutorial profile's evaluation would hold on its
slice. GKE: the profile's own evaluate hours (flows/config/eval_hours.py: given, or derived
from its training estimate), which the cost plan and the spend caps count too. Two programs run
on a base's first run, one afterwards (the base score is reused).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from flows.common.paths import REPO_ROOT
from flows.common.yaml_text import load_yaml
from flows.config.eval_hours import completions_trained, hours_per_model, stage_hours
from flows.config.profile import Profile

# benchmarks/evaluation.py on a rehearsal run, 2 cores at load ≈ 8 (other jobs running), 4
# held-out rows: evaluate-base 158.5 s, evaluate-trained 234.7 s (their mean, rounded)
REHEARSAL_EVAL_PROGRAM_S = 200.0
TUTORIAL_PROFILE = REPO_ROOT / "deployments/profiles/qwen3-30b-a3b-v6e-32.yaml"
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
    """The tutorial profile as shipped (its YAML, whose required fields are unset)."""
    data = load_yaml(path.read_text())
    args, gke = data["train"]["args"], data["gke"]
    chips = math.prod(int(d) for d in str(gke["topology"]).split("x")) * int(
        gke.get("num_slices", 1))
    rows = test_batches * int(args["batch_size"])
    return EvalEstimate(chips=chips, rows=rows, hours_per_model=hours_per_model(
        float(gke["estimated_hours"]["train"]), completions_trained(args), rows))


def plan_notes(profile: Profile, rows_here: int) -> list[str]:
    gke = profile.gke
    if gke is not None:  # the stage's own estimate, the one the cost plan counts
        both = stage_hours(profile, "evaluate")
        source = ("gke.estimated_hours.evaluate" if "evaluate" in gke.estimated_hours else
                  "derived from gke.estimated_hours.train per completion, plus start-up; set "
                  "gke.estimated_hours.evaluate once a run measured it")
        return [f"holds the slice ≈ {both:.2f} h on a base's first run ({rows_here} rows per "
                f"model, both models: {both * gke.total_chips:.1f} chip-hours), about half "
                f"after (the base score is reused); {source}"]
    est = tutorial_estimate()
    return [f"adds here ≈ {REHEARSAL_EVAL_PROGRAM_S:.0f} s per evaluation program "
            f"({rows_here} rows; 2 programs on a base's first run, 1 after: the base score "
            "is reused; measured, benchmarks/evaluation.py)",
            f"would add on the tutorial's v6e slice ≈ {est.first_run_chip_hours:.1f} chip-hours "
            f"on a base's first run, {est.later_run_chip_hours:.1f} after ({est.chips} chips, "
            f"{est.rows} rows, {est.hours_per_model:.2f} h per model: estimated from its "
            "train estimate; flows/config/eval_hours.py)"]
