"""Each state of queued provisioning's ProvisioningRequest, as the watch reads it
(flows/backends/gke/watch/queued.py), with the verdict's category and whether the stage
falls back to the next capacity mode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from flows.backends.gke.fallback import NO_CAPACITY_CODES
from flows.backends.gke.watch.queued import queued_diagnosis
from flows.core.failures import FailureCategory

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def stamp(ago_s: float) -> str:
    return (NOW - timedelta(seconds=ago_s)).isoformat().replace("+00:00", "Z")


def request(attempt: int, *conds: tuple[str, str], ago_s: float = 60) -> dict:
    return {"metadata": {"name": f"jobset-train-abcde-dws-prov-{attempt}",
                         "creationTimestamp": stamp(ago_s)},
            "status": {"conditions": [{"type": t, "status": "True", "reason": t, "message": m}
                                      for t, m in conds]}}


def workload(state: str, active: bool = True) -> dict:
    return {"metadata": {"name": "jobset-train-abcde"}, "spec": {"active": active},
            "status": {"admissionChecks": [{"name": "dws-prov", "state": state}]}}


ACCEPTED = ("Accepted", "accepted")


@pytest.mark.parametrize(("state", "requests", "category", "falls_back"), [
    ("Pending", [request(1, ACCEPTED)], None, False),
    ("Pending", [request(1, ACCEPTED, ago_s=7200)], FailureCategory.QUEUE_TIMEOUT, True),
    ("Retry", [request(1, ACCEPTED, ("Failed", "no capacity"))], None, False),
    ("Rejected", [request(i, ACCEPTED, ("Failed", "no capacity")) for i in (1, 2, 3, 4)],
     FailureCategory.INFRASTRUCTURE, True),
    ("Retry", [request(1, ACCEPTED, ("Provisioned", "ok"), ("BookingExpired", "expired"))],
     None, False),
    ("Rejected", [request(4, ACCEPTED, ("Provisioned", "ok"), ("BookingExpired", "expired"))],
     FailureCategory.INFRASTRUCTURE, False),
    ("Rejected", [request(1, ACCEPTED, ("Provisioned", "ok"), ("CapacityRevoked", "taken"))],
     FailureCategory.PREEMPTED, False),
], ids=["accepted", "accepted-past-budget", "failed-retrying", "failed-rejected",
        "booking-expired-retrying", "booking-expired-rejected", "capacity-revoked"])
def test_each_state_has_its_verdict(state: str, requests: list[dict],
                                    category: FailureCategory | None, falls_back: bool) -> None:
    found = queued_diagnosis("train-rl", workload(state), requests, NOW, queue_budget_s=3600)
    assert found is not None
    line, diagnosis = found
    assert line.startswith("train-rl")
    if category is None:
        assert diagnosis is None
        return
    assert diagnosis is not None and diagnosis.category is category, diagnosis
    assert (diagnosis.code in NO_CAPACITY_CODES) is falls_back
    assert diagnosis.fix


def test_a_provisioned_slice_or_no_request_leaves_the_ordinary_verdict() -> None:
    provisioned = [request(1, ACCEPTED, ("Provisioned", "ok"))]
    assert queued_diagnosis("train-rl", workload("Ready"), provisioned, NOW, 3600) is None
    assert queued_diagnosis("train-rl", workload("Pending"), [], NOW, 3600) is None
    other = [{"metadata": {"name": "jobset-other-12345-dws-prov-1"}}]
    assert queued_diagnosis("train-rl", workload("Pending"), other, NOW, 3600) is None
