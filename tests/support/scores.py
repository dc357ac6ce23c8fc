"""Score summaries for the promotion tests (what flows/core/scores.py makes of a file)."""

from __future__ import annotations

from flows.core.scores import ScoresFile, ScoreSummary, summarize


def summary(mean: float, correct: int = 1, total: int = 4) -> ScoreSummary:
    return summarize(ScoresFile(checkpoint="ckpt", total=total, correct=correct,
                                format_correct=total, mean_reward=mean,
                                rewards=[mean - 0.1, mean + 0.1] * (total // 2)))
