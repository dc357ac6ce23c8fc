"""Leaks flows/core/redaction.py must still stop that tests/core/test_redaction.py and
test_redaction_rules.py did not pin (found by mutation testing): base64 of a token
inside a longer encoding with the text before it kept, passwords with spaces, slashes and
punctuation, several tokens where one holds the other, upper-cased headers, glued line
pieces in a text of several lines, and log records' tracebacks and stacks as logging prints
them. Every value is random letters (a word would become a secret piece for later tests)."""

from __future__ import annotations

import base64
import logging
import random
import string
import sys
import urllib.parse

import pytest

from flows.core.redaction import REDACTED, Redactor, redact, register

_RNG = random.SystemRandom()


def letters(n: int) -> str:
    return "".join(_RNG.choice(string.ascii_letters) for _ in range(n))


def _token_only_chars(prefix: int, size: int, blob: str) -> str:
    """The base64 characters of ``blob`` whose 6 bits all come from the token's bytes."""
    start, end = -(-8 * prefix // 6), 8 * (prefix + size) // 6
    return blob[start:end]


@pytest.mark.parametrize("size", [31, 32])  # not a multiple of 3: the encoding has no whole
@pytest.mark.parametrize("prefix", [0, 3, 9])
def test_base64_of_a_token_inside_a_longer_encoding_keeps_the_text_before_it(
        size: int, prefix: int) -> None:
    token, head, tail = letters(size), letters(prefix).encode(), letters(7).encode()
    register(token)
    blob = base64.b64encode(head + token.encode() + tail).decode()
    clean = redact(blob)
    # the token's first character goes, everything encoding the text before it stays
    assert clean.startswith(base64.b64encode(head).decode() + REDACTED), (clean, blob)
    leaked = _token_only_chars(prefix, size, blob)
    assert not any(leaked[i:i + 8] in clean for i in range(len(leaked) - 7)), clean


@pytest.mark.parametrize("prefix", [1, 2, 4, 5])
def test_base64_of_a_token_at_an_unaligned_offset_loses_every_piece(prefix: int) -> None:
    token = letters(31)
    register(token)
    blob = base64.b64encode(letters(prefix).encode() + token.encode() + b"rest").decode()
    clean = redact(blob)
    leaked = _token_only_chars(prefix, len(token), blob)
    assert REDACTED in clean
    assert not any(leaked[i:i + 8] in clean for i in range(len(leaked) - 7)), clean


def test_a_password_with_a_space_and_a_slash_is_blanked_whole_when_percent_encoded() -> None:
    """A URL path or a requests error quotes the space as %20 and the slash as %2F."""
    password = f"{letters(5)} {letters(5)}/{letters(5)}"
    register(password)
    for shown in (urllib.parse.quote(password, safe=""), urllib.parse.quote_plus(password)):
        assert redact(f"url=https://host/{shown}") == f"url=https://host/{REDACTED}", shown


def test_of_two_tokens_one_inside_the_other_the_longer_piece_goes_first() -> None:
    """The longer token starts with a character before the shorter's (upper case sorts
    first), so neither alphabetical nor shortest-first order would do."""
    short = "b" + letters(9)
    longer = "A" + short + letters(6)
    register(short)
    register(longer)
    # a line ending with the longer token's start, which holds most of the shorter one
    assert redact("key=" + longer[:10]) == f"key={REDACTED}"
    # the next line starts with digits, which no piece of these letter tokens continues into
    # (a letter there could, by chance, be the token's next character wrapped onto it)
    assert redact("key=" + longer[:10] + "\n42 next") == f"key={REDACTED}\n42 next"


def test_an_upper_cased_authorization_header_loses_its_bearer_token() -> None:
    body = letters(24)
    assert redact(f"AUTHORIZATION: BEARER {body}") == f"AUTHORIZATION: BEARER {REDACTED}"


def test_a_glued_line_piece_goes_in_a_text_of_several_lines() -> None:
    token = letters(30)
    register(token)
    text = f"the value was key={token[:12]}\nnext line\n{token[-12:]}=rest"
    assert redact(text) == f"the value was key={REDACTED}\nnext line\n{REDACTED}=rest"


@pytest.mark.parametrize("mark", "!@#%^&*")
def test_a_line_of_exactly_a_fragment_of_a_punctuated_password_is_blanked(mark: str) -> None:
    """Punctuation is no token character for the word pass: only the line-end and line-start
    passes see these pieces."""
    password = letters(2) + mark + letters(10) + mark + letters(2)
    register(password)
    assert redact(password[:8]) == REDACTED
    assert redact(password[-8:]) == REDACTED
    assert redact(f"  {password[-8:]} rest") == f"  {REDACTED} rest"


def test_a_redactor_made_with_secrets_redacts_them() -> None:
    first, second = letters(20), letters(16)
    redactor = Redactor([first, second])
    assert redactor(f"a={first} b={second} c=plain") == f"a={REDACTED} b={REDACTED} c=plain"


def test_a_traceback_is_redacted_and_otherwise_as_logging_prints_it(
        caplog: pytest.LogCaptureFixture) -> None:
    """Trailing spaces and a trailing capital of the exception message stay."""
    token = letters(24)
    register(token)
    logger = logging.getLogger("tests.redaction_leaks")
    formatter = logging.Formatter()
    expected = []
    with caplog.at_level(logging.ERROR, logger="tests.redaction_leaks"):
        for message in (f"bad {token}   ", f"bad {token} X"):
            try:
                raise ValueError(message)
            except ValueError:
                expected.append(formatter.formatException(sys.exc_info()).replace(
                    token, REDACTED))
                logger.error("failed", exc_info=True)
    assert [r.exc_text for r in caplog.records] == expected
    assert token not in caplog.text


def test_a_log_records_stack_is_redacted_and_kept(caplog: pytest.LogCaptureFixture) -> None:
    """A stack names the files it passes through: one named with the token (a cache path, a
    downloaded script) must not show it."""
    token = letters(24)
    register(token)
    logger = logging.getLogger("tests.redaction_leaks.stack")
    code = compile("logger.warning('where', stack_info=True)", f"/cache/{token}/run.py", "exec")
    with caplog.at_level(logging.WARNING, logger="tests.redaction_leaks.stack"):
        exec(code, {"logger": logger})  # a frame whose file name holds the token
    # this logger's own record (another test's lingering watch thread may log meanwhile)
    (record,) = [r for r in caplog.records if r.name == "tests.redaction_leaks.stack"]
    assert record.stack_info and record.stack_info.startswith("Stack (most recent call last)")
    assert f"/cache/{REDACTED}/run.py" in record.stack_info and token not in caplog.text
