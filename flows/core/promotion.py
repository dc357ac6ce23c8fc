"""The promotion rule and the promoted pointer's record (pure).

A run passes when ``trained[metric] - reference[metric] >= min_delta``. The reference is the
base model the run started from (``against: base``) or the model promoted now (``against:
promoted``; the base model until one is promoted, so a profile's first scored run is judged
against where it started). Point estimates are compared: with the few rows a rehearsal
scores the intervals overlap whatever happens, and the intervals are shown beside the
decision so a reader sees how sure it is.

The decision is made on scores every time: a pointer that already names this
run's export is not evidence (the bucket it lives in is writable by every training pod), so
such a rerun is judged against its own base score, and is "unchanged" only when it passes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from flows.config.evaluation import PromotionRule
from flows.core.scores import ScoreSummary


class Rollback(BaseModel):
    """Who made an earlier promoted model the champion again, when, why, and from which."""

    from_run: str  # the champion's run before the rollback
    by: str
    at: str  # ISO 8601, UTC
    reason: str
    # how ``by`` is known: the OS account, a name given with --by, or the flow run's
    # creator as Prefect recorded it ("" in entries written before it was recorded)
    verified: str = ""


class Clearance(BaseModel):
    """Who let a promotion the training sentinel held go through, when, why, and what the
    sentinel had seen (flows/health/holds.py)."""

    by: str
    at: str  # ISO 8601, UTC
    reason: str
    verified: str = ""  # how ``by`` is known, as a rollback records it
    detectors: list[str] = Field(default_factory=list)  # the findings that held it
    held_at: str = ""


class PromotedModel(BaseModel):
    """The profile's promoted pointer: what is served, and where it came from. In the
    history an entry is a promotion, or a rollback naming the earlier model it restored
    (its fields copied from that model's promotion, ``rollback`` saying who and why)."""

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
    score_key: str = ""  # eval_programs.score_key of the scores; "" in pointers made before it
    # manifest_digest of the export's files when it was promoted ("" in older pointers): the
    # serving example refuses a pointer whose export no longer matches it (flows/serving.py)
    export_digest: str = ""
    # the recipe its scores were made under (recipe_files.recipe_digest and the reward
    # functions' names; "" and [] in pointers made before recipes were recorded)
    recipe_digest: str = ""
    reward_functions: list[str] = Field(default_factory=list)
    kind: Literal["promotion", "rollback"] = "promotion"
    rollback: Rollback | None = None
    # a promotion the training sentinel held, cleared by a person (`tpurl promote --clear`)
    clearance: Clearance | None = None


class Decision(BaseModel):
    promoted: bool
    metric: str
    trained: float
    reference: float
    reference_kind: Literal["base", "promoted"]
    # "score": trained vs reference on one held-out set; "lift": (trained - base) vs the
    # promoted model's (promoted - its base), each on its own set (the sets differ)
    basis: Literal["score", "lift"] = "score"
    delta: float
    min_delta: float
    reason: str
    reference_run: str | None = None  # the run that produced the promoted reference
    unchanged: bool = False  # this run's model is already the promoted one (a rerun)
    notes: list[str] = Field(default_factory=list)
    # passed, but the training sentinel held it: the pointer waits for `tpurl promote --clear`
    held: bool = False


def decide(rule: PromotionRule, trained: ScoreSummary, base: ScoreSummary,
           promoted: PromotedModel | None, model_uri: str, score_key: str,
           recipe_digest: str = "") -> Decision:
    """``model_uri`` is this run's export: when it is already the promoted model (a rerun),
    it is judged against its base and, if it passes, nothing moves or is announced again.
    ``score_key`` says which held-out set and scorer this run's scores come from; it holds
    the recipe's digest (``recipe_digest``, this run's), since the mean reward is the sum of
    the recipe's reward functions."""
    notes: list[str] = []
    metric = rule.metric
    rerun = promoted is not None and promoted.model_uri == model_uri
    if rerun:  # judged on its own scores, never waved through by the pointer
        notes.append("this run's model is already the promoted one: judged against its base "
                     "model's score, not against itself")
        promoted = None
    basis: Literal["score", "lift"] = "score"
    if rule.against == "promoted" and promoted is not None:
        if promoted.metric != metric:
            notes.append(f"the promoted model was chosen on {promoted.metric}; compared on "
                         f"{metric} now")
        kind: Literal["base", "promoted"] = "promoted"
        ref_run: str | None = promoted.run
        if promoted.score_key and promoted.score_key == score_key:
            value, reference = trained.metric(metric), promoted.scores.metric(metric)
        else:
            basis = "lift"
            value = trained.metric(metric) - base.metric(metric)
            reference = promoted.scores.metric(metric) - promoted.base_scores.metric(metric)
            if recipe_changed(promoted, recipe_digest):
                notes.append(
                    f"the recipe changed since the promoted model (run {promoted.run}) was "
                    f"scored: it was scored under recipe {promoted.recipe_digest} "
                    f"({_functions(promoted.reward_functions)}), this run under "
                    f"{recipe_digest}, so their scores are not comparable: compared by the "
                    "lift over each one's base model, each base scored under its own recipe; "
                    "if this run is promoted, its scores start a new comparison basis that "
                    "later runs of this recipe are compared on by score")
            else:
                why = ("on another held-out set, with other evaluation settings or under "
                       "another recipe" if promoted.score_key
                       else "before its held-out set was recorded")
                notes.append(f"the promoted model (run {promoted.run}) was scored {why}, so "
                             "its scores are not comparable with this run's: compared by the "
                             "lift over each one's base model on its own held-out set")
    else:
        if rule.against == "promoted" and not rerun:
            notes.append("nothing is promoted yet: compared with the base model")
        value, reference = trained.metric(metric), base.metric(metric)
        kind, ref_run = "base", None
    delta = value - reference
    passed = delta >= rule.min_delta - 1e-12  # equal within float noise passes a 0 delta
    verdict = "meets" if passed else "misses"
    if basis == "lift":
        reason = (f"{metric} lift over base {value:+.4f} vs the promoted model's lift "
                  f"{reference:+.4f}: delta {delta:+.4f} {verdict} min_delta "
                  f"{rule.min_delta:+g}")
    else:
        reason = (f"{metric} {value:.4f} vs {kind} {reference:.4f}: delta {delta:+.4f} "
                  f"{verdict} min_delta {rule.min_delta:+g}")
    return Decision(promoted=passed, metric=metric, trained=value, reference=reference,
                    reference_kind=kind, basis=basis, delta=delta, min_delta=rule.min_delta,
                    reason=reason, reference_run=ref_run, unchanged=rerun and passed,
                    notes=notes)


def recipe_changed(promoted: PromotedModel, recipe_digest: str) -> bool:
    """Was the promoted model scored under another recipe than ``recipe_digest``? Only
    when both are known: a pointer made before recipes were recorded says nothing."""
    return bool(promoted.recipe_digest and recipe_digest
                and promoted.recipe_digest != recipe_digest)


def _functions(names: list[str]) -> str:
    return f"reward functions {', '.join(names)}" if names else "MaxText's built-in rewards"
