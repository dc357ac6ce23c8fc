"""The file MaxText's ``reward_functions_path`` names when a profile brings its own rewards.

MaxText 0.2.4 loads each name of ``reward_functions`` from this file with
``utils_rl.load_custom_callable`` (importlib, then ``getattr``), and Tunix 0.1.8 calls it as
``fn(prompts=..., completions=..., mode=..., tmvp_config=..., **columns)``
(``rl/reward_manager.py`` ``SequenceRewardManager``), sums the results per completion and
logs each function's mean as ``rewards/<its __name__>``. Tunix stops only on ``None`` or a
list of the wrong length; a NaN, a string or a numpy array of another shape either fails deep
inside numpy or silently poisons the advantages.

So this module answers MaxText's ``getattr`` (PEP 562 ``__getattr__``) with the team's
function, loaded from the file ``REWARD_GUARD_FILE`` names and wrapped: a call that
raises, or returns anything but one finite number per completion, prints one line marked
``RECIPE-REWARD-ERROR TOKEN`` with a JSON body naming the function and the problem, then
raises. The pipeline reads that line as the user's error (never retried).

Why a token: the program's log also carries what the team's code and the model print (a
reward function that prints its completions, a dataset row), and text there can look like
the mark. So the first import of the guard in a process, before any reward file is loaded,
draws a random token and announces it on a line of its own (``RECIPE-REWARD-GUARD TOKEN``);
the pipeline counts a mark only when it carries the token the log's first announcement
names (flows/core/reward_failures.py). MaxText executes this file once per reward function
(``load_custom_callable`` makes a fresh module each time), so the token is kept in the
process's environment with its pid, and later copies reuse it instead of announcing again.
Code of the team runs in the same process and could read it: the token keeps text that did
not come from the guard (the model's output, the data, an imitating print) from counting,
not a program that sets out to forge its own run's diagnosis. The wrapper keeps the
function's name and signature (``functools.wraps``), so Tunix's per-function metric and its
signature inspection see the team's function. Only the names the profile lists are served.

Standard library only: it runs in the post-training image and the rehearsal's venv alike.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import numbers
import os
import secrets
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

FILE_ENV = "REWARD_GUARD_FILE"
NAMES_ENV = "REWARD_GUARD_FUNCTIONS"
MARK = "RECIPE-REWARD-ERROR"
ANNOUNCE = "RECIPE-REWARD-GUARD"
TOKEN_ENV = "REWARD_GUARD_TOKEN"  # "PID:TOKEN" of the process whose guard announced it

_loaded: ModuleType | None = None


def _process_token() -> str:
    """This process's token: the one an earlier copy of the guard announced, or a new one,
    announced now (a value another process left in the environment is not this one's)."""
    pid, _, token = os.environ.get(TOKEN_ENV, "").partition(":")
    if pid == str(os.getpid()) and token:
        return token
    token = secrets.token_hex(16)
    os.environ[TOKEN_ENV] = f"{os.getpid()}:{token}"
    print(f"{ANNOUNCE} {token}", file=sys.stderr, flush=True)
    return token


TOKEN = _process_token()  # at import: before any of the team's files is loaded


class RecipeRewardError(RuntimeError):
    """A reward function of the recipe broke its contract; the message names it."""


def _team_module() -> ModuleType:
    global _loaded
    if _loaded is None:
        path = os.environ.get(FILE_ENV, "")
        spec = importlib.util.spec_from_file_location("tpurl_recipe_rewards", path)
        if not path or spec is None or spec.loader is None:
            _stop("(loading)", f"{FILE_ENV} names no Python file ({path!r})")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # the team's import error is theirs to fix
            _stop("(loading)", f"importing {path} raised {type(exc).__name__}: {exc}")
        _loaded = module
    return _loaded


def _stop(function: str, problem: str) -> Any:
    print(f"{MARK} {TOKEN} " + json.dumps({"function": function, "problem": problem}),
          file=sys.stderr, flush=True)
    raise RecipeRewardError(f"reward function {function}: {problem}")


def _scores(name: str, result: object, count: int) -> list[float]:
    """One finite number per completion, or the program stops naming ``name``."""
    if hasattr(result, "tolist"):  # numpy and jax arrays
        result = result.tolist()  # type: ignore[union-attr]
    if not isinstance(result, list | tuple):
        return _stop(name, f"returned {type(result).__name__}, not a list of one number per "
                           f"completion ({count})")
    if len(result) != count:
        return _stop(name, f"returned {len(result)} scores for {count} completions")
    scores = []
    for index, value in enumerate(result):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return _stop(name, f"score {index} is {type(value).__name__} {value!r}, not a number")
        if not math.isfinite(float(value)):
            return _stop(name, f"score {index} is {value!r}, not a finite number")
        scores.append(float(value))
    return scores


def _guarded(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> list[float]:
        completions = kwargs.get("completions", args[1] if len(args) > 1 else None)
        try:
            result = function(*args, **kwargs)
        except RecipeRewardError:
            raise
        except Exception as exc:
            return _stop(name, f"raised {type(exc).__name__}: {exc}")
        return _scores(name, result, len(completions) if completions is not None else 0)

    return guarded


def __getattr__(name: str) -> Callable[..., Any]:
    listed = [n for n in os.environ.get(NAMES_ENV, "").split(",") if n]
    if name.startswith("__") or name not in listed:
        raise AttributeError(name)
    function = getattr(_team_module(), name, None)
    if not callable(function):
        return _stop(name, f"{os.environ.get(FILE_ENV)} defines no function {name}")
    return _guarded(name, function)
