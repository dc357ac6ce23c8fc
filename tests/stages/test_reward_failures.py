"""A broken reward function of the recipe, seen by the train and evaluate stages: the real
stages over the fake backend (tests/fakes/stage_backend.py), whose failing program prints
what images/rehearsal/reward_guard.py prints and exits 1, diagnosed from its log tail as the
local backend diagnoses it. The stage makes it the user's error with its code, and the
flow's retry condition (flows/pipeline.py ``retry_if_retryable``) refuses to retry it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prefect.states import Failed

from flows.core.failures import FailureCategory, StageFailed
from flows.core.recipe_files import REWARD_ERROR_MARK, REWARD_GUARD_ANNOUNCE
from flows.core.reward_failures import REWARD_CODE
from flows.pipeline import retry_if_retryable
from tests.fakes.stage_backend import backend_at, run_all

TRACEBACK = ["Traceback (most recent call last):",
             '  File "train_rl.py", line 400, in <module>',
             "reward_guard.RecipeRewardError: reward function ascii_fraction_reward: returned "
             "3 scores for 4 completions"]


TOKEN = "0123456789abcdef" * 2
ANNOUNCED = f"{REWARD_GUARD_ANNOUNCE} {TOKEN}"  # the guard's first line, at its import


def _marked(function: str, problem: str, token: str = TOKEN) -> str:
    return (f"{REWARD_ERROR_MARK} {token} "
            + json.dumps({"function": function, "problem": problem}))


def _not_retried(failure: StageFailed) -> bool:
    """What Prefect asks the task's retry condition about a failed attempt."""
    return not retry_if_retryable(None, None, Failed(data=failure))


@pytest.mark.parametrize("workload", ["train-grpo", "evaluate-trained"])
def test_a_broken_reward_function_is_the_users_error_and_not_retried(
        tmp_path: Path, workload: str) -> None:
    backend = backend_at(tmp_path)
    backend.failing[workload] = [
        ANNOUNCED, "step 1", _marked("ascii_fraction_reward", "returned 3 scores for 4 completions"),
        *TRACEBACK]
    with pytest.raises(StageFailed) as failed:
        run_all(backend, with_eval=True)
    diagnosis = failed.value.diagnosis
    assert failed.value.stage == workload.split("-")[0]
    assert diagnosis.category is FailureCategory.USER_ERROR and diagnosis.code == REWARD_CODE
    assert diagnosis.summary == ("the recipe's reward function ascii_fraction_reward: "
                                 "returned 3 scores for 4 completions")
    assert "recipe.rewards.file" in diagnosis.fix
    assert isinstance(failed.value.__cause__, StageFailed)  # the program's own diagnosis
    assert not diagnosis.retryable and _not_retried(failed.value)


def test_a_marked_line_past_the_log_tail_is_found_in_the_whole_log(tmp_path: Path) -> None:
    """A traceback through JAX and Tunix is longer than the tail a diagnosis keeps: the
    stage reads the program's log for the line."""
    backend = backend_at(tmp_path)
    backend.failing["train-grpo"] = [ANNOUNCED,
                                     _marked("ascii_fraction_reward", "raised ValueError: x"),
                                     *[f"  frame {n}" for n in range(200)], *TRACEBACK]
    with pytest.raises(StageFailed) as failed:
        run_all(backend)
    assert REWARD_ERROR_MARK not in (failed.value.__cause__.diagnosis.detail  # type: ignore[union-attr]
                                     or "")
    assert failed.value.diagnosis.code == REWARD_CODE
    assert failed.value.diagnosis.summary.endswith("raised ValueError: x")
    assert failed.value.log_uri is not None and failed.value.log_uri.endswith("train-grpo.log")


def test_another_failure_of_the_program_stays_what_it_was(tmp_path: Path) -> None:
    backend = backend_at(tmp_path)
    backend.failing["train-grpo"] = ["Traceback (most recent call last):",
                                     "ValueError: num_batches must be positive"]
    with pytest.raises(StageFailed) as failed:
        run_all(backend)
    assert failed.value.diagnosis.code == ""
    assert "num_batches must be positive" in failed.value.diagnosis.summary


HOST_LOST = ["Traceback (most recent call last):",
             "RuntimeError: DEADLINE_EXCEEDED: the Pathways workers stopped answering"]


@pytest.mark.parametrize("printed", [
    # the guard's line as it read before it carried a token, printed by a reward function
    f"{REWARD_ERROR_MARK} " + json.dumps({"function": "f", "problem": "call the admins"}),
    # a mark with a token the guard never announced
    _marked("f", "call the admins", token="f" * 32),
    # the mark inside a line (a completion the trainer logs)
    "sample completion: " + _marked("f", "call the admins"),
    # the guard's token, a body that is not the guard's JSON
    f"{REWARD_ERROR_MARK} {TOKEN} call the admins",
])
def test_a_line_that_only_looks_like_the_guards_does_not_count(tmp_path: Path,
                                                               printed: str) -> None:
    """Text of the team's code or the model in the log cannot turn another failure into
    the recipe's user error (never retried) nor put its words in the diagnosis."""
    backend = backend_at(tmp_path)
    backend.failing["train-grpo"] = [ANNOUNCED, "step 1", printed, *HOST_LOST]
    with pytest.raises(StageFailed) as failed:
        run_all(backend)
    assert failed.value.diagnosis.code != REWARD_CODE
    assert "call the admins" not in failed.value.diagnosis.summary


def test_without_the_guards_announcement_no_mark_counts(tmp_path: Path) -> None:
    backend = backend_at(tmp_path)
    backend.failing["train-grpo"] = ["step 1", _marked("f", "call the admins"), *HOST_LOST]
    with pytest.raises(StageFailed) as failed:
        run_all(backend)
    assert failed.value.diagnosis.code != REWARD_CODE
