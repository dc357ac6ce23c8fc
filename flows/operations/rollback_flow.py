"""The rollback flow: `tpurl rollback` as a deployment, for the automation that runs it when
a regression of the champion is announced (``tpurl.model.regressed``, prefect.yaml).

It takes the same path as the command (flows/operations/rollback.py ``plan_rollback`` then
``carry_out``), with one check more: the regressed run must still be the champion, so an
announcement that arrives after another promotion or rollback changes nothing. A refusal
fails the run with the message naming the field and the fix; nothing was changed then.
"""

from __future__ import annotations

from prefect import flow

from flows.backends import storage_for
from flows.config import load_profile
from flows.operations.rollback import carry_out, plan_rollback


@flow(name="rollback", validate_parameters=True, log_prints=True)  # the lines: the run log
def rollback_flow(profile: str, reason: str, regressed_run: str = "", to_run: str = "",
                  by: str = "automation") -> list[str]:
    """Make the model promoted before the champion (or ``to_run``'s) the champion again of
    PROFILE; ``regressed_run``, when given, must be the champion now. Returns what changed."""
    cfg = load_profile(profile, origin="flow")
    storage = storage_for(cfg.section.output_root())
    plan = plan_rollback(storage, cfg, to_run or None, reason, by,
                         regressed_run=regressed_run or None)
    posted = carry_out(storage, cfg, plan)
    lines = plan.lines()
    if not posted:
        lines.append("no Prefect API was set: the event was not sent")
    print("\n".join(["rolled back:", *lines]))
    return lines
