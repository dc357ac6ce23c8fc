"""A broken reward function of the recipe, read from a failed program's log as the user's error.

The guard in front of the team's reward functions (images/rehearsal/reward_guard.py) prints
one line, ``RECIPE-REWARD-ERROR {"function": ..., "problem": ...}``, before it stops the
program. The backends diagnose a failed program from its log tail only (the local backend
and GKE's watch alike: ``flows.core.failures.diagnose_exit``), and a traceback through JAX
and Tunix can be longer than that tail, so the marked line is looked for in the diagnosis's
detail first and then in the program's whole log (``StageFailed.log_uri``).

Why a code of its own and a user error: the function is the team's code; running it again
gives the same answer, so it is never retried (``RETRYABLE`` in flows/core/failures.py holds
only infrastructure faults and preemptions), and the message names the function and the
problem instead of a traceback's last line deep inside numpy.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from flows.common.failure_codes import Failure
from flows.core.failures import StageFailed, user_error
from flows.core.recipe_files import REWARD_ERROR_MARK

REWARD_CODE = Failure.RECIPE_REWARD
LOADING = "(loading)"  # the guard's name for a failure to import the team's file


def reward_error(text: str) -> tuple[str, str] | None:
    """(function, problem) of the last marked line in ``text``, or None. Pure. A body that
    is not the guard's JSON is still reported, as the line's own words."""
    lines = [line for line in text.splitlines() if REWARD_ERROR_MARK in line]
    if not lines:
        return None
    body = lines[-1].split(REWARD_ERROR_MARK, 1)[1].strip()
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return str(parsed.get("function", "?")), str(parsed.get("problem", body))
    return "?", body


def explain_reward_failure(stage: str, failure: BaseException,
                           read_log: Callable[[str], str | None]) -> BaseException:
    """``failure`` as the recipe's user error when its program stopped on the guard's line;
    else ``failure`` itself. ``read_log`` reads a log by its URI (the stage's Storage); a
    log that cannot be read leaves the failure as it was."""
    if not isinstance(failure, StageFailed):
        return failure
    found = reward_error(failure.diagnosis.detail or "")
    if found is None and failure.log_uri:
        try:
            found = reward_error(read_log(failure.log_uri) or "")
        except Exception:  # the log is evidence, never a second failure
            found = None
    if found is None:
        return failure
    function, problem = found
    what = ("the recipe's reward file could not be loaded" if function == LOADING
            else f"the recipe's reward function {function}")
    diagnosis = user_error(
        stage, f"{what}: {problem}", f"    {REWARD_ERROR_MARK} function={function}: {problem}",
        f"fix {'its import' if function == LOADING else function} in the file "
        "recipe.rewards.file names: each function must return one finite "
        "number per completion (a list as long as `completions`) and not raise; rerunning "
        "the same recipe fails the same way", code=REWARD_CODE).diagnosis
    explained = StageFailed(stage, diagnosis, failure.log_uri)  # the log says the rest
    explained.__cause__ = failure
    return explained
