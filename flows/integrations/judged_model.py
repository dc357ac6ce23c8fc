"""What a registry is told about a judged model: the export, its scores, its lineage and
the decision. Built once by the flow from the promotion decision (flows/pipeline.py) so each
registry module only maps it to its own request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flows.config.profile import Profile
from flows.core.promotion import Decision, PromotedModel
from flows.runpage.promotion import dataset_of

SCORE_NAMES = ("accuracy", "format_accuracy", "mean_reward")


@dataclass(frozen=True)
class JudgedModel:
    profile: str
    run: str
    flow_run_id: str
    export_uri: str
    promoted: bool
    reason: str
    scores: dict[str, float]
    """The trained model's held-out scores (accuracy, format_accuracy, mean_reward)."""
    base_scores: dict[str, float]
    lineage: dict[str, str] = field(default_factory=dict)
    """dataset, revision, trained_checkpoint, eval_key, score_key, export_digest, ..."""

    @property
    def decision(self) -> str:
        return "promoted" if self.promoted else "rejected"


def score_values(summary: dict[str, object]) -> dict[str, float]:
    """{name: value} of a ScoreSummary's dump. Pure."""
    out: dict[str, float] = {}
    for name in SCORE_NAMES:
        interval = summary.get(name)
        if isinstance(interval, dict) and isinstance(interval.get("value"), int | float):
            out[name] = float(interval["value"])
    return out


def judged_model(profile: Profile, run: str, flow_run_id: str, decision: Decision,
                 evaluation: dict[str, Any], artifacts: dict[str, str],
                 promoted: PromotedModel | None, dataset_uri: str | None) -> JudgedModel:
    """The record of this run's decision; lineage from the new pointer when it moved."""
    lineage = {"dataset": dataset_of(profile, dataset_uri), "revision": profile.model.hf_revision,
               "base_model": profile.model.hf_repo,
               "trained_checkpoint": artifacts.get("trained_checkpoint", "")}
    if promoted is not None:
        lineage.update(eval_key=promoted.eval_key, score_key=promoted.score_key,
                       export_digest=promoted.export_digest)
    return JudgedModel(profile=profile.name, run=run, flow_run_id=flow_run_id,
                       export_uri=artifacts["hf_export"], promoted=decision.promoted,
                       reason=decision.reason, scores=score_values(evaluation["trained"]),
                       base_scores=score_values(evaluation["base"]), lineage=lineage)
