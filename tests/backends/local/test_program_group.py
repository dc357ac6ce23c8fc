"""Programs run together by the local backend (flows/backends/local/program_group.py), with real
processes: they do run at once (each waits for a file the other writes, so one after the
other would never end), a failure leaves the other to finish, and an interruption of the
caller's thread, wherever it lands, leaves no program, pid tag or thread behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from flows.backends.local import program_group
from flows.backends.local.backend import LocalBackend
from flows.backends.local.runtime import REHEARSAL_IMAGE
from flows.config import load_profile
from flows.core.backend import WorkloadRun, run_independent
from flows.core.failures import StageFailed
from flows.core.storage import file_uri
from flows.core.workload import Placement, Workload
from tests.support.interrupt_points import THREADING, InterruptAt, caused_by_interrupt, marked

RUN_TOGETHER = program_group.run_together.__code__


def _backend(tmp_path: Path) -> LocalBackend:
    profile = load_profile("rehearsal", {"local.root": str(tmp_path / "root"),
                                         "local.venv": sys.prefix}, environ={})
    return LocalBackend(profile, stage="test", timeout_s=3600)


def _shell(name: str, script: str) -> Workload:
    return Workload(name=name, image=REHEARSAL_IMAGE, argv=("/bin/sh", "-c", script),
                    placement=Placement(kind="cpu"))


def _log(tmp_path: Path, name: str) -> str:
    return file_uri(tmp_path / "logs" / f"{name}.log")


def _meet(me: Path, other: Path, then: str = "exit 0") -> str:
    """Write ``me``, wait (at most 60 s) for ``other``: only programs running at once meet."""
    return (f"echo started; touch {me}; i=0; while [ ! -e {other} ]; do i=$((i+1)); "
            f"[ $i -gt 1200 ] && echo never met && exit 9; sleep 0.05; done; echo met; {then}")


def test_independent_programs_run_at_once_and_each_keeps_its_log(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    a, b = tmp_path / "a-here", tmp_path / "b-here"
    runs = [(_shell("prog-a", _meet(a, b)), _log(tmp_path, "prog-a")),
            (_shell("prog-b", _meet(b, a)), _log(tmp_path, "prog-b"))]
    outcomes = run_independent(backend, runs)
    assert [type(o) for o in outcomes] == [WorkloadRun, WorkloadRun], outcomes
    for name in ("prog-a", "prog-b"):
        assert (tmp_path / "logs" / f"{name}.log").read_text().splitlines() == ["started", "met"]
    assert not list((tmp_path / "logs").glob("*.pid"))


def test_a_failed_program_leaves_the_others_to_finish(tmp_path: Path) -> None:
    """The base score that finishes is kept even when the trained one failed (evaluate)."""
    backend = _backend(tmp_path)
    a, b = tmp_path / "a-here", tmp_path / "b-here"
    runs = [(_shell("fails", _meet(a, b, "echo broken >&2; exit 3")), _log(tmp_path, "fails")),
            (_shell("slow", _meet(b, a, "sleep 1; echo finished")), _log(tmp_path, "slow"))]
    failed, finished = run_independent(backend, runs)
    assert isinstance(failed, StageFailed) and "broken" in (failed.diagnosis.detail or "")
    assert isinstance(finished, WorkloadRun)
    assert (tmp_path / "logs" / "slow.log").read_text().splitlines()[-1] == "finished"


def test_a_backend_without_room_runs_them_in_turn_and_stops_at_a_failure(tmp_path: Path) -> None:
    """GKE's way (one slice): a failure is returned, the programs after it are not run."""
    ran: list[str] = []

    class InTurn:
        storage = None

        def run_workload(self, workload: Workload, log_uri: str) -> WorkloadRun:
            ran.append(workload.name)
            if workload.name == "second":
                raise RuntimeError("no")
            return WorkloadRun(name=workload.name, wall_s=0.0, log_uri=log_uri)

        def clear_leftovers(self, stage: str, directory: str) -> int:
            return 0

    runs = [(_shell(n, "true"), _log(tmp_path, n)) for n in ("first", "second", "third")]
    first, second, third = run_independent(InTurn(), runs)  # type: ignore[arg-type]
    assert isinstance(first, WorkloadRun) and isinstance(second, RuntimeError) and third is None
    assert ran == ["first", "second"]


