"""The limits the profile's own checks enforce, declared beside each check in a reader's words.

A pydantic constraint (``Field(gt=0)``, a ``Literal``) is its own declaration: the profile
page reads it from the field's metadata. A check written as code (a ``field_validator``, a
``model_validator``, a rule of ``flows/config/checks.py``) cannot be read that way, so it
carries its limit as data, attached by one of the decorators below to the very function
that enforces it. docs/reference/profile.md prints these texts beside their fields (the
docs generator, reference/profile_page.py, reads them), and tests/config/test_limits.py fails
on a validator without one, so the page and the check change together or not at all.

- ``limit(text)`` on a field validator: the limit on each field it validates;
- ``limits({path: text})`` on a model validator or a rule: the limits it puts on fields,
  by dotted path (relative to the model for a validator; from the profile for a rule);
- ``reshapes(why)`` on a validator that refuses nothing, only rewrites what it is given
  (text with commas into a list, a blank into unset): it states that instead of a limit.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
EACH_FIELD = ""  # the path of a field validator's limit: every field the validator names
_ATTRIBUTE = "__tpurl_limits__"


@dataclass(frozen=True)
class Declaration:
    """What a check declares: the limits it enforces by path, or why it enforces none."""

    limits: tuple[tuple[str, str], ...] = ()
    reshapes: str = ""


def _attach(declaration: Declaration) -> Callable[[F], F]:
    def mark(func: F) -> F:
        setattr(func, _ATTRIBUTE, declaration)
        return func
    return mark


def limit(text: str) -> Callable[[F], F]:
    """A field validator's limit, shown under each field the validator names."""
    return _attach(Declaration(((EACH_FIELD, text),)))


def limits(by_path: Mapping[str, str | list[str]]) -> Callable[[F], F]:
    """A model validator's or a rule's limits: dotted field path → text (or texts)."""
    pairs = tuple((path, text) for path, texts in by_path.items()
                  for text in ([texts] if isinstance(texts, str) else texts))
    return _attach(Declaration(pairs))


def reshapes(why: str) -> Callable[[F], F]:
    """A validator that only rewrites its input and refuses nothing; ``why`` says how."""
    return _attach(Declaration(reshapes=why))


def declaration(func: object) -> Declaration | None:
    """The declaration on a check (a bound classmethod reads its function's attribute)."""
    found = getattr(func, _ATTRIBUTE, None)
    return found if isinstance(found, Declaration) else None


def matches(regex: re.Pattern[str]) -> str:
    """A regular expression's limit, as the pattern the check matches against."""
    return f"matches `{regex.pattern.removeprefix('^').removesuffix('$')}`"
