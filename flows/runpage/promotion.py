"""The promotion decision, its events and the run page's table.

The pointer ``promoted.json`` and ``promoted-history.json`` beside it are read and written
by flows/core/promotion_store.py (re-exported here for the callers that judge a run). Only a
passing decision writes either; a rejected run keeps its export and leaves both alone.

Events: ``tpurl.model.promoted`` and ``tpurl.model.rejected``, resource
``tpurl.model.<profile>`` (names and payload keys in flows/common/event_catalogue.py).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from flows.common.event_catalogue import MODEL_PROMOTED as PROMOTED_EVENT
from flows.common.event_catalogue import MODEL_REJECTED as REJECTED_EVENT
from flows.config.profile import Profile
from flows.core.layout import Layout
from flows.core.lineage import outside_root
from flows.core.manifest import build_manifest, manifest_digest
from flows.core.promotion import Decision, PromotedModel, decide, recipe_changed
from flows.core.promotion_store import pointer_uris, read_promoted, write_promoted
from flows.core.recipe_files import recipe_summary
from flows.core.scores import ScoreSummary
from flows.core.storage import Storage
from flows.health.holds import held_lines, hold_promotion
from flows.runpage.recipe import recipe_label

MODEL_PROMOTED = PROMOTED_EVENT.name
MODEL_REJECTED = REJECTED_EVENT.name
log = logging.getLogger(__name__)


def pointer_problem(storage: Storage, profile: Profile, model: PromotedModel) -> str | None:
    """Why the pointer cannot be trusted (None: it can): it must carry its scores' key and
    its export's digest, name an export inside the output root, and that export's files
    must still give the digest (a training pod can write the bucket, so a pointer alone proves nothing)."""
    if not model.score_key or not model.export_digest:
        return ("it carries no " + ("scores' key" if not model.score_key else "export digest")
                + " (written before pointers were checked, or by hand)")
    if why := outside_root({"model_uri": model.model_uri}, Layout(profile).root):
        return why
    found = manifest_digest(build_manifest(storage, model.model_uri))
    if found != model.export_digest:
        return (f"the export {model.model_uri} no longer matches the pointer's digest "
                f"({found}, the pointer says {model.export_digest})")
    return None


def dataset_of(profile: Profile, dataset_uri: str | None) -> str:
    if dataset_uri:
        return dataset_uri
    return f"hub:{profile.train.args.get('dataset_name') or 'openai/gsm8k'}"


def promote_or_reject(storage: Storage, profile: Profile, run: str, evaluation: dict[str, Any],
                      artifacts: dict[str, str], dataset_uri: str | None, eval_key: str,
                      score_key: str, holding: list[dict[str, Any]] | None = None,
                      ) -> tuple[Decision, PromotedModel | None]:
    """Judge the run by the profile's rule; on a pass, move the pointer. Returns the decision
    and the model promoted after it (the new one, or the one still promoted). ``score_key``
    (eval_programs.score_key) names the held-out set and scorer of this run's scores; the
    pointer keeps it so a later run knows whether the numbers compare. ``holding``: the
    training sentinel's findings whose policy is hold; a pass with any is held instead
    (flows/health/holds.py), the pointer left alone, the decision ``held``."""
    rule = profile.promotion_rule
    assert rule is not None
    trained = ScoreSummary.model_validate(evaluation["trained"])
    base = ScoreSummary.model_validate(evaluation["base"])
    recipe = scored_recipe(evaluation, profile)
    current = read_promoted(storage, profile)
    why = pointer_problem(storage, profile, current) if current is not None else None
    reference = None if why else current  # an untrusted pointer is no reference
    decision = decide(rule, trained, base, reference, artifacts["hf_export"], score_key,
                      str(recipe.get("digest", "")))
    if why:
        decision.notes.insert(0, f"the promoted pointer is not trusted ({why}): judged as if "
                              "nothing were promoted")
    if not decision.promoted or decision.unchanged:
        return decision, current
    model = PromotedModel(model_uri=artifacts["hf_export"],
                          trained_checkpoint=artifacts["trained_checkpoint"], scores=trained,
                          base_scores=base, run=run, dataset=dataset_of(profile, dataset_uri),
                          revision=profile.model.hf_revision,
                          promoted_at=datetime.now(UTC).isoformat(), metric=rule.metric,
                          eval_key=eval_key, score_key=score_key,
                          recipe_digest=str(recipe.get("digest", "")),
                          reward_functions=[str(f) for f in recipe.get("reward_functions", [])],
                          export_digest=manifest_digest(build_manifest(storage,
                                                                       artifacts["hf_export"])))
    if holding:
        names = ", ".join(str(f.get("detector")) for f in holding)
        decision.promoted, decision.held = False, True
        decision.notes.insert(0, f"held by the training sentinel ({names}): the pointer "
                              f"waits for `tpurl promote {profile.name} --clear {run} "
                              "--reason ...`")
        hold_promotion(storage, profile, model, holding, decision.model_dump())
        return decision, current
    write_promoted(storage, profile, model)
    return decision, model


def scored_recipe(evaluation: dict[str, Any], profile: Profile) -> dict[str, Any]:
    """The recipe the scores were made under: the evaluate stage's record says it; one
    recorded before it did was keyed by the same recipe (its key holds the digest), so the
    profile's is that one."""
    recorded = evaluation.get("recipe")
    return dict(recorded) if isinstance(recorded, dict) else recipe_summary(profile)


