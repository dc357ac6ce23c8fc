"""Independent programs of one stage, run at once on this machine.

Why: the rehearsal's first evaluation scores the base model and the trained one, two
programs that each keep about one core busy; one after the other they left the second
core of a 2-core machine idle for about 40 s of a fresh clone's first result. On GKE the
two are Pathways JobSets on one slice and stay one after the other (flows/core/backend.py
``run_independent``).

Each program runs in the local backend's ``run_command`` in a daemon thread of its own,
announcing its process as soon as it exists; the caller's thread waits. Whatever
interrupts the caller's thread (Ctrl-C, the run's deadline, a cancel: signals and their
exceptions land only there) stops every program started, or about to start, and waits for
their threads to tidy up (pid tag removed, log closed) before it goes on: no program
outlives it and no thread can hold the interpreter's exit. A program that fails does not
stop the others: each ends on its own, so what they finish is verified and kept.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Sequence

from flows.common.threads import context_thread
from flows.core.backend import WorkloadRun

Started = Callable[[subprocess.Popen[str]], None]
# a program (or programs one after the other) run to the end, calling Started with each
# process the moment it exists
type Program[Result] = Callable[[Started], Result]
Outcome = WorkloadRun | BaseException
# how long an interrupted group waits for its threads: each program gets SIGTERM, then what
# is left of its group SIGKILL once it ended or 10 s later (backend._kill_group), then its
# thread removes the tag and closes the log
STOP_WAIT_S = 30.0
# how often the caller's thread looks whether the programs are done: a small delay next to
# programs that run for seconds
POLL_S = 0.02


class NotStarted(RuntimeError):
    """A program the group was stopped before it started."""


class ProgramGroup:
    """The processes of programs running together, stopped as one."""

    def __init__(self, stop_process: Callable[[subprocess.Popen[str]], None]) -> None:
        self._lock = threading.Lock()
        self._processes: list[subprocess.Popen[str]] = []
        self._stop_process = stop_process
        self.stopping = False

    def started(self, process: subprocess.Popen[str]) -> None:
        """Called by a program's thread once its process exists: one started after the group
        was stopped is stopped at once."""
        with self._lock:
            self._processes.append(process)
            stop_now = self.stopping
        if stop_now:
            self._stop_process(process)

    def stop(self) -> None:
        with self._lock:
            self.stopping = True
            processes = list(self._processes)
        for process in processes:
            self._stop_process(process)


def run_together[Result](programs: Sequence[Program[Result]],
                 stop_process: Callable[[subprocess.Popen[str]], None]
                 ) -> list[Result | BaseException]:
    """Run ``programs`` at once; what each returned, or the exception it ended with, in
    their order. An exception in the caller's thread stops them all, then is raised."""
    outcomes: list[Result | BaseException] = [NotStarted("not started") for _ in programs]
    group = ProgramGroup(stop_process)
    # Each thread says it is done by setting its flag, and the caller's thread polls the
    # flags between sleeps: no lock of the caller's is involved that a Ctrl-C could leave in
    # a wrong state. Thread.join is not used because a Ctrl-C landing in it (CPython 3.12
    # threading._wait_for_tstate_lock) marks the running thread stopped, so a second join
    # returns at once while it still runs; an Event is not used because a Ctrl-C landing on
    # the entry of its Condition's __exit__ leaves the Condition's lock held, and the next
    # wait on it never returns. Both seen in tests/backends/local/test_program_group.py.
    finished = [False for _ in programs]

    def work(index: int) -> None:
        try:
            if not group.stopping:
                outcomes[index] = programs[index](group.started)
        except BaseException as exc:  # handed to the caller's thread, which decides
            outcomes[index] = exc
        finally:
            finished[index] = True

    # in the caller's context: the programs log to the run's Prefect API (flows/common/threads.py)
    threads = [context_thread(work, i, name=f"program-{i}") for i in range(len(programs))]
    try:
        for thread in threads:
            thread.start()
        while not all(finished):
            time.sleep(POLL_S)
    except BaseException:
        group.stop()
        deadline = time.monotonic() + STOP_WAIT_S
        # a thread not started yet (its start interrupted) still starts, sees the group
        # stopped and ends at once: waited for only once it has started
        while (not all(done or thread.ident is None
                       for done, thread in zip(finished, threads, strict=True))
               and time.monotonic() < deadline):
            time.sleep(POLL_S)
        raise
    return outcomes
