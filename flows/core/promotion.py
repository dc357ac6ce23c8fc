"""The promotion rule and the promoted pointer's record (pure).

A run passes when ``trained[metric] - reference[metric] >= min_delta``. The reference is the
base model the run started from (``against: base``) or the model promoted now (``against:
promoted``; the base model until one is promoted, so a profile's first scored run is judged
against where it started). Point estimates are compared: with the few rows a rehearsal
scores the intervals overlap whatever happens, and the intervals are shown beside the
decision so a reader sees how sure it is.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from flows.config.evaluation import PromotionRule
from flows.core.scores import ScoreSummary


class PromotedModel(BaseModel):
    """The profile's promoted pointer: what is served, and where it came from."""

    model_uri: str  # the HF export
    trained_checkpoint: str
    scores: ScoreSummary
    base_scores: ScoreSummary
    run: str
    dataset: str
    revision: str
    promoted_at: str
    metric: str
    eval_key: str = ""


class Decision(BaseModel):
    promoted: bool
    metric: str
    trained: float
    reference: float
    reference_kind: Literal["base", "promoted"]
    delta: float
    min_delta: float
    reason: str
    reference_run: str | None = None  # the run that produced the promoted reference
    unchanged: bool = False  # this run's model is already the promoted one (a rerun)
    notes: list[str] = Field(default_factory=list)


def decide(rule: PromotionRule, trained: ScoreSummary, base: ScoreSummary,
           promoted: PromotedModel | None, model_uri: str) -> Decision:
    """``model_uri`` is this run's export: when it is already the promoted model (an
    unchanged rerun), the decision stands and nothing moves or is announced again."""
    notes: list[str] = []
    if promoted is not None and promoted.model_uri == model_uri:
        value = trained.metric(rule.metric)
        return Decision(promoted=True, metric=rule.metric, trained=value, reference=value,
                        reference_kind="promoted", delta=0.0, min_delta=rule.min_delta,
                        reason="this run's model is already the promoted one",
                        reference_run=promoted.run, unchanged=True)
    if rule.against == "promoted" and promoted is not None:
        if promoted.metric != rule.metric:
            notes.append(f"the promoted model was chosen on {promoted.metric}; compared on "
                         f"{rule.metric} now")
        reference, kind, ref_run = promoted.scores.metric(rule.metric), "promoted", promoted.run
    else:
        if rule.against == "promoted":
            notes.append("nothing is promoted yet: compared with the base model")
        reference, kind, ref_run = base.metric(rule.metric), "base", None
    value = trained.metric(rule.metric)
    delta = value - reference
    passed = delta >= rule.min_delta - 1e-12  # equal within float noise passes a 0 delta
    verdict = "meets" if passed else "misses"
    reason = (f"{rule.metric} {value:.4f} vs {kind} {reference:.4f}: delta {delta:+.4f} "
              f"{verdict} min_delta {rule.min_delta:+g}")
    return Decision(promoted=passed, metric=rule.metric, trained=value, reference=reference,
                    reference_kind=kind, delta=delta, min_delta=rule.min_delta, reason=reason,
                    reference_run=ref_run, notes=notes)
