"""Which earlier promoted model a rollback restores, and the history entry it appends (pure).

Only promotions are candidates: a rejected run never entered the history, and a rollback
entry restores a model that is already there as a promotion. Without ``--to`` the target is
the last model promoted before the current champion's own promotion, so rolling back twice
walks back through the promotions (C, then B, then A) instead of swinging between two.
"""

from __future__ import annotations

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
    """Refuse a rollback asked for a regression of a model that is no longer the champion:
    an announcement that arrives after another promotion or rollback must not undo it."""
    if regressed_run and regressed_run != current.run:
        raise RollbackRefused(f"regressed_run: run {regressed_run} is not the champion (run "
                              f"{current.run} is), so its regression calls for no rollback; "
                              "fix: nothing, or roll back by hand with `tpurl rollback`")


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
                   at: str) -> PromotedModel:
    """The history entry (and the new pointer): ``target``'s record, marked a rollback."""
    if not reason.strip():
        raise RollbackRefused("--reason: empty; fix: say why in a few words (it is kept in "
                              "the history and sent in the event)")
    if not by.strip():
        raise RollbackRefused("--by: empty; fix: name who rolls back (default: the OS user)")
    return target.model_copy(update={
        "kind": "rollback",
        "rollback": Rollback(from_run=current.run, by=by, at=at, reason=reason.strip())})
