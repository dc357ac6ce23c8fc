"""Configuration errors that say which field is wrong and how to fix it.

A profile error is raised before any side effect, so the message is all the user gets: it
must name the field (as a dotted path the user can pass to ``--set``) and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a profile. ``category`` is stable so automations can match on it."""

    field: str
    problem: str
    fix: str
    category: str = "config/invalid"

    def render(self) -> str:
        return f"{self.field}: {self.problem}\n    fix: {self.fix}"


class ProfileError(ValueError):
    """A profile that cannot be used; carries every issue found, not just the first."""

    def __init__(self, source: str, issues: list[ConfigIssue]) -> None:
        self.source = source
        self.issues = issues
        lines = [f"profile {source!r} is invalid ({len(issues)} problem(s)):"]
        lines += [f"  - {issue.render()}" for issue in issues]
        super().__init__("\n".join(lines))


class FixableValueError(ValueError):
    """Raised inside validators: a problem plus its fix, kept apart so both reach the user."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem} || {fix}")
        self.problem = problem
        self.fix = fix
