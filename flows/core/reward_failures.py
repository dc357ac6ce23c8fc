"""A broken reward function of the recipe, read from a failed program's log as the user's error.

The guard in front of the team's reward functions (images/rehearsal/reward_guard.py)
announces a random token when it is first imported (``RECIPE-REWARD-GUARD TOKEN``, before
any of the team's files is loaded) and prints one line, ``RECIPE-REWARD-ERROR TOKEN
{"function": ..., "problem": ...}``, before it stops the program. Only such a line counts:
it starts the line, carries the token of the log's first announcement, and its body is the
guard's JSON. A look-alike printed by the team's code, or text of the model's output or the
data in the log, carries no token or another one and is ignored, so it can neither make an
infrastructure fault a user error that is never retried nor put its words in the failure.
The backends diagnose a failed program from its log tail only (the local backend and GKE's
watch alike: ``flows.core.failures.diagnose_exit``); the announcement is at the log's start
and a traceback through JAX and Tunix can be longer than that tail, so the program's whole
log (``StageFailed.log_uri``) is read first, the diagnosis's detail when it cannot be.

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
from flows.core.recipe_files import REWARD_ERROR_MARK, REWARD_GUARD_ANNOUNCE

REWARD_CODE = Failure.RECIPE_REWARD
LOADING = "(loading)"  # the guard's name for a failure to import the team's file


def guard_token(text: str) -> str | None:
    """The token of the first guard announcement in ``text`` (None: no guard announced)."""
    for line in text.splitlines():
        if line.startswith(f"{REWARD_GUARD_ANNOUNCE} "):
            token = line[len(REWARD_GUARD_ANNOUNCE) + 1:].strip()
            return token if len(token) == 32 and all(c in "0123456789abcdef" for c in token) \
                else None
    return None


def reward_error(text: str) -> tuple[str, str] | None:
    """(function, problem) of the guard's last marked line in ``text``, or None. Pure. A
    line counts only if it starts with the mark and the token the first announcement names,
    and its body is the guard's JSON (two strings)."""
    token = guard_token(text)
    if token is None:
        return None
    prefix = f"{REWARD_ERROR_MARK} {token} "
    for line in reversed(text.splitlines()):
        if not line.startswith(prefix):
            continue
        try:
            parsed = json.loads(line[len(prefix):])
        except ValueError:
            continue
        if (isinstance(parsed, dict) and set(parsed) == {"function", "problem"}
                and all(isinstance(v, str) for v in parsed.values())):
            return parsed["function"], parsed["problem"]
    return None


def explain_reward_failure(stage: str, failure: BaseException,
                           read_log: Callable[[str], str | None]) -> BaseException:
    """``failure`` as the recipe's user error when its program stopped on the guard's line;
    else ``failure`` itself. ``read_log`` reads a log by its URI (the stage's Storage); a
    log that cannot be read leaves the failure as it was."""
    if not isinstance(failure, StageFailed):
        return failure
    log = None
    if failure.log_uri:
        try:
            log = read_log(failure.log_uri)
        except Exception:  # the log is evidence, never a second failure
            log = None
    found = reward_error(log if log is not None else failure.diagnosis.detail or "")
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
