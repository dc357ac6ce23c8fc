"""The one place secret values are taken out of text, for the whole process.

Every value a secret reference resolves to is registered here (``register``), with the forms
it takes when a program or library prints it: without its trailing newline (a Secret made
with ``kubectl create secret --from-file``), base64 (a Secret's data, at each of the three
alignments it can have inside a longer base64 text), JSON- and Python-escaped, URL-quoted.
Values of the environment's secret-named variables (HF_TOKEN and the like, which the local
backend passes on to its programs) are registered too, as are the token shapes Hugging Face
and Google use. Every Redactor reads this registry, and so does a log-record factory
(``install_log_redaction``) that redacts each record's message and traceback when it is
created: a log line written by Prefect itself (a failed task's traceback with its chained
cause) passes the same point as one written by us.

It also takes the forms a secret takes when a program re-encodes it: hex (either case), every
character ``\\uXXXX``-escaped (either case), and the value upper- or lower-cased.

A token a program printed over two or more lines is caught by its pieces, line by line (the
local backend and the log sink redact each line as it streams): a line ending with the
token's first 8 or more characters, or starting with its last 8 or more, loses them, and so
does any run of 8 or more token characters that is a piece of the token (a middle line of a
token wrapped over three). A text holding several lines at once (a traceback, a result) is
also searched for the token with line breaks and indentation between any of its characters,
so a narrow wrap whose pieces are shorter than 8 is caught there too.

A token with separators inside a line (ANSI colour codes a logger put in, blanks or colons
grouping it: flows/common/token_shapes.py ``SEPARATOR``) is caught too: a registered value
wherever its characters appear in order with only separators between them, and the token
shapes with separators anywhere, the joiner included (``hf:abcd:...``). Split by blanks or
colons a shape could be prose, so it must also look drawn at random (``token_like``):
field names and sentences after ``hf_`` stay as they are.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import threading
import traceback
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from flows.common.token_shapes import (
    GAP,
    SEPARATOR,
    SPLIT_TOKEN_SHAPES,
    TOKEN_SHAPES,
    random_looking,
    starts_a_word,
    token_like,
)

REDACTED = "***"
MIN_LENGTH = 4  # shorter values would blank ordinary words: secrets.resolve refuses them
FRAGMENT = 8  # a piece of a split token this long is taken to be the token
SHAPES = (*TOKEN_SHAPES,
          ("earer", re.compile(r"(?i)(authorization:\s*bearer\s+)[A-Za-z0-9._~+/=-]{8,}")))
_SECRET_NAME = re.compile(r"(?i)(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|AUTH_STRING)$")

_lock = threading.Lock()
_values: list[str] = []  # every form of every registered value, longest first
_plain: list[str] = []  # the values themselves (and stripped), for the split-token pass
_wrapped: list[re.Pattern[str]] = []  # each plain value with line breaks allowed anywhere
# each plain value without separators, and with separators allowed anywhere
_separated: list[tuple[str, re.Pattern[str]]] = []
_WORD = re.compile(rf"[A-Za-z0-9_.~+/=-]{{{FRAGMENT},}}")  # a run that may be a token piece
_BREAK = r"(?:\r?\n[ \t]*)?"


def forms(value: str) -> set[str]:
    """The texts a value can appear as."""
    out: set[str] = set()
    for base in {value, value.strip()}:
        if len(base) < MIN_LENGTH:
            continue
        out |= {base, json.dumps(base)[1:-1], repr(base)[1:-1],
                urllib.parse.quote(base, safe=""), urllib.parse.quote_plus(base),
                base.upper(), base.lower(), base.encode().hex(), base.encode().hex().upper(),
                "".join(f"\\u{ord(c):04x}" for c in base),
                "".join(f"\\u{ord(c):04X}" for c in base)}
        out |= _base64_forms(base.encode())
    return {f for f in out if len(f) >= MIN_LENGTH}


def _base64_forms(raw: bytes) -> set[str]:
    """The base64 characters that depend on ``raw`` alone, at each offset it can have in a
    longer encoded text, plus the whole encoding (with and without padding)."""
    whole = base64.b64encode(raw).decode()
    out = {whole, whole.rstrip("=")}
    for offset in (0, 1, 2):
        encoded = base64.b64encode(b"\0" * offset + raw).decode()
        end = (offset + len(raw)) // 3 * 4
        core = encoded[4 if offset else 0:end]
        if len(core) >= FRAGMENT:
            out.add(core)
    return out


def register(value: str) -> None:
    """Redact ``value`` (in every form) from every text this process writes from now on."""
    new = forms(value)
    with _lock:
        known = set(_values)
        if not new - known:
            return
        _values[:] = sorted(known | new, key=len, reverse=True)
        _plain[:] = sorted(set(_plain) | {v for v in {value, value.strip()}
                                          if len(v) > FRAGMENT}, key=len, reverse=True)
        _wrapped[:] = [re.compile(_BREAK.join(map(re.escape, v.strip()))) for v in _plain]
        _separated[:] = [(bare, re.compile(GAP.join(map(re.escape, bare)))) for bare in
                         dict.fromkeys(SEPARATOR.sub("", v.strip()) for v in _plain)
                         if len(bare) > FRAGMENT]
    install_log_redaction()


def register_environment(environ: Mapping[str, str] | None = None) -> None:
    """The values of secret-named variables (HF_TOKEN, PREFECT_API_KEY, ...): a program that
    inherits them may print them even when no profile field refers to them."""
    env = os.environ if environ is None else environ
    for name, value in env.items():
        if _SECRET_NAME.search(name) and value:
            register(value)


def redact(text: str) -> str:
    with _lock:
        values, plain, wrapped = list(_values), list(_plain), list(_wrapped)
        separated = list(_separated)
    if "\n" in text:  # a token wrapped anywhere, in a text that holds all its lines
        for pattern in wrapped:
            text = pattern.sub(_blank_keeping_breaks, text)
    for value in values:
        if value in text:
            text = text.replace(value, REDACTED)
    text = _redact_separated(text, separated)
    for marker, pattern in SHAPES:  # the marker: a cheap test before the expression
        if marker in text or marker.upper() in text:
            text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + REDACTED,
                               text)
    if plain:
        text = "\n".join(_redact_pieces(line, plain) for line in text.split("\n"))
    return text


def _redact_separated(text: str, separated: list[tuple[str, re.Pattern[str]]]) -> str:
    """A token with escape codes, blanks or colons inside it (``hf_ab<ESC>[0mcd...``,
    ``hf_abcd efgh ...``, ``hf:abcd:...``): a registered value wherever its characters
    appear in order with only separators between them, a token shape when what it holds
    looks drawn at random (flows/common/token_shapes.py ``token_like``)."""
    bare = SEPARATOR.sub("", text)
    if bare == text:  # nothing separates anything: the passes around this one suffice
        return text
    for value, pattern in separated:
        if value in bare:  # the cheap test: its characters in order, separators dropped
            text = pattern.sub(REDACTED, text)
    escaped = "\x1b" in text
    for marker, pattern, unseparated, longest in SPLIT_TOKEN_SHAPES:
        # the cheap test: with the separators dropped, a candidate that may be a token
        if marker not in bare or not any(escaped or random_looking(m.group(1)[:longest])
                                         for m in unseparated.finditer(bare)):
            continue
        text = pattern.sub(_token_replacement(text, marker), text)
    return text


def _token_replacement(text: str, marker: str) -> Callable[[re.Match[str]], str]:
    """What a split-token shape's match in ``text`` becomes: REDACTED when it starts a word
    and looks like a token of that ``marker``, else itself."""
    def replace(match: re.Match[str]) -> str:
        if starts_a_word(text, match.start()) and token_like(match.group(0), marker):
            return REDACTED
        return match.group(0)
    return replace


def _blank_keeping_breaks(match: re.Match[str]) -> str:
    """The token's pieces become one REDACTED per line; the line structure stays."""
    return "\n".join(REDACTED if piece.strip() else piece
                     for piece in re.split(r"\r?\n", match.group(0)))


def _redact_pieces(line: str, plain: list[str]) -> str:
    for value in plain:
        # a line ending with value[:size] ends with value[size-8:size], a piece of value
        if len(line) >= FRAGMENT and line[-FRAGMENT:] in value:
            for size in range(len(value) - 1, FRAGMENT - 1, -1):
                if line.endswith(value[:size]):
                    line = line[:-size] + REDACTED
                    break
        stripped = line.lstrip()
        if len(stripped) >= FRAGMENT and stripped[:FRAGMENT] in value:
            for size in range(len(value) - 1, FRAGMENT - 1, -1):
                if stripped.startswith(value[-size:]):
                    line = line[:len(line) - len(stripped)] + REDACTED + stripped[size:]
                    break
    # a piece from the token's middle (a line of a token wrapped over three or more)
    return _WORD.sub(lambda m: REDACTED if any(m.group(0) in v for v in plain) else m.group(0),
                     line)


class Redactor:
    """A callable view of the registry; ``add`` registers a value for the whole process."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        register_environment()
        install_log_redaction()
        for secret in secrets:
            register(secret)

    def add(self, secret: str) -> None:
        register(secret)

    def __call__(self, text: str) -> str:
        return redact(text)


_installed = False


def install_log_redaction() -> None:
    """Redact every log record of this process when it is made (message and traceback), so
    every handler (Prefect's API and console handlers, files, pytest's) gets redacted text."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        _redact_record(record)
        return record

    logging.setLogRecordFactory(factory)


def _redact_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a malformed call: logging reports it later, as it would have
        return
    clean = redact(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
        text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        record.exc_text = redact(text)
    if record.stack_info:
        record.stack_info = redact(record.stack_info)
