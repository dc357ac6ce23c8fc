"""The run's own time bound (flows/core/deadline.py; flows/core/budgets.py ``run_bound_s``, from
flows/core/budgets.py).

On a real Prefect API: the real flow with a train stage that runs a real program (and its
child) that sleeps, a tiny ``flow_timeout_s``, and what a user then sees: the run ended by
itself in Prefect's TimedOut state, the state naming the bound, its field and the fix, the
programs stopped as a cancel stops them, the stage table and the log saying so. Also: a
stage's task timeout still interrupts a blocking call inside the run's bound (the reason the
bound does not use SIGALRM).
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest
from prefect import flow, task
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId, TaskRunFilter

from flows import pipeline
from flows.backends import backend_for
from flows.config import Profile, load_profile
from flows.console.output import render
from flows.core.budgets import run_bound_s, timed_out_message
from flows.core.deadline import SIGNAL, Deadline, RunTimedOut
from flows.core.stage import StageOutput
from tests.runpage.test_live_page import GatedStage, _artifacts, _table
from tests.support.prefect_server import wait_until

# Mostly waiting for the 30 s bound to pass: a realtime lane's, beside the CPU-bound tiers
pytestmark = [pytest.mark.services, pytest.mark.realtime]

# The stuck program: starts a child of its own, says both pids, then sleeps without end.
STUCK = ("import os, subprocess, sys, time\n"
         "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(900)'])\n"
         "print('PIDS', os.getpid(), child.pid, flush=True)\n"
         "time.sleep(900)\n")


def stage_timeout_s(profile: Profile, stage: str) -> float:
    """As the flow asks it: of the run's backend."""
    return backend_for(profile).stage_timeout_s(stage)


def run_timeout_s(profile: Profile, stages: list[str]) -> float:
    backend = backend_for(profile)
    return run_bound_s(profile, [backend.stage_timeout_s(stage) for stage in stages])


class StuckTrain:
    """The train stage as a real program through the real LocalBackend, which never ends."""

    name = "train"

    def execute(self, ctx, upstream) -> StageOutput:
        root = ctx.profile.local.root
        ctx.backend.run_command("stuck-train", [sys.executable, "-u", "-c", STUCK],
                                f"file://{root}/train/tpurl-logs/stuck-train.log")
        raise AssertionError("the stuck program ended")  # pragma: no cover


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # ended (a zombie waits for a parent that is not us)


def test_the_bound_is_the_stages_bounds_with_retries_unless_the_profile_sets_it():
    stages = ["image", "infra", "convert", "train", "export"]
    rehearsal = load_profile("rehearsal")
    per_attempt = sum(stage_timeout_s(rehearsal, s) for s in stages)
    assert run_timeout_s(rehearsal, stages) > 3 * per_attempt  # three attempts each, + delays
    assert run_timeout_s(load_profile("rehearsal", {"flow_timeout_s": "90"}), stages) == 90


def test_the_message_names_the_bound_its_fields_and_the_fix():
    derived = timed_out_message(load_profile("rehearsal"), 7200, "train")
    assert "2.0 h" in derived and "local.step_timeout_s" in derived
    assert "while train was running" in derived and "--set flow_timeout_s=SECONDS" in derived
    set_ = timed_out_message(load_profile("rehearsal", {"flow_timeout_s": "30"}), 30, None)
    assert "(flow_timeout_s)" in set_ and "between stages" in set_ and "raise flow_timeout_s" in set_
    assert render(RunTimedOut(derived), None).startswith("[stalled] the run of rehearsal")


def test_a_block_that_ends_in_time_is_left_alone_and_the_handler_restored():
    before = signal.getsignal(SIGNAL)
    with Deadline(600, lambda: "never"):
        assert signal.getsignal(SIGNAL) is not before
    assert signal.getsignal(SIGNAL) is before


def test_a_blocking_call_is_interrupted_at_the_deadline():
    with pytest.raises(RunTimedOut, match="the bound passed"), Deadline(1, lambda: "the bound passed"):
        time.sleep(600)


def test_a_stuck_run_ends_by_itself_timed_out_with_its_programs_stopped(
        prefect_api: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    root = tmp_path / "root"
    stages = {name: GatedStage(name, "skipped", {}) for name in ("image", "infra", "convert")}
    stages |= {"train": StuckTrain(), "export": GatedStage("export", "ran", {})}
    monkeypatch.setattr(pipeline, "STAGE_BY_NAME", stages)
    # 30 s: the run reaches the program well before; the program's own bound (30 min) and
    # the train task's (2 h) are far off, so only the run's bound can end it.
    state = pipeline.rl_post_training(profile="rehearsal", overrides={
        "local.root": str(root), "flow_timeout_s": "30"}, return_state=True)

    assert state.is_failed() and state.name == "TimedOut", state
    assert "passed its time bound of 30 s (flow_timeout_s) while train was running" in state.message
    assert "its programs were stopped" in state.message
    assert "--set flow_timeout_s=SECONDS" in state.message
    with pytest.raises(RunTimedOut):
        state.result()

    log = (root / "train" / "tpurl-logs" / "stuck-train.log").read_text()
    program, child = (int(p) for p in log.split("PIDS", 1)[1].split()[:2])
    assert _gone(program)
    wait_until(lambda: _gone(child), 30, f"the program's child {child} to end")
    assert not (root / "train" / "tpurl-logs" / "stuck-train.pid").exists()

    run_id = state.state_details.flow_run_id
    table = _table(_artifacts(run_id)["tpurl-rehearsal-stages"])
    statuses = [r["status"] for r in table]  # export, and evaluate where the profile has it
    assert statuses[:4] == ["skipped", "skipped", "skipped", "timedout"], statuses
    assert statuses[4:] and set(statuses[4:]) == {"not run"}, statuses

    def said() -> list[str]:
        with get_client(sync_client=True) as client:
            return [e.message for e in client.read_logs(log_filter=LogFilter(
                flow_run_id=LogFilterFlowRunId(any_=[run_id])))
                if e.message.startswith("run stopped during train (its time bound passed)")]

    assert "The profile's lock is released" in wait_until(said, 30, "the stop explanation")[0]
    with get_client(sync_client=True) as client:
        tasks = client.read_task_runs(task_run_filter=TaskRunFilter(
            flow_run_id={"any_": [run_id]}))
        train = next(t for t in tasks if t.name.startswith("train"))
        assert train.state is not None and train.state.is_crashed()  # as on a cancel
        assert client.read_global_concurrency_limit_by_name(
            "tpurl-profile-rehearsal").active_slots == 0


@task(timeout_seconds=1)
def _sleeps() -> None:
    time.sleep(600)


@flow
def _bounded() -> str:
    with Deadline(600, lambda: "the run's bound"):
        state = _sleeps(return_state=True)
    return state.name


def test_a_task_timeout_still_interrupts_a_blocking_call_inside_the_bound(prefect_api: None):
    assert _bounded() == "TimedOut"
