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
                 category: FailureCategory = FailureCategory.USER_ERROR, code: str = "") -> None:
        super().__init__("infra", Diagnosis(category, summary, detail, fix, code))


# The builders of flows/core/failures.py, for the infra stage: the same names and arguments
# (the stage is implied), so one vocabulary reads the same in every module.
def user_error(summary: str, detail: str, fix: str, code: str = "") -> InfraFailed:
    return InfraFailed(summary, detail, fix, FailureCategory.USER_ERROR, code)


def infrastructure(summary: str, detail: str, fix: str, code: str = "") -> InfraFailed:
    """For a failure :func:`flows.core.retry.is_transient` calls transient (or a half-way
    deploy): an infrastructure fault the flow retries."""
    return InfraFailed(summary, detail, fix, FailureCategory.INFRASTRUCTURE, code)
