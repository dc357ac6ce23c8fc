"""The limits of the checks across fields, declared beside each check in a reader's words.

A limit on one field is that field's type (flows/config/types.py): a pydantic constraint or
a ``Checked`` check, both read from the JSON schema by the profile page. A check across
fields (a ``model_validator``, a rule of flows/config/checks.py: "divides the model's
heads", "required with backend: gke") belongs to no one field's type, so it carries its
limits as data, attached by ``limits`` to the very function that enforces them; the page
(reference/profile_page.py) prints them beside the fields they name, and
tests/config/test_limits.py fails on a validator that declares nothing.

- ``limits({path: text})`` on a model validator or a rule: the limits it puts on fields,
  by dotted path (relative to the model for a validator; from the profile for a rule);
- ``reshapes(why)`` on a validator that refuses nothing, only rewrites what it is given
  (text with commas into a list, a blank into unset): it states that instead of a limit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
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
