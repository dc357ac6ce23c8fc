"""Secrets out of the exceptions that end a flow run.

Prefect writes an exception that leaves a flow function into the run's state message
(prefect/states.py exception_to_failed_state: ``f"{type(exc).__name__}: {exc}"``) and, with
``persist_result``, into the stored result (prefect/serializers.py keeps ``str(exc)``). Neither
passes through logging, so the log-record redaction (flows/core/redaction.py) never sees
them. Stage failures are redacted where they are made (flows/pipeline.py ``_execute``); any
other exception of a flow body (a bug, a library's error quoting a URL with its token) is
redacted here, by ``redacting_errors`` around each flow function, before Prefect reads it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from flows.core.redaction import redact


class RedactedError(RuntimeError):
    """Stands for an exception whose type builds its text from something other than its
    arguments, so it could not be redacted in place."""


def _leaks(text: str) -> bool:
    return redact(text) != text


def _scrub(exc: BaseException) -> None:
    """The exception's own text, in place: its arguments, notes and text fields."""
    exc.args = tuple(redact(a) if isinstance(a, str) else a for a in exc.args)
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list):
        exc.__notes__ = [redact(n) if isinstance(n, str) else n for n in notes]
    fields = [*vars(exc), *(("filename", "filename2") if isinstance(exc, OSError) else ())]
    for name in fields:  # a pickled result keeps these (an HTTP error's url, a path)
        value = getattr(exc, name, None)
        if isinstance(value, str) and _leaks(value):
            setattr(exc, name, redact(value))


def redact_exception(exc: BaseException) -> BaseException:
    """``exc`` with every registered secret taken out of its text and its chain's (same
    type, same traceback: callers and Prefect's result still see what failed), or a
    RedactedError with the redacted text when its type's text comes from elsewhere (a
    custom ``__str__`` over fields it does not expose)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        try:
            text = str(link)
        except Exception:  # a broken __str__: nothing Prefect could write either
            text = ""
        if _leaks(text) or any(_leaks(str(n)) for n in getattr(link, "__notes__", ()) or ()):
            _scrub(link)
        link = link.__cause__ or link.__context__
    text = str(exc)
    if not _leaks(text):
        return exc
    replaced = RedactedError(f"{type(exc).__name__}: {redact(text)}")
    replaced.__traceback__ = exc.__traceback__
    return replaced


def redacting_errors[F: Callable[..., Any]](fn: F) -> F:
    """Wrap a flow function (under ``@flow``) so the exception it raises reaches Prefect
    redacted. The signature is the function's own, annotations evaluated in its module,
    so Prefect's parameter schema and validation read the same types as without it."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            clean = redact_exception(exc)
            if clean is exc:
                raise
            raise clean from None

    # what inspect (and so Prefect) reads as the wrapper's parameters; typeshed's function
    # type has no such attribute
    wrapper.__signature__ = inspect.signature(fn, eval_str=True)  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]  # wraps(fn) keeps fn's call: F, as typed