def test_ctrl_c_while_they_run_stops_every_program(tmp_path: Path) -> None:
    """A real SIGINT to this process while both programs run: KeyboardInterrupt out of the
    caller's wait, and every program, tag and thread gone before it is raised. The first
    program leaves a child in a session of its own (the group's signals miss it) that holds
    its output open for 3 s more, so its thread, the one the caller waits on first, is
    still reading when the second is done: a wait that returned before every thread was
    done (an interrupted Thread.join does, CPython 3.12) leaves the first program's tag. The
    second leaves a child in its group that ignores SIGTERM and would hold its output for a
    minute: the group's SIGKILL, once the program has ended, takes it."""
    backend = _backend(tmp_path)
    marker = f"tpurl-together-{uuid.uuid4().hex}"
    lingers = {"one": "setsid sh -c 'sleep 3; echo late' &",
               "two": "(trap '' TERM; sleep 60) &"}
    runs = [(_shell(n, f"trap 'exit 143' TERM; {lingers[n]} echo started; sleep 60 & wait; "
                       f": {marker}-{n}"), _log(tmp_path, n)) for n in ("one", "two")]

    began, sent = time.monotonic(), []

    def interrupt_once_both_run() -> None:
        deadline = began + 30
        while (not (both := marked(f"{marker}-one") and marked(f"{marker}-two"))
               and time.monotonic() < deadline):
            time.sleep(0.05)
        sent.append((round(time.monotonic() - began, 2), bool(both)))
        os.kill(os.getpid(), signal.SIGINT)

    threads_before = set(threading.enumerate())
    threading.Thread(target=interrupt_once_both_run, daemon=True).start()
    try:
        backend.run_workloads(runs)
    except KeyboardInterrupt:
        pass
    else:  # seen once in a loaded CI run (60 s: both programs ran to their end)
        pytest.fail(f"no KeyboardInterrupt after {time.monotonic() - began:.1f} s; SIGINT sent "
                    f"at (s, both running): {sent or 'never'}; SIGINT's handler now: "
                    f"{signal.getsignal(signal.SIGINT)}")
    assert marked(marker) == []
    assert not list((tmp_path / "logs").glob("*.pid"))
    assert not [t for t in set(threading.enumerate()) - threads_before
                if t.name.startswith("program-") and t.is_alive()]


def test_an_interrupt_at_any_point_of_the_wait_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every line of run_together and every entry into threading's code it makes. The wait
    polls once a second here, not every 20 ms: its loop's lines are the same points each
    time round, and a hundred rounds of them would only repeat the same cases."""
    monkeypatch.setattr(program_group, "POLL_S", 1.0)
    backend = _backend(tmp_path)
    points = []
    for target in range(1, 500):
        marker = f"tpurl-together-{uuid.uuid4().hex}"
        runs = [(_shell(n, f"echo started; sleep 2; : {marker}"), _log(tmp_path, n))
                for n in ("one", "two")]
        trace = InterruptAt(target, RUN_TOGETHER)
        sys.settrace(trace)
        try:
            backend.run_workloads(runs)
        except BaseException as exc:
            assert caused_by_interrupt(exc), f"interrupted at {trace.where}: {exc!r}"
        finally:
            sys.settrace(None)
        if trace.where == ("", 0):
            break  # ran to its end: every point before it was interrupted
        points.append(trace.where)
        deadline = time.monotonic() + 15
        while (left := marked(marker)) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, f"interrupted at {trace.where}: a program was left running"
        assert not list((tmp_path / "logs").glob("*.pid")), f"tag left at {trace.where}"
        deadline = time.monotonic() + 5  # a thread whose start was interrupted still starts,
        while (alive := [t for t in threading.enumerate()  # sees the group stopped, ends
                         if t.name.startswith("program-")]) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not alive, f"interrupted at {trace.where}: {alive} still running"
    else:
        raise AssertionError("never ran to its end")
    assert any(where[0] == THREADING for where in points)
    print(f"\n{len(points)} interrupt points, each left nothing behind")


def test_a_program_that_starts_after_the_group_stopped_is_stopped_at_once() -> None:
    """The race no line of the caller's thread shows: a program's thread past its check,
    its process appearing just after an interruption stopped the group."""
    group = program_group.ProgramGroup(lambda proc: proc.terminate())
    group.stop()
    late = subprocess.Popen(["sleep", "60"])
    try:
        group.started(late)
        assert late.wait(timeout=10) == -signal.SIGTERM
    finally:
        late.kill()
        late.wait()
