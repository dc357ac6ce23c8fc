"""What the run page's Logs tab shows of a diagnosed failure: its text once, readable.

Prefect's engines log every failure as the exception's ``repr`` with its traceback: the task
engine ("Task run failed with exception: StageFailed('...') - Retries are exhausted",
prefect/task_engine.py ``handle_retry``), the flow engine ("Encountered exception during
execution: %r", prefect/flow_engine.py ``run_context``), the worker's ``run_flow`` wrapper
("Engine execution exited with unexpected exception") and "Finished in state Failed('...')"
with the whole message again. In the UI a ``repr`` is one line of ``\\n`` escapes, and a
profile refused at validation read as 7 problems × 3 copies and two tracebacks.

This filter sits on Prefect's API log handler only (logging.yml: ``prefect.flow_runs`` and
``prefect.task_runs`` → ``api``), so the terminal and `tpurl run`'s log file keep the full
records. For a failure we diagnosed (a StageFailed that is not an internal error, a profile
or environment error: ``diagnosis_of`` of flows/console/output.py, whose text it shows too) the
first record becomes the diagnosis as the CLI prints it, with no traceback; its repeats are
dropped. Every "Finished in state" line keeps the first line of its state's message (the
whole message is the failure logged once). An undiagnosed failure (our bug)
keeps its traceback.
Python 3.12's ``Handler.handle`` uses a LogRecord a filter returns in place of the original,
so the other handlers see the record unchanged.
"""

from __future__ import annotations

import copy
import logging
from collections import OrderedDict
from typing import Any

from flows.console.output import diagnosis_of, render

RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")  # prefect/logging/logging.yml
# runs whose shown diagnoses are remembered: a served process runs many flows one after the
# other, and a run's repeats arrive within seconds of its first record
REMEMBERED_RUNS = 64


class _Summary:
    """Stands in for an exception in a retry line's ``%r``: its diagnosis on one line."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


class ReadableFailures(logging.Filter):
    """A diagnosed failure once, as text; see the module docstring."""

    def __init__(self) -> None:
        super().__init__("tpurl-readable-failures")
        # the diagnoses already in each run's log, by text: the flow re-raises a task's
        # failure from its state, which may be a copy of the exception object. Per flow run
        # (both run loggers' records carry ``flow_run_id``, prefect/logging/loggers.py): a
        # `serve` process runs many flows, and the next run failing the same way must still
        # show its diagnosis once
        self.shown: OrderedDict[str, set[str]] = OrderedDict()

    def _first_time(self, record: logging.LogRecord, text: str) -> bool:
        run = str(getattr(record, "flow_run_id", ""))
        seen = self.shown.setdefault(run, set())
        self.shown.move_to_end(run)
        while len(self.shown) > REMEMBERED_RUNS:
            self.shown.popitem(last=False)
        if text in seen:
            return False
        seen.add(text)
        return True

    def filter(self, record: logging.LogRecord) -> bool | logging.LogRecord:
        exc = record.exc_info[1] if record.exc_info else None
        found = diagnosis_of(exc) if exc is not None else None
        if found is not None:
            text = render(found, None)
            if not self._first_time(record, text):
                return False
            shown = copy.copy(record)
            shown.msg, shown.args = text, ()
            shown.exc_info, shown.exc_text = None, None
            return shown
        if isinstance(record.args, tuple) and len(record.args) > 1 and \
                (retried := diagnosis_of(_exception(record.args[1]))) is not None:
            shown = copy.copy(record)  # "Task run failed with %s: %r - Retry %s/%s will start %s"
            shown.args = (record.args[0], _Summary(render(retried, None).splitlines()[0]),
                          *record.args[2:])
            return shown
        if isinstance(record.msg, str) and record.msg.startswith("Finished in state ") and \
                "\\n" in record.msg:
            shown = copy.copy(record)  # a many-line state message, logged in full once
            shown.msg = record.msg.split("\\n", 1)[0] + " …')"
            return shown
        return True


def _exception(value: Any) -> BaseException | None:
    return value if isinstance(value, BaseException) else None


def readable_failures() -> None:
    """Put the filter on the API log handler of Prefect's run loggers (once per process)."""
    from prefect.logging.handlers import APILogHandler

    for name in RUN_LOGGERS:
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, APILogHandler) and not any(
                    isinstance(f, ReadableFailures) for f in handler.filters):
                handler.addFilter(ReadableFailures())
