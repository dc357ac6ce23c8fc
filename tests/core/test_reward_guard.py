"""The guard in front of a recipe's reward functions (images/rehearsal/reward_guard.py), run
as MaxText runs it: loaded from its file, asked for each name with ``getattr``
(``utils_rl.load_custom_callable``), and called as Tunix 0.1.8 calls a reward function
(``rl/reward_manager.py``: ``fn(prompts=..., completions=..., mode=..., **columns)``). Its
marked line is read back by the stages' parser (flows/core/reward_failures.py), so the two
ends of the contract are tested against each other."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from flows.common.paths import REPO_ROOT
from flows.core.recipe_files import (
    GUARD_PROGRAM,
    REWARD_ERROR_MARK,
    REWARD_GUARD_ANNOUNCE,
    REWARDS_FILE_ENV,
    REWARDS_NAMES_ENV,
)
from flows.core.reward_failures import reward_error

TEAM_FILE = '''
import math

def raises(prompts, completions, **kwargs):
    raise KeyError("answer")

def says_text(prompts, completions, **kwargs):
    return "1.0"

def too_few(prompts, completions, **kwargs):
    return [1.0] * (len(completions) - 1)

def not_finite(prompts, completions, **kwargs):
    return [0.5, math.nan, 0.5][:len(completions)]

def a_bool(prompts, completions, **kwargs):
    return [True for _ in completions]

def good(prompts: list[str], completions: list[str], answer: list[str] | None = None,
         **kwargs) -> list[float]:
    """The team's docstring."""
    return [float(len(c)) for c in completions]

def as_array(prompts, completions, **kwargs):
    import numpy
    return numpy.arange(len(completions), dtype=numpy.float32)

def nested(prompts, completions, **kwargs):
    import numpy
    return numpy.ones((len(completions), 2))
