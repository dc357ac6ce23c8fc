"""flows/core/error_redaction.py without a Prefect server: which parts of an exception and its
chain are redacted, when the exception itself is kept and when it is replaced, and that the
wrapped flow function keeps its signature (tests/test_flow_error_redaction.py runs the real
flows)."""

from __future__ import annotations

import inspect
import random
import string

import pytest

from flows.core.error_redaction import RedactedError, redact_exception, redacting_errors
from flows.core.redaction import REDACTED, register

_RNG = random.SystemRandom()


@pytest.fixture
def token() -> str:
    value = "".join(_RNG.choice(string.ascii_letters) for _ in range(24))
    register(value)
    return value


class Opaque(Exception):
    """Its text comes from a field that is no string (a dict), so it cannot be redacted in
    place."""

    def __init__(self, url: str) -> None:
        super().__init__("request failed")
        self._request = {"url": url}

    def __str__(self) -> str:
        return f"GET {self._request['url']} failed"


class BrokenStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_a_clean_exception_is_returned_untouched() -> None:
    error = ValueError("nothing secret", 3)
    assert redact_exception(error) is error and error.args == ("nothing secret", 3)


def test_arguments_notes_and_fields_are_redacted_in_place(token: str) -> None:
    error = ValueError(f"token={token}", 7, token)
    error.add_note(f"see {token}")
    error.add_note("plain note")
    error.url = f"https://x/?t={token}"  # type: ignore[attr-defined]
    error.count = 2  # type: ignore[attr-defined]
    error.clean = "ok"  # type: ignore[attr-defined]
    out = redact_exception(error)
    assert out is error and type(out) is ValueError
    assert error.args == (f"token={REDACTED}", 7, REDACTED)
    assert error.__notes__ == [f"see {REDACTED}", "plain note"]
    assert error.url == f"https://x/?t={REDACTED}"  # type: ignore[attr-defined]
    assert (error.count, error.clean) == (2, "ok")  # type: ignore[attr-defined]


def test_a_secret_only_in_a_note_is_redacted(token: str) -> None:
    error = ValueError("plain")
    error.__notes__ = [f"note {token}", 5]
    assert redact_exception(error) is error
    assert error.__notes__ == [f"note {REDACTED}", 5]


def test_an_os_errors_file_names_are_redacted(token: str) -> None:
    error = FileNotFoundError(2, "No such file", f"/tmp/{token}", None, f"/x/{token}")
    redact_exception(error)
    assert (error.filename, error.filename2) == (f"/tmp/{REDACTED}", f"/x/{REDACTED}")
    assert token not in str(error)


def test_the_whole_chain_is_redacted_cause_and_context(token: str) -> None:
    try:
        try:
            raise KeyError(f"inner {token}")
        except KeyError as inner:
            try:
                raise OSError(f"middle {token}") from inner
            except OSError:
                raise RuntimeError("outer, clean") from None
    except RuntimeError as outer:
        error = outer
    error.__context__ = error.__context__  # the suppressed context is still reachable
    assert redact_exception(error) is error
    middle = error.__context__
    assert middle is not None and middle.args == (f"middle {REDACTED}",)
    assert middle.__cause__ is not None and middle.__cause__.args == (f"inner {REDACTED}",)


def test_a_chain_with_a_cycle_ends(token: str) -> None:
    first, second = ValueError(f"a {token}"), ValueError(f"b {token}")
    first.__context__, second.__context__ = second, first
    assert redact_exception(first) is first
    assert (first.args, second.args) == ((f"a {REDACTED}",), (f"b {REDACTED}",))


def test_an_exception_whose_text_comes_from_elsewhere_is_replaced(token: str) -> None:
    try:
        raise Opaque(f"https://host/?key={token}")
    except Opaque as exc:
        error = exc
    out = redact_exception(error)
    assert isinstance(out, RedactedError) and out is not error
    assert str(out) == f"Opaque: GET https://host/?key={REDACTED} failed"
    assert out.__traceback__ is error.__traceback__


def test_a_broken_str_in_the_chain_is_skipped(token: str) -> None:
    error = ValueError(f"v {token}")
    error.__cause__ = BrokenStr("x")
    assert redact_exception(error) is error and error.args == (f"v {REDACTED}",)


def test_the_wrapper_keeps_the_signature_and_raises_the_redacted_error(token: str) -> None:
    def flow_body(count: int, name: str = "x") -> str:
        """Doc."""
        if count < 0:
            raise ValueError(f"bad {token}")
        if count == 0:
            raise Opaque(token)
        if count == 1:
            raise KeyError("clean")
        return name * count

    wrapped = redacting_errors(flow_body)
    assert wrapped(2, name="ab") == "abab"
    assert wrapped.__name__ == "flow_body" and wrapped.__doc__ == "Doc."
    # the annotations evaluated (this module's `from __future__ import annotations` keeps
    # them as strings), as Prefect's parameter schema needs them
    assert inspect.signature(wrapped) == inspect.signature(flow_body, eval_str=True)
    assert inspect.signature(wrapped).parameters["count"].annotation is int
    with pytest.raises(ValueError) as caught:
        wrapped(-1)
    assert caught.value.args == (f"bad {REDACTED}",)
    with pytest.raises(RedactedError) as replaced:
        wrapped(0)
    assert replaced.value.__cause__ is None and replaced.value.__suppress_context__
    with pytest.raises(KeyError) as clean:
        wrapped(1)
    assert clean.value.args == ("clean",)
