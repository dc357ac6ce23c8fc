"""A user's cancel ends the running stage as Cancelled, not Crashed.

How Prefect 3.9.1 cancels a deployment's run: the runner (or process worker) first sends the
flow's process a ``cancel`` intent over its control channel, then SIGTERM
(prefect/runner/_cancellation_manager.py ``cancel``: intent, then kill with a 30 s grace).
The flow's process turns SIGTERM into ``TerminationSignal`` in the main thread, inside
whatever the running task is doing (prefect/utilities/engine/__init__.py
``capture_sigterm``). The flow engine reads the intent and ends the flow Cancelled
(prefect/flow_engine.py ``except TerminationSignal`` → ``handle_cancellation``), but the
task engine handles every ``TerminationSignal`` as a crash (prefect/task_engine.py
``except TerminationSignal`` → ``handle_crash``: "Crash detected! Execution was aborted by
a termination signal."). So the stage's task catches the signal itself when the intent is
a cancel and returns a Cancelled state (a task returning a State ends in it,
prefect/states.py ``return_value_to_state``); the flow (flows/pipeline.py ``_run_stage``)
then raises a ``TerminationSignal`` again in its body, where the flow engine ends the run
Cancelled as it would have. A SIGTERM without a cancel intent (the machine shutting down, a
crash) still ends the task Crashed.
"""

from __future__ import annotations

import signal

from prefect.exceptions import TerminationSignal
from prefect.states import Cancelled, State

CANCELLED_MESSAGE = "{stage}: cancelled by the user; the stages after it did not run"


def cancelled_by_user(exc: BaseException) -> bool:
    """True for the SIGTERM a runner sends after a cancel intent (see the module text)."""
    if not isinstance(exc, TerminationSignal):
        return False
    from prefect._internal.control_listener import get_intent

    return get_intent() == "cancel"


def cancelled_state(stage: str) -> State:
    return Cancelled(message=CANCELLED_MESSAGE.format(stage=stage))


def resume_cancel() -> TerminationSignal:
    """The signal to raise in the flow's body once the stage has ended Cancelled, so the
    flow engine ends the run as the cancel asked (its intent is still set)."""
    return TerminationSignal(signal=signal.SIGTERM)
