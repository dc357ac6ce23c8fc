"""Which stages hold TPU time on GKE, and how long the evaluate stage holds it (pure).

Why evaluation is a TPU stage: its program (images/rehearsal/evaluate_rl.py) rolls out with
the training's own engine (vLLM on the slice, through Pathways), so it holds the same slice
as training for as long as it runs, and the plan, the spend cap and the watch must count it.

Nobody has evaluated on a slice yet, so unless the profile says
(``gke.estimated_hours.evaluate``) the hours are derived from the profile's own training
estimate: a start-up like training's (checkpoint restore and vLLM start; a guess) plus one
greedy completion per held-out row, at the per-completion time the training estimate implies
(train hours / completions trained: an upper bound, since that time includes the gradient
steps). Two models are scored on a base's first run (the base's score is reused afterwards);
the estimate counts both, so a spend cap set from it holds on every run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flows.config.gke_section import gke_section

if TYPE_CHECKING:
    from flows.config.profile import Profile

STARTUP_H = 0.25  # a guess: checkpoint restore and vLLM start on the slice, as in training
PROGRAM_STAGES = ("convert", "train", "export")
EVALUATE = "evaluate"


def tpu_stages(profile: Profile) -> tuple[str, ...]:
    """The stages that submit work to the cluster, in run order: evaluate only with eval."""
    return (*PROGRAM_STAGES, EVALUATE) if profile.eval is not None else PROGRAM_STAGES


def completions_trained(train_args: dict[str, object]) -> int:
    """Rollout completions a training run samples: batches × batch size × generations."""
    return max(1, int(str(train_args.get("num_batches", 1))) *
               int(str(train_args.get("batch_size", 1))) *
               int(str(train_args.get("rl.num_generations", 1))))


def hours_per_model(train_hours: float, completions: int, rows: int) -> float:
    return STARTUP_H + rows * train_hours / max(completions, 1)


def eval_rows(profile: Profile) -> int:
    assert profile.eval is not None
    batch = profile.eval.batch_size or int(str(profile.train.args.get("batch_size", 1)))
    return profile.eval.batches * batch


def derived_eval_hours(profile: Profile) -> float:
    """Both models' evaluation (a base's first run), from the training estimate."""
    train_h = float(gke_section(profile).estimated_hours.get("train", 0.0))
    per_model = hours_per_model(train_h, completions_trained(dict(profile.train.args)),
                                eval_rows(profile))
    return round(2 * per_model, 4)


def stage_hours(profile: Profile, stage: str) -> float:
    """``gke.estimated_hours.<stage>``; for evaluate, when unset, the derived estimate."""
    gke = gke_section(profile)
    # any stage's name: the map is keyed by the TPU stages' only, so another gets None
    given = gke.estimated_hours.get(stage)  # type: ignore[call-overload]
    if given is not None:
        return float(given)
    if stage == EVALUATE and profile.eval is not None:
        return derived_eval_hours(profile)
    return 0.0
