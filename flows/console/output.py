"""What `tpurl run` and `tpurl teardown` print when they fail: a diagnosed failure once, as
category, summary, the path or field, the fix and where the full log is.

Prefect's engines log every failure with its traceback ("Encountered exception during
execution", "Task run failed with exception", then "Finished in state Failed(...)" with the
whole message again), 40-110 lines for an error we already diagnosed. While a command runs,
every log record also goes to a log file; the terminal drops the records that only repeat a
diagnosed failure. An undiagnosed failure (an internal error: our bug) keeps its traceback
on the terminal too.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flows.common.paths import default_cache_dir
from flows.config.errors import EnvironmentNotReady, ProfileError
from flows.config.recipe import TAKEN_METRIC_NAMES
from flows.core.deadline import RunTimedOut
from flows.core.failures import FailureCategory, StageFailed
from flows.core.safe_writes import FULL_ERRNOS
from flows.run.result import PipelineResult


def diagnosis_of(exc: BaseException | None) -> StageFailed | ProfileError | None:
    """The diagnosed failure in ``exc`` or what it was raised from; None for an internal
    error or anything undiagnosed."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, StageFailed):
            return exc if exc.diagnosis.category is not FailureCategory.INTERNAL else None
        if isinstance(exc, ProfileError | EnvironmentNotReady):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def render(exc: BaseException, log: Path | None) -> str:
    """The one message for a failure (diagnosed or not), with where the full log is."""
    where = f"\n  full log: {log}" if log else ""
    found = diagnosis_of(exc)
    if isinstance(found, StageFailed):
        d = found.diagnosis
        stage_log = f"\n  stage log: {found.log_uri}" if found.log_uri else ""
        code = f" {d.code}" if d.code else ""
        return (f"[{d.category}{code}] stage {found.stage}: {d.summary}\n{d.detail.rstrip()}\n"
                f"  fix: {d.fix}{stage_log}{where}")
    if found is not None:
        return f"[{FailureCategory.USER_ERROR}] {found}{where}"
    if isinstance(exc, RunTimedOut):  # the message names the bound, its fields and the fix
        return f"[{FailureCategory.STALLED}] {exc}{where}"
    from flows.console.interrupts import ApiUnreachable

    if isinstance(exc, ApiUnreachable):  # the URL or its server; the message has the fix
        return f"[{FailureCategory.INFRASTRUCTURE}] {exc}{where}"
    return f"[{FailureCategory.INTERNAL}] {type(exc).__name__}: {exc}{where}"


def reward_curves(steps: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Pure: each reward function's mean per logged step, by the function's name. Tunix logs
    one as ``rewards/train/<name>`` beside the totals (flows/config/recipe.py names those), so
    a recipe's own functions show as they are called."""
    curves: dict[str, list[float]] = {}
    for step in steps:
        for tag, value in step.items():
            parts = tag.split("/")
            if len(parts) == 3 and parts[:2] == ["rewards", "train"] \
                    and parts[2] not in TAKEN_METRIC_NAMES and isinstance(value, int | float):
                curves.setdefault(parts[2], []).append(float(value))
    return curves


def final_lines(result: PipelineResult, result_uri: str, log: Path | None) -> list[str]:
    """Pure: what a finished `tpurl run` ends with: the result file, the logs, the three
    artifact URIs, the training's final reward and loss, and each reward function's curve
    (no UI link: with tpurl's own API server it dies with the command)."""
    lines = [f"  {name}: {uri}" for name, uri in result.artifacts.items()]
    steps = result.metrics.get("steps", [])
    reward = next((s for s in reversed(steps) if "rewards/train/mean" in s), None)
    loss = next((s for s in reversed(steps) if "actor/train/loss" in s), None)
    if reward or loss:
        parts = [f"reward {reward['rewards/train/mean']:.4g} (step {reward['step']})"
                 if reward else "no reward logged",
                 f"loss {loss['actor/train/loss']:.4g} (step {loss['step']})"
                 if loss else "no loss logged"]
        lines.append(f"  training ended with {', '.join(parts)}")
    lines += [f"  {name} per step: {', '.join(f'{v:.4g}' for v in values)}"
              for name, values in reward_curves(steps).items()]
    lines.append(f"  result: {result_uri}")
    lines.append(f"  logs: {log or 'not kept'} (each stage's program log is in tpurl-logs/ "
                 "beside its output)")
    return lines


class _RepeatsOfDiagnosed(logging.Filter):
    """Drops, from the terminal only, records that carry or repeat a diagnosed failure, and
    the UI link of an API that dies with the command."""

    def __init__(self, private_api: bool) -> None:
        super().__init__()
        self.texts: list[str] = []
        self.private_api = private_api

    def filter(self, record: logging.LogRecord) -> bool:
        if self.private_api and record.name.startswith("prefect.flow_runs") and \
                str(record.msg).startswith("View at "):
            return False
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and diagnosis_of(exc) is not None:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            if first and first not in self.texts:
                self.texts.append(first)
            return False
        if record.levelno >= logging.INFO and self.texts and \
                record.name.startswith(("prefect.flow_runs", "prefect.task_runs")):
            message = record.getMessage()
            if any(text in message for text in self.texts):
                return False
        return True


class _LogFile(logging.FileHandler):
    """The command's log file. When its disk fills, it stops with one line saying so,
    instead of logging's traceback for every record that follows."""

    full = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.full:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError) or exc.errno not in FULL_ERRNOS:
            super().handleError(record)
            return
        self.full = True
        with contextlib.suppress(OSError):
            self.close()
        print(f"warning: the log file {self.baseFilename} stops here: {exc.strerror}; free "
              f"space under {Path(self.baseFilename).parent} (the terminal keeps the rest)",
              file=sys.stderr)


def _terminal_handlers() -> list[logging.Handler]:
    return [h for h in logging.getLogger().handlers
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]


@contextlib.contextmanager
def command_log(command: str, profile: str, private_api: bool) -> Iterator[Path | None]:
    """Every log record of this command into a file (its path, or None when none could be
    opened); the terminal keeps all but the repeats of a diagnosed failure."""
    from prefect.logging.configuration import ensure_logging_setup

    ensure_logging_setup()  # Prefect's console handler exists before it is filtered

    folder = default_cache_dir() / "logs"
    wanted = folder / f"{command}-{profile.replace('/', '_')}-" \
                      f"{time.strftime('%Y%m%d-%H%M%S')}.log"
    path: Path | None = wanted
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler | None = _LogFile(wanted, encoding="utf-8")
    except OSError:
        handler, path = None, None
    root = logging.getLogger()
    if handler is not None:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        root.addHandler(handler)
    quiet = _RepeatsOfDiagnosed(private_api)
    terminals = _terminal_handlers()
    for terminal in terminals:
        terminal.addFilter(quiet)
    try:
        yield path
    finally:
        for terminal in terminals:
            terminal.removeFilter(quiet)
        if handler is not None:
            root.removeHandler(handler)
            handler.close()
