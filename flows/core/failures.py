"""Failure diagnosis: the one vocabulary for what went wrong and what to do about it.

The category decides the action (the failure model of docs/architecture.md): retry infrastructure faults with
backoff, resubmit preemptions, stop at once on user errors with the cause and the log tail.
Categories are a string enum that automations and events match on; they are never renamed.
A failure nobody diagnosed (an unexpected exception, our own bugs included) is an internal
error with its traceback, not the user's fault. Domain errors (image, infra, the backends)
carry a :class:`Diagnosis`, so a stage raises ``StageFailed(stage, exc.diagnosis)`` and never
guesses a category from an exception's type name. Whether an error is an infrastructure fault is decided
in one place, :mod:`flows.core.retry`.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import traceback
from collections.abc import Callable
from dataclasses import dataclass

# FailureCategory is declared beside the codes it goes with; imported from here as before
from flows.common.failure_codes import Failure
from flows.common.failure_codes import FailureCategory as FailureCategory
from flows.core.retry import infrastructure_exception_line

RETRYABLE = frozenset({FailureCategory.PREEMPTED, FailureCategory.INFRASTRUCTURE})

_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Mismatch)\b.*)$")


@dataclass(frozen=True)
class Diagnosis:
    """``code`` is an optional finer, equally stable id inside the category (e.g.
    ``image/patch-mismatch``) for automations that match one cause. It is a field, never
    part of ``summary``: the ``tpurl.stage.failed`` event carries it as a payload field
    (empty when none was set), ``render`` (the text of the flow's failed result) on a line
    of its own, and the CLI's one-message printer beside the category."""

    category: FailureCategory
    summary: str
    detail: str
    fix: str
    code: str = ""

    @property
    def retryable(self) -> bool:
        return self.category in RETRYABLE

    def render(self) -> str:
        code = f"  code: {self.code}\n" if self.code else ""
        return (f"[{self.category}] {self.summary}\n{code}  what to do: {self.fix}\n"
                f"  detail:\n{self.detail}")


def diagnose_exit(workload: str, returncode: int, log_tail: list[str],
                  timed_out: bool = False, timeout_s: float | None = None) -> Diagnosis:
    """Classify a finished local process. ``log_tail`` is already redacted."""
    tail = "\n".join(f"    {line}" for line in log_tail[-30:])
    if timed_out:
        return Diagnosis(FailureCategory.STALLED, f"{workload} made no exit within {timeout_s:.0f} s",
                         tail, "look at the last log lines for a hang (GRPO can stall); raise "
                         "local.step_timeout_s if the step is just slow")
    exception = _last_exception(log_tail)
    if returncode < 0:
        sig = signal.Signals(-returncode).name if -returncode in signal.Signals else str(-returncode)
        if -returncode == signal.SIGKILL:
            return Diagnosis(FailureCategory.USER_ERROR, f"{workload} was killed (SIGKILL), most "
                             "likely by the out-of-memory killer", tail,
                             "free memory or shrink the step (batch, lengths); the same config "
                             "will be killed again")
        return Diagnosis(FailureCategory.INFRASTRUCTURE, f"{workload} was stopped by {sig}", tail,
                         "it was interrupted from outside; it is retried automatically")
    if exception and infrastructure_exception_line(exception):
        return Diagnosis(FailureCategory.INFRASTRUCTURE, f"{workload} failed on an infrastructure "
                         f"error: {exception}", tail, "retried automatically with backoff")
    if exception:
        return Diagnosis(FailureCategory.USER_ERROR, f"{workload} failed: {exception}", tail,
                         "fix the cause shown in the traceback (profile arguments, data, "
                         "patches); retrying the same command would fail the same way")
    return Diagnosis(FailureCategory.USER_ERROR, f"{workload} exited with code {returncode}",
                     tail, "read the log tail above; the full log is kept beside the output")


_RAISED = re.compile(r"^[A-Za-z_][\w.]*(: .*)?$")


def _last_exception(lines: list[str]) -> str | None:
    """The exception line that closes the last traceback, else any line naming an Error."""
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call")]
    if starts:
        for line in reversed(lines[starts[-1] + 1:]):
            if not line.startswith((" ", "\t")) and _RAISED.match(line.strip()):
                return line.strip()[:300]
    for line in reversed(lines):
        stripped = line.strip()
        if _EXCEPTION_LINE.match(stripped):
            return stripped[:300]
    return None


class StageFailed(RuntimeError):
    """A stage failed with a diagnosis; Prefect's retry condition reads ``diagnosis``."""

    def __init__(self, stage: str, diagnosis: Diagnosis, log_uri: str | None = None) -> None:
        self.stage, self.diagnosis, self.log_uri = stage, diagnosis, log_uri
        where = f"\n  full log: {log_uri}" if log_uri else ""
        super().__init__(f"stage {stage}: {diagnosis.render()}{where}")


# --- building StageFailed without free-form category strings --------------------------------

def user_error(stage: str, summary: str, detail: str, fix: str,
               code: str = "") -> StageFailed:
    """The profile, data or code given to us is wrong: retrying would fail the same way."""
    return StageFailed(stage, Diagnosis(FailureCategory.USER_ERROR, summary, detail, fix,
                                        code))


def infrastructure(stage: str, summary: str, detail: str, fix: str,
                   code: str = "") -> StageFailed:
    """Something outside the program failed (API, registry, network): retried with backoff."""
    return StageFailed(stage, Diagnosis(FailureCategory.INFRASTRUCTURE, summary, detail,
                                        fix, code))


def internal_error(stage: str, exc: BaseException,
                   redact: Callable[[str], str] = str) -> StageFailed:
    """An exception nobody diagnosed: reported as ours, with its traceback, and not retried.

    The detail is the whole traceback (the caller logs it); the summary names the exception
    type so it reads on one line in events and on the run page. Both pass ``redact`` (the
    run's Redactor): an exception message may quote a secret.
    """
    message = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    summary = f"internal error: {type(exc).__name__}" + (f": {message}" if message else "")
    detail = "".join(traceback.format_exception(exc)).rstrip()
    return StageFailed(stage, Diagnosis(
        FailureCategory.INTERNAL, redact(summary), redact(detail),
        "this is a bug of the pipeline, not of the profile: report it with the traceback "
        "(detail); rerunning the same command will most likely fail the same way"))


# errno names of filesystem refusals that are the environment's, not ours, and their fixes
STORAGE_ERRNOS = {
    "EROFS": "the file system is read-only: point the output root (local.root) at a writable "
             "directory, or remount it read-write",
    "EACCES": "no permission for {path}: fix that {kind}'s owner/mode, or point local.root "
              "elsewhere",
    "EPERM": "the operation is not permitted on {path}: fix that {kind}'s owner/mode, or "
             "point local.root elsewhere",
    "ENOSPC": "the disk is full: free space (old output keys under the root can go) or point "
              "local.root at a larger disk",
    "EDQUOT": "the disk quota is exhausted: free space or point local.root elsewhere",
}


def storage_error(stage: str, exc: OSError, traceback_file: str | None, *, what: str = "",
                  free: int | None = None, needed: int | None = None) -> StageFailed | None:
    """A write the file system refused, as one message with the path and the fix; None for
    an OSError that is not one of those (it stays an internal error). For a full disk the
    caller passes what was being written and the free and needed bytes
    (flows/core/root_space.py ``storage_failure``)."""
    name = errno.errorcode.get(exc.errno or 0, "")
    if name not in STORAGE_ERRNOS or not exc.filename:
        return None
    where = f"\n    full traceback: {traceback_file}" if traceback_file else ""
    path = str(exc.filename)
    kind = "file" if os.path.isfile(path) else "directory"
    verb = "access" if name in ("EACCES", "EPERM") else "write"  # a read is refused alike
    writing = f" ({what})" if what else ""
    space = ""
    if free is not None:
        space = f"; {_gib(free)} free" + (f", about {_gib(needed)} needed" if needed else "")
    fix = STORAGE_ERRNOS[name].format(path=path, kind=kind)
    if needed and name in ("ENOSPC", "EDQUOT"):
        fix += f" (about {_gib(needed)} needed); then run again"
    return StageFailed(stage, Diagnosis(
        FailureCategory.USER_ERROR,
        f"cannot {verb} {path}{writing}: {exc.strerror} ({name}){space}",
        f"    {path}: {exc.strerror}{where}", fix, Failure[f"STORAGE_{name}"]))


def _gib(size: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if size >= scale // 16:
            return f"{size / scale:.2f} {unit}"
    return f"{size / 2**10:.1f} KiB"
