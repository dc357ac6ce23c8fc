"""A time bound known only at run time, enforced the way a cancel stops a run.

Why not Prefect's flow timeout: Prefect reads ``timeout_seconds`` from the flow object when
the run starts (prefect/flow_engine.py ``FlowRunEngine.run_context``: ``timeout(seconds=
self.flow.timeout_seconds)``), before the flow has loaded the profile whose budgets decide
the bound. Why not Prefect's mechanism either (``AlarmCancelScope``, SIGALRM, in
prefect/_internal/concurrency/cancellation.py): a process has one real-time timer, and
while an alarm handler is installed ``cancel_sync_after`` gives every task timeout inside a
``WatcherThreadCancelScope`` instead, whose injected exception cannot interrupt a blocking
read, so the stages' own timeouts (flows/core/budgets.py) would stop working.

So a timer thread sends SIGUSR1 to the thread that entered the bound (``pthread_kill``: a
signal another thread receives would not interrupt the main thread's blocking read or wait),
and its handler raises :class:`DeadlinePassed`. That is a BaseException, like the
TerminationSignal Prefect raises on a cancel, so the same clean-up runs: a local program's
process group is stopped, a JobSet deleted, the stop explanation logged, the profile's lock
released; and no stage's ``except Exception`` turns it into a diagnosis. Leaving the bound
turns it into :class:`RunTimedOut`, a TimeoutError, which Prefect's flow engine ends in its
own ``Failed(name="TimedOut")`` state carrying the message (``handle_timeout``).

Off the main thread no signal handler can be installed: the exception is injected into the
thread (as Prefect's watcher scope does) and takes effect once its blocking call returns.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import signal
import threading
from collections.abc import Callable
from types import TracebackType

SIGNAL = signal.SIGUSR1
log = logging.getLogger(__name__)


class DeadlinePassed(BaseException):
    """Raised inside the bounded block at the deadline (never caught by ``except Exception``)."""


class RunTimedOut(TimeoutError):
    """The bounded block passed its deadline; the message says which bound and the fix."""


class Deadline:
    """``with Deadline(seconds, explain):`` — at ``seconds`` the block is interrupted and
    leaves with ``RunTimedOut(explain())``; ``explain`` is called at the deadline, in the
    timer thread, so it can name what was running then."""

    def __init__(self, seconds: float, explain: Callable[[], str]) -> None:
        self.seconds, self.explain = seconds, explain
        self.message: str | None = None  # set at the deadline
        self._armed = False
        self._timer: threading.Timer | None = None
        self._thread = threading.current_thread()
        self._previous: object = None
        self._signalled = False

    def __enter__(self) -> Deadline:
        self._thread = threading.current_thread()
        self._signalled = self._thread is threading.main_thread()
        if self._signalled:
            self._previous = signal.signal(SIGNAL, self._on_signal)
        else:
            log.warning("the run's time bound is enforced from a thread: it interrupts a "
                        "blocking call only once that call returns")
        self._armed = True
        self._timer = threading.Timer(self.seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()
        return self

    @property
    def passed(self) -> bool:
        return self.message is not None

    def _expire(self) -> None:
        if not self._armed:
            return
        try:
            self.message = self.explain()
        except Exception as exc:  # the bound must hold even if the text cannot be made
            self.message = f"the run passed its time bound of {self.seconds:.0f} s ({exc!r})"
        ident = self._thread.ident
        assert ident is not None
        if self._signalled:
            signal.pthread_kill(ident, SIGNAL)
        else:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident),
                                                       ctypes.py_object(DeadlinePassed))

    def _on_signal(self, signum: int, frame: object) -> None:
        if self._armed:
            raise DeadlinePassed(self.message or "deadline")

    def _disarm(self) -> None:
        self._armed = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join()
        if self._signalled:
            # The timer has ended, so a signal it sent has been delivered (and ignored:
            # disarmed) before the previous handler comes back.
            # what signal.signal returned on entry, a handler it takes back
            signal.signal(SIGNAL, self._previous)  # type: ignore[arg-type]

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with contextlib.suppress(DeadlinePassed):  # landed while disarming: the block had ended
            self._disarm()
        if exc is None or not self.passed or isinstance(exc, RunTimedOut):
            return
        if isinstance(exc, DeadlinePassed):
            raise RunTimedOut(self.message) from None
        # Interrupted code that turned the interruption into an error of its own
        raise RunTimedOut(self.message) from exc
