"""Configuration errors that say which field is wrong and how to fix it.

A profile error is raised before any side effect, so the message is all the user gets: each
of its issues (flows/common/issues.py) names the field (as a dotted path the user can pass to
``--set``) and the fix.
"""

from __future__ import annotations

from flows.common.issues import Issue
from flows.config.gcp_names import without_tokens


class ProfileError(ValueError):
    """A profile that cannot be used; carries every issue found, not just the first."""

    def __init__(self, source: str, issues: list[Issue], header: str | None = None) -> None:
        self.source = source
        # never quoted back: a token pasted into a field is refused without being echoed
        self.issues = issues = [Issue(without_tokens(i.field), without_tokens(i.problem),
                                      without_tokens(i.fix), i.category) for i in issues]
        # header: what is invalid, when not the profile (a run's parameters, loading.py)
        lines = [f"{header or f'profile {source!r} is invalid'} ({len(issues)} problem(s)):"]
        lines += [f"  - {issue.render()}" for issue in issues]
        super().__init__("\n".join(lines))


class FixableValueError(ValueError):
    """Raised inside validators: a problem plus its fix, kept apart so both reach the user.

    ``field`` names a field below the model that raised it (pydantic would report the model).
    """

    def __init__(self, problem: str, fix: str, field: str | None = None,
                 also: tuple[FixableValueError, ...] = ()) -> None:
        super().__init__(f"{problem} || {fix}")
        self.problem = problem
        self.fix = fix
        self.field = field
        # More problems found by the same check: a validator can raise once, and the user
        # should get every fix in one round, not one per try.
        self.also = also


class EnvironmentNotReady(ProfileError):
    """The profile is valid, but where the flow runs a stage it will run lacks a program, a
    daemon or credentials; raised at the flow's start, before any side effect."""

    def __init__(self, source: str, issues: list[Issue]) -> None:
        super().__init__(source, issues)
        lines = [f"profile {source!r}: this environment cannot run every stage "
                 f"({len(issues)} problem(s)); nothing was started:"]
        lines += [f"  - {issue.render()}" for issue in issues]
        self.args = ("\n".join(lines),)