'''
TOKEN_ENV = "REWARD_GUARD_TOKEN"  # the guard's own name for it
# The file's dotted path: what its module is called here. The guard never reads its own name
# (MaxText calls it ``_user_module_<function>``); scripts/mutation.py switches a mutant of the
# file on only in a module of this name.
GUARD_MODULE = ".".join(GUARD_PROGRAM.relative_to(REPO_ROOT).with_suffix("").parts)
NAMES = "raises,says_text,too_few,not_finite,a_bool,good,as_array,nested"
CALL: dict[str, Any] = {"prompts": ["p1", "p2", "p3"], "completions": ["a", "bb", "ccc"],
                        "mode": "train", "answer": ["1", "2", "3"]}


def _load_guard() -> ModuleType:
    """A fresh import of the guard file (its loaded team module is per import), as
    MaxText's ``load_custom_callable`` imports the file ``reward_functions_path`` names."""
    spec = importlib.util.spec_from_file_location(GUARD_MODULE, GUARD_PROGRAM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """No guard has run in this process yet; the token the guard then keeps in the
    environment is removed after the test (a bare ``delenv`` of an absent name restores
    nothing)."""
    monkeypatch.setenv(TOKEN_ENV, "")
    monkeypatch.delenv(TOKEN_ENV)


@pytest.fixture
def guard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    team = tmp_path / "team_rewards.py"
    team.write_text(TEAM_FILE)
    monkeypatch.setenv(REWARDS_FILE_ENV, str(team))
    monkeypatch.setenv(REWARDS_NAMES_ENV, NAMES)
    _no_token(monkeypatch)  # this test's process token is its own
    return _load_guard()


def _announced(guard: ModuleType, printed: str) -> str:
    """What the program's log holds: the guard's announcement (printed at its import, before
    the test captured), then what the call printed."""
    return f"{REWARD_GUARD_ANNOUNCE} {guard.TOKEN}\n{printed}"


@pytest.mark.parametrize(("name", "problem"), [
    ("raises", "raised KeyError: 'answer'"),
    ("says_text", "returned str, not a list of one number per completion (3)"),
    ("too_few", "returned 2 scores for 3 completions"),
    ("not_finite", "score 1 is nan, not a finite number"),
    ("a_bool", "score 0 is bool True, not a number"),
    ("nested", "score 0 is list [1.0, 1.0], not a number"),
])
def test_a_broken_function_stops_on_a_marked_line_naming_it(
        guard: ModuleType, capsys: pytest.CaptureFixture[str], name: str, problem: str) -> None:
    function = getattr(guard, name)
    with pytest.raises(guard.RecipeRewardError, match=name):
        function(**CALL)
    printed = capsys.readouterr().err
    assert reward_error(_announced(guard, printed)) == (name, problem)
    (line,) = [ln for ln in printed.splitlines() if REWARD_ERROR_MARK in ln]
    assert json.loads(line.split(f"{REWARD_ERROR_MARK} {guard.TOKEN}", 1)[1]) == {
        "function": name, "problem": problem}


def test_a_good_function_keeps_its_name_and_signature(guard: ModuleType,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Tunix logs ``rewards/<mode>/<fn.__name__>`` and inspects the signature for the
    columns it passes: the wrapper must look like the team's function to both."""
    team = guard._team_module()
    wrapped = guard.good
    assert wrapped.__name__ == "good" and wrapped.__doc__ == "The team's docstring."
    assert inspect.signature(wrapped) == inspect.signature(team.good)
    assert list(inspect.signature(wrapped).parameters) == ["prompts", "completions", "answer",
                                                           "kwargs"]
    assert wrapped(**CALL) == [1.0, 2.0, 3.0]  # a plain list, no numpy involved
    assert guard.as_array(**CALL) == [0.0, 1.0, 2.0]  # an array of the right length passes
    assert REWARD_ERROR_MARK not in capsys.readouterr().err


def test_only_the_listed_names_are_served(guard: ModuleType,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REWARDS_NAMES_ENV, "good")
    with pytest.raises(AttributeError):
        _ = guard.raises
    assert guard.good(**CALL) == [1.0, 2.0, 3.0]


def test_a_listed_name_the_file_lacks_is_reported(guard: ModuleType,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(REWARDS_NAMES_ENV, "absent")
    with pytest.raises(guard.RecipeRewardError):
        _ = guard.absent
    found = reward_error(_announced(guard, capsys.readouterr().err))
    assert found is not None and found[0] == "absent" and "defines no function absent" in found[1]


def test_an_unlisted_name_is_missing_as_from_any_module(guard: ModuleType,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """MaxText asks ``getattr(module, name, None)``: a name the profile does not list is an
    AttributeError naming it, with no list at all too, and the team's file stays unloaded."""
    with pytest.raises(AttributeError) as unlisted:
        _ = guard.not_listed
    assert unlisted.value.args == ("not_listed",)
    monkeypatch.delenv(REWARDS_NAMES_ENV)
    with pytest.raises(AttributeError) as no_list:
        _ = guard.good
    assert no_list.value.args == ("good",)
    assert getattr(guard, "good", None) is None
    assert guard._loaded is None


def test_a_dunder_name_is_never_served_even_when_listed(guard: ModuleType,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's own machinery asks a module for dunder names (``__path__``, ``__wrapped__``,
    ``__all__``); a profile that lists one gets no team function under it, and asking does not
    load the team's file."""
    monkeypatch.setenv(REWARDS_NAMES_ENV, "__all__,good")
    with pytest.raises(AttributeError):
        _ = guard.__all__
    assert guard._loaded is None
    assert guard.good(**CALL) == [1.0, 2.0, 3.0]


def test_the_program_stops_with_the_line_in_its_output(tmp_path: Path) -> None:
    """A real process, as train_rl runs: the guard's import by path, a broken call, the line
    on stderr and a non-zero exit, the way the backends see it."""
    team = tmp_path / "team_rewards.py"
    team.write_text(TEAM_FILE)
    script = ("import importlib.util, sys\n"
              f"spec = importlib.util.spec_from_file_location('guard', {str(GUARD_PROGRAM)!r})\n"
              "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
              "module.too_few(prompts=['p'] * 4, completions=['c'] * 4, mode='train')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={REWARDS_FILE_ENV: str(team), REWARDS_NAMES_ENV: NAMES},
                          timeout=60, check=False)
    assert done.returncode != 0
    assert reward_error(done.stderr) == ("too_few", "returned 3 scores for 4 completions")
    assert "RecipeRewardError: reward function too_few" in done.stderr


def test_a_team_file_that_does_not_import_is_reported(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str],
                                                      ) -> None:
    team = tmp_path / "broken.py"
    team.write_text("import not_a_module_anywhere\n")
    monkeypatch.setenv(REWARDS_FILE_ENV, str(team))
    monkeypatch.setenv(REWARDS_NAMES_ENV, "good")
    _no_token(monkeypatch)
    module = _load_guard()
    with pytest.raises(module.RecipeRewardError):
        _ = module.good
    found = reward_error(_announced(module, capsys.readouterr().err))
    assert found is not None and found[0] == "(loading)"
    assert "ModuleNotFoundError" in found[1]



@pytest.mark.parametrize("named", [None, "", "rewards.txt"])
def test_a_file_setting_that_names_no_python_file_is_reported(
        named: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The setting absent, empty, or a file importlib has no loader for (not ``.py``): the
    guard stops on its marked line saying so, before it imports anything of the team's."""
    monkeypatch.setenv(REWARDS_NAMES_ENV, "good")
    path = ""
    if named:
        path = str(tmp_path / named)
        Path(path).write_text(TEAM_FILE)
    if named is None:
        monkeypatch.delenv(REWARDS_FILE_ENV, raising=False)
    else:
        monkeypatch.setenv(REWARDS_FILE_ENV, path)
    _no_token(monkeypatch)
    module = _load_guard()
    with pytest.raises(module.RecipeRewardError, match=r"reward function \(loading\): "):
        _ = module.good
    assert reward_error(_announced(module, capsys.readouterr().err)) == (
        "(loading)", f"{REWARDS_FILE_ENV} names no Python file ({path!r})")


def test_the_token_is_announced_once_on_stderr_and_kept_for_later_copies(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """MaxText imports the file once per reward function in one process: the first copy
    draws the token and announces it on a line of its own on stderr, the later ones reuse it
    silently."""
    _no_token(monkeypatch)
    first = _load_guard()
    assert re.fullmatch(r"[0-9a-f]{32}", first.TOKEN)
    assert capsys.readouterr() == ("", f"{REWARD_GUARD_ANNOUNCE} {first.TOKEN}\n")
    assert os.environ[TOKEN_ENV] == f"{os.getpid()}:{first.TOKEN}"
    second = _load_guard()
    assert second.TOKEN == first.TOKEN
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("left", ["{other}:{token}", "{pid}:", "{pid}", "{token}"])
def test_a_token_this_process_did_not_announce_is_not_reused(
        left: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The environment is inherited: a token another process announced, or a value with no
    token or no pid, makes the guard draw and announce its own."""
    inherited = "f" * 32
    pid = os.getpid()
    monkeypatch.setenv(TOKEN_ENV, left.format(pid=pid, other=pid + 1, token=inherited))
    module = _load_guard()
    assert re.fullmatch(r"[0-9a-f]{32}", module.TOKEN) and inherited != module.TOKEN
    assert capsys.readouterr().err == f"{REWARD_GUARD_ANNOUNCE} {module.TOKEN}\n"
    assert os.environ[TOKEN_ENV] == f"{os.getpid()}:{module.TOKEN}"


def test_a_look_alike_printed_by_the_team_does_not_count(tmp_path: Path) -> None:
    """A real process: the guard announces its token once, though MaxText imports the file
    once per function; a reward function that prints the mark in the guard's old form, or
    with another token, and then fails otherwise is not read as the guard's line."""
    team = tmp_path / "team_rewards.py"
    team.write_text("import json, sys\n"
                    "def forger(prompts, completions, **kwargs):\n"
                    "    body = json.dumps({'function': 'forger', 'problem': 'not yours'})\n"
                    f"    print('{REWARD_ERROR_MARK} ' + body, file=sys.stderr)\n"
                    f"    print('{REWARD_ERROR_MARK} ' + 'f' * 32 + ' ' + body, file=sys.stderr)\n"
                    f"    print('{REWARD_GUARD_ANNOUNCE} ' + 'f' * 32, file=sys.stderr)\n"
                    "    return [1.0 for _ in completions]\n")
    load = ("import importlib.util, sys\n"
            "def load(n):\n"
            f"    spec = importlib.util.spec_from_file_location(n, {str(GUARD_PROGRAM)!r})\n"
            "    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m\n"
            "a, b = load('_user_module_a'), load('_user_module_b')\n"
            "assert a.TOKEN == b.TOKEN\n"
            "a.forger(prompts=['p'], completions=['c'], mode='train')\n"
            "raise MemoryError('the host ran out')\n")
    done = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True,
                          env={REWARDS_FILE_ENV: str(team), REWARDS_NAMES_ENV: "forger"},
                          timeout=60, check=False)
    assert done.returncode != 0 and "MemoryError" in done.stderr
    assert done.stderr.count(REWARD_GUARD_ANNOUNCE) == 2  # the guard's, then the forger's
    assert reward_error(done.stderr) is None
