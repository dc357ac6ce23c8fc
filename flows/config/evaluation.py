"""The held-out evaluation and the promotion rule of a profile.

``eval`` turns the evaluate stage on: after export, the trained model and the base model it
started from are scored on a held-out set with the training's own reward functions
(images/rehearsal/evaluate_rl.py runs MaxText 0.2.4's ``evaluate_rl.evaluate``). Without
``eval`` the pipeline has five stages, as before.

``promotion`` says when a scored run becomes the profile's promoted model. Default (when
``eval`` is given and ``promotion`` is not): ``{metric: mean_reward, min_delta: 0.0,
against: promoted}``: a retrained model is promoted only if it is not worse than the one
promoted now (the base model when nothing is promoted yet). ``min_delta`` may be negative
(a tolerance: ``-0.01`` accepts a model at most 0.01 worse).
"""

from __future__ import annotations

import warnings
from typing import Annotated, Literal

from flows.config.registry import RegisterSection
from flows.config.section_base import StrictModel, run_tunable
from flows.config.types import one_of

METRICS = ("mean_reward", "accuracy", "format_accuracy")
Metric = Literal["mean_reward", "accuracy", "format_accuracy"]
REFERENCES = ("base", "promoted")  # what a trained model is compared with
SAMPLING = ("greedy", "standard", "liberal")  # rl.yml generation_configs
SAMPLING_FIX = (f"use one of {', '.join(SAMPLING)} (MaxText's generation_configs; greedy is the "
                "default)")
REFERENCE_FIX = ("use base (the model the run started from) or promoted (the profile's promoted "
                 "model; base until one exists)")


class EvalSection(StrictModel):
    """Which rows are held out and how many are scored.

    ``files`` (a parquet file set, like ``data.train_files``) declares the held-out set;
    without it the dataset's own test split is used: the hub's ``eval_split`` (GSM8K
    ``test``) or, for the datasets MaxText 0.2.4 splits itself (OpenMathInstruct-2 and three
    others, ``eval_dataset_name == dataset_name``), the 5 % it holds out of the training
    files. Either way the program refuses rows the run trained on.
    """

    # how much is scored and how: evaluation knobs a run may change (the held-out set is not)
    batches: int = run_tunable(4, ge=1)  # MaxText's num_test_batches for the evaluation
    """MaxText's num_test_batches for the evaluation."""
    batch_size: int | None = run_tunable(None, ge=1)  # eval_batch_size; default the training's
    """Rows per evaluation batch."""
    sampling: Annotated[str, one_of(SAMPLING, "sampling strategy", SAMPLING_FIX)] = run_tunable(
        "greedy")  # eval_sampling_strategy
    """MaxText's eval_sampling_strategy (greedy by default)."""
    files: str | None = None
    """Held-out files to score on (else MaxText's split of the training files)."""
    dataset_name: str | None = None  # what the declared files hold (default: the training's)
    """What the held-out files hold, as MaxText names it."""
    split: str = "train"  # the split name the declared files are loaded under
    """The split name the declared files are loaded under."""



# ``register`` is the profile's key. Pydantic warns that it shadows ABCMeta's
# class-level ``register``; an instance's field value is what every reader gets.
warnings.filterwarnings("ignore", message='Field name "register" in "PromotionRule"')


class PromotionRule(StrictModel):
    """Pass when ``trained[metric] - reference[metric] >= min_delta``."""

    metric: Annotated[str, one_of(METRICS, "metric")] = "mean_reward"
    """The score promotion compares (mean_reward by default)."""
    min_delta: float = 0.0
    """How much better than the reference the trained model must score."""
    against: Annotated[str, one_of(REFERENCES, "reference", REFERENCE_FIX)] = (
        "promoted")  # base | promoted (falls back to base when none is promoted)
    """base, or promoted (the current champion; falls back to base)."""
    register: RegisterSection | None = None
    """A model registry each judged model becomes a version in (MLflow, Vertex AI or the
    Hugging Face Hub); none by default."""


