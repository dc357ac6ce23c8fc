"""Infra failures as diagnosed ``StageFailed`` errors, so the flow's retry policy applies.

A half-way ``gcluster deploy`` is an infrastructure fault (retry: Terraform state is kept and
the next apply continues); a wrong profile, a missing reservation or a foreign bucket is a
user error (retrying would fail the same way, and costs money while it tries).
"""

from __future__ import annotations

from flows.core.failures import Diagnosis, FailureCategory, StageFailed


class InfraFailed(StageFailed):
    """Raised by flows.backends.gke.infra; carries the diagnosis the stage runner and retries read."""

    def __init__(self, summary: str, detail: str, fix: str,
                 category: FailureCategory = FailureCategory.USER_ERROR) -> None:
        super().__init__("infra", Diagnosis(category, summary, detail, fix))


def user_error(summary: str, detail: str, fix: str) -> InfraFailed:
    return InfraFailed(summary, detail, fix, FailureCategory.USER_ERROR)


def transient(summary: str, detail: str, fix: str) -> InfraFailed:
    """For a failure :func:`flows.core.retry.is_transient` (or a half-way deploy) calls
    transient: an infrastructure fault the flow retries."""
    return InfraFailed(summary, detail, fix, FailureCategory.INFRASTRUCTURE)