def pointer_recipe(model: PromotedModel) -> dict[str, Any]:
    """A promoted model's recipe in the summary's shape (no digest: not recorded)."""
    return {"digest": model.recipe_digest, "reward_functions": model.reward_functions}


def emit_decision(profile: str, decision: Decision, evaluation: dict[str, Any],
                  model: PromotedModel | None, announcement: dict[str, Any] | None) -> None:
    """``promoted`` when the pointer moved, ``rejected`` when the rule refused; an unchanged
    rerun of the promoted model announces nothing again."""
    from prefect.events import emit_event

    if decision.unchanged:
        return
    payload: dict[str, Any] = {"decision": decision.model_dump(),
                               "scores": {"trained": evaluation["trained"],
                                          "base": evaluation["base"]}}
    if announcement:
        payload["announcement"] = announcement
    if decision.promoted and model is not None:
        payload.update(model_uri=model.model_uri, run=model.run, dataset=model.dataset,
                       revision=model.revision)
    kind = PROMOTED_EVENT if decision.promoted else REJECTED_EVENT
    emit_event(event=kind.name,
               resource={"prefect.resource.id": f"tpurl.model.{profile}",
                         "prefect.resource.name": f"{profile} model", "tpurl.profile": profile},
               payload=kind.checked(payload))


def comparison_rows(evaluation: dict[str, Any], judged_against: PromotedModel | None,
                    decision: Decision, recipe: dict[str, Any] | None = None,
                    ) -> list[dict[str, Any]]:
    """Base vs trained vs the model promoted *before* the decision (the one this run was
    judged against; after a promotion the pointer names this run, whose row is above), one
    row per model, each with the recipe its scores were made under (``recipe``: this run's,
    the base's too; the mean reward is the sum of the recipe's reward functions). The
    decision names the recipe as well."""
    mine = recipe if recipe is not None else evaluation.get("recipe")
    ours = recipe_label(mine)
    rows = [{"model": "base", **ScoreSummary.model_validate(evaluation["base"]).row(),
             "recipe": ours},
            {"model": "trained (this run)",
             **ScoreSummary.model_validate(evaluation["trained"]).row(), "recipe": ours}]
    if judged_against is not None:
        # judged by lift: its numbers are from its own run's held-out set, and it says so
        elsewhere = decision.basis == "lift"
        changed = recipe_changed(judged_against, str((mine or {}).get("digest", "")))
        label = (f"promoted before this run ({judged_against.run}"
                 f"{', another recipe' if changed else ''}"
                 f"{', its own held-out set' if elsewhere and not changed else ''})")
        rows.append({"model": label, **judged_against.scores.row(),
                     "recipe": recipe_label(pointer_recipe(judged_against))})
    for row in rows:
        row["decision"] = ""
    rows[1]["decision"] = ("promoted" if decision.promoted else
                           "held" if decision.held else "rejected") + \
        f" under {ours}: {decision.reason}" + "".join(f" ({note})" for note in decision.notes)
    return rows


def history_rows(history: list[PromotedModel]) -> list[dict[str, Any]]:
    return [{"promoted_at": m.promoted_at, "run": m.run, "metric": m.metric,
             **m.scores.row(), "recipe": recipe_label(pointer_recipe(m)),
             "model_uri": m.model_uri} for m in history]


def promoted_lines(storage: Storage, profile: Profile) -> list[str]:
    """For `tpurl status`: what is promoted now, from the pointer (read-only)."""
    if profile.eval is None:
        return []
    pointer = pointer_uris(profile)[0]
    try:
        model = read_promoted(storage, profile)
    except Exception as exc:  # a damaged pointer is reported, never repaired here
        return [f"promoted model: pointer unreadable ({pointer}): {exc}"]
    try:
        held = held_lines(storage, profile)
    except Exception as exc:  # a listing that fails is said, never raised
        held = [f"held promotions: not listed ({exc})"]
    if model is None:
        return [f"promoted model: none yet ({pointer})", *held]
    scores = "; ".join(f"{k} {v}" for k, v in model.scores.row().items())
    cleared = model.clearance
    return [f"promoted model: {model.model_uri}",
            f"  run {model.run} at {model.promoted_at}, dataset {model.dataset}, revision "
            f"{model.revision}", f"  scores ({model.scores.samples} held-out rows): {scores}",
            f"  scored under {recipe_label(pointer_recipe(model))}",
            *([f"  held by {', '.join(cleared.detectors)}, cleared by {cleared.by} at "
               f"{cleared.at}: {cleared.reason}"] if cleared else []),
            f"  pointer {pointer}", *held]


def publish_promotion(profile: str, rows: list[dict[str, Any]],
                      history: list[dict[str, Any]]) -> None:
    """Best-effort, like every run-page artifact."""
    try:
        from flows.runpage import quiet_artifacts as quiet

        quiet.create("table", quiet.table_data(rows), f"tpurl-{profile}-evaluation".lower(),
                     "Held-out scores (value [95 % interval]): base vs trained vs the model "
                     "promoted before this run, the recipe each was scored under, and the "
                     "decision")
        if history:
            quiet.create("table", quiet.table_data(history),
                         f"tpurl-{profile}-promoted-history".lower(),
                         "Every promoted model's scores")
    except Exception as exc:  # a UI nicety never fails a run
        log.warning("could not publish the evaluation table: %s", exc)
