"""Which earlier promoted model a rollback restores, and the history entry it appends (pure).

Only promotions are candidates: a rejected run never entered the history, and a rollback
entry restores a model that is already there as a promotion. Without ``--to`` the target is
the last model promoted before the current champion's own promotion, so rolling back twice
walks back through the promotions (C, then B, then A) instead of swinging between two.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flows.core.promotion import PromotedModel, Rollback


class RollbackRefused(ValueError):
    """A rollback that cannot be made; the message names the field and the fix, and nothing
    was changed."""


def current_champion(history: list[PromotedModel],
                     pointer: PromotedModel | None) -> PromotedModel:
    """The model served now: the pointer, else the history's last entry."""
    if not history:
        raise RollbackRefused("promoted-history.json: there is no promotion history for this "
                              "profile, so there is nothing to roll back to; fix: promote a "
                              "model first (`tpurl run`, see docs/how-to/evaluation.md)")
    return pointer if pointer is not None else history[-1]


def regression_problem(current: PromotedModel, regressed_run: str | None) -> None:
    """Refuse a rollback asked for a regression of a model that is not the champion: an
    announcement that names no run (the event's ``run`` missing or empty) says nothing about
    which model regressed, and one that arrives after another promotion or rollback must not
    undo it. None: no regression is claimed (`tpurl rollback`, the operator's own call)."""
    if regressed_run is None:
        return
    if not regressed_run.strip():
        raise RollbackRefused("regressed_run: empty (the tpurl.model.regressed event names no "
                              "run in its payload), so no champion is known to have "
                              f"regressed; the champion is run {current.run}; fix: post the "
                              "event with payload run set to the champion's run, or roll "
                              "back by hand with `tpurl rollback`")
    if regressed_run != current.run:
        raise RollbackRefused(f"regressed_run: run {regressed_run} is not the champion (run "
                              f"{current.run} is), so its regression calls for no rollback; "
                              "fix: nothing, or roll back by hand with `tpurl rollback`")


def model_resource(profile: str) -> dict[str, str]:
    """The resource of a profile's model events (promoted, rolled back, regressed): the id
    ``tpurl.model.<profile>`` and the label ``tpurl.profile``."""
    return {"prefect.resource.id": f"tpurl.model.{profile}", "tpurl.profile": profile}


def resource_problem(profile: str, event_resource: Mapping[str, Any] | None) -> None:
    """Refuse a regression announced about another model than this profile's: the event's
    resource (id and ``tpurl.profile`` label) must be the profile's own, whatever an
    automation matched it with."""
    wanted = model_resource(profile)
    given = dict(event_resource or {})
    if any(given.get(key) != value for key, value in wanted.items()):
        named = given.get("prefect.resource.id") or "none"
        raise RollbackRefused(
            f"event_resource: names model {named} (label tpurl.profile "
            f"{given.get('tpurl.profile') or 'missing'}), not this deployment's "
            f"{wanted['prefect.resource.id']} (label tpurl.profile {profile}); fix: post the "
            f"regression with resource {wanted} for this profile, and match it in the "
            "automation that runs this deployment (prefect.yaml's trigger matches both)")


def choose_target(history: list[PromotedModel], current: PromotedModel,
                  to_run: str | None) -> PromotedModel:
    """The promotion entry to restore (``to_run``'s, or the one before the champion's)."""
    promotions = [m for m in history if m.kind == "promotion"]
    runs = ", ".join(dict.fromkeys(m.run for m in promotions)) or "none"
    if to_run is not None:
        if to_run == current.run:
            raise RollbackRefused(f"--to: run {to_run} is the current champion already; fix: "
                                  f"name another promoted run (promoted: {runs})")
        chosen = [m for m in promotions if m.run == to_run]
        if not chosen:
            raise RollbackRefused(f"--to: run {to_run} was never promoted (a rejected or "
                                  "unknown run is not in promoted-history.json); fix: name a "
                                  f"promoted run (promoted: {runs})")
        return chosen[-1]
    own = [i for i, m in enumerate(promotions) if m.run == current.run]
    before = promotions[:own[-1]] if own else promotions
    earlier = [m for m in before if m.run != current.run]
    if not earlier:
        raise RollbackRefused(f"--to: nothing was promoted before the champion (run "
                              f"{current.run}); fix: name a promoted run with --to "
                              f"(promoted: {runs})")
    return earlier[-1]


def rollback_entry(target: PromotedModel, current: PromotedModel, by: str, reason: str,
                   at: str, verified: str = "") -> PromotedModel:
    """The history entry (and the new pointer): ``target``'s record, marked a rollback."""
    if not reason.strip():
        raise RollbackRefused("--reason: empty; fix: say why in a few words (it is kept in "
                              "the history and sent in the event)")
    if not by.strip():
        raise RollbackRefused("--by: empty; fix: name who rolls back (default: the OS user)")
    return target.model_copy(update={
        "kind": "rollback",
        "rollback": Rollback(from_run=current.run, by=by, at=at, reason=reason.strip(),
                             verified=verified)})
