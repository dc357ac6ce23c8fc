"""Evaluation scores: what the program wrote, and the summary with intervals (pure).

The program (images/rehearsal/evaluate_rl.py) writes MaxText's counts and every response's
summed reward. Accuracies get a Wilson score interval (it stays inside [0, 1] and is sound
for the few samples a rehearsal scores, where the normal approximation is not); the mean
reward gets a normal interval from the samples' standard error. 95 % both.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel, Field, ValidationError

Z95 = 1.959963984540054


class ScoredResponse(BaseModel):
    """One response the program kept, with its question and summed reward (its first few:
    images/rehearsal/evaluate_rl.py ``KEPT_RESPONSES``). Text written by a model: untrusted,
    shown only shortened, redacted and escaped (flows/core/watch_samples.py)."""

    question: str = ""
    response: str = ""
    reward: float = 0.0


class ScoresFile(BaseModel):
    """The program's JSON (extra keys are allowed: a newer program may add some)."""

    checkpoint: str
    total: int = Field(ge=0)
    correct: float = Field(ge=0)
    format_correct: float = Field(ge=0)
    mean_reward: float
    rewards: list[float] = Field(default_factory=list)
    overlap: int = 0
    trained_rows_checked: int = 0
    questions: list[str] = Field(default_factory=list)
    responses: list[ScoredResponse] = Field(default_factory=list)


class Interval(BaseModel):
    value: float
    low: float
    high: float


class ScoreSummary(BaseModel):
    """One model's score on the held-out set."""

    samples: int
    accuracy: Interval
    format_accuracy: Interval
    mean_reward: Interval
    reward_samples: int
    checkpoint: str

    def metric(self, name: str) -> float:
        return float(getattr(self, name).value)

    def row(self) -> dict[str, str]:
        """For tables: each metric as 'value [low, high]'."""
        return {name: f"{getattr(self, name).value:.4f} [{getattr(self, name).low:.4f}, "
                      f"{getattr(self, name).high:.4f}]"
                for name in ("accuracy", "format_accuracy", "mean_reward")}


def wilson(successes: float, n: int, z: float = Z95) -> Interval:
    if n <= 0:
        return Interval(value=0.0, low=0.0, high=1.0)
    p = min(max(successes / n, 0.0), 1.0)
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Interval(value=p, low=max(0.0, centre - half), high=min(1.0, centre + half))


def mean_interval(samples: list[float], fallback_mean: float, z: float = Z95) -> Interval:
    """Normal interval of the mean; one sample or none has no spread to estimate (the
    interval is then the point itself, and ``reward_samples`` says why)."""
    if not samples:
        return Interval(value=fallback_mean, low=fallback_mean, high=fallback_mean)
    n = len(samples)
    mean = sum(samples) / n
    if n < 2:
        return Interval(value=mean, low=mean, high=mean)
    var = sum((x - mean) ** 2 for x in samples) / (n - 1)
    half = z * math.sqrt(var / n)
    return Interval(value=mean, low=mean - half, high=mean + half)


def summarize(scores: ScoresFile) -> ScoreSummary:
    return ScoreSummary(samples=scores.total, accuracy=wilson(scores.correct, scores.total),
                        format_accuracy=wilson(scores.format_correct, scores.total),
                        mean_reward=mean_interval(scores.rewards, scores.mean_reward),
                        reward_samples=len(scores.rewards), checkpoint=scores.checkpoint)


def parse_scores(text: str | None) -> tuple[ScoresFile | None, str]:
    """(scores, '') or (None, what is wrong with the file)."""
    if text is None:
        return None, "no scores file was written"
    try:
        data: Any = json.loads(text)
        return ScoresFile.model_validate(data), ""
    except (json.JSONDecodeError, ValidationError) as exc:
        return None, f"the scores file is unreadable ({str(exc).splitlines()[0]})"
