"""One shape for every "this is wrong, here is the fix" finding: profile validation and pre-flight.

A profile error and a failed pre-flight check reach the same reader (a person at a terminal,
or an automation matching on ``category``), so both are an ``Issue``: the field to change (a
dotted path the user can pass to ``--set``), what is wrong, and how to fix it. ``category`` is
stable (``config/...``, ``preflight/<check>``) so automations match on it, never on the text.
"""

from __future__ import annotations

from dataclasses import dataclass

from flows.common.failure_codes import Failure


@dataclass(frozen=True)
class Issue:
    field: str
    problem: str  # for a passing pre-flight check: what was found
    fix: str
    category: str = Failure.CONFIG_INVALID  # a Failure, or a pre-flight check's preflight/NAME

    def render(self) -> str:
        return f"{self.field}: {self.problem}\n    fix: {self.fix}"
