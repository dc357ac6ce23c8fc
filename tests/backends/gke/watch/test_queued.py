"""Each state of queued provisioning's ProvisioningRequest, as the watch reads it
(flows/backends/gke/watch/queued.py), with the verdict's category and whether the stage
falls back to the next capacity mode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


def reserved(state: str, ago_s: float, active: bool = True) -> dict:
    """A Workload whose quota was reserved ``ago_s`` ago (Kueue makes the first request
    only then), its check in ``state``."""
    wl = workload(state, active)
    wl["status"]["conditions"] = [{"type": "QuotaReserved", "status": "True",
                                   "lastTransitionTime": stamp(ago_s)}]
    return wl


def test_the_wait_counts_from_quota_reservation_when_older_attempts_were_deleted() -> None:
    """Kueue deletes every attempt but the newest (kueue v0.17.1 controller.go
    deleteUnusedProvisioningRequests): the newest, made a minute ago, is all that is
    listed after two hours of waiting."""
    only_third = [request(3, ACCEPTED, ago_s=60)]
    found = queued_diagnosis("train-rl", reserved("Pending", 7200), only_third, NOW, 3600)
    assert found is not None and found[1] is not None
    assert found[1].category is FailureCategory.QUEUE_TIMEOUT
    assert "waited 120 min" in found[1].summary and "(3 attempt(s))" in found[1].summary


def test_a_vanished_request_is_a_wait_not_a_failure_nor_a_success() -> None:
    """No request listed while the check is Pending or Retry: Kueue is between attempts."""
    line, diagnosis = queued_diagnosis("train-rl", reserved("Retry", 60), [], NOW, 3600) or (
        "", "no verdict")
    assert diagnosis is None and "waits for queued capacity" in line
    late = queued_diagnosis("train-rl", reserved("Pending", 7200), [], NOW, 3600)
    assert late is not None and late[1] is not None
    assert late[1].category is FailureCategory.QUEUE_TIMEOUT
    # a Ready or Rejected check without its request: the ordinary verdict decides
    assert queued_diagnosis("train-rl", reserved("Ready", 60), [], NOW, 3600) is None
    assert queued_diagnosis("train-rl", reserved("Rejected", 60, active=False), [], NOW,
                            3600) is None


FAILED = ("Failed", "no capacity")
LAST_STATES = {
    "accepted": ("Pending", (ACCEPTED,)),
    "failed-retrying": ("Retry", (ACCEPTED, FAILED)),
    "failed-rejected": ("Rejected", (ACCEPTED, FAILED)),
    "provisioned": ("Ready", (ACCEPTED, ("Provisioned", "ok"))),
    "revoked": ("Rejected", (ACCEPTED, ("Provisioned", "ok"), ("CapacityRevoked", "taken"))),
}


@given(attempts=st.integers(1, 5), last=st.sampled_from(sorted(LAST_STATES)),
       kept=st.lists(st.booleans(), min_size=4, max_size=4), order=st.randoms())
def test_whichever_older_attempts_were_deleted_the_verdict_is_the_same(
        attempts: int, last: str, kept: list[bool], order) -> None:
    """Kueue deletes superseded requests whenever it next reconciles: a list read at any
    moment holds the newest attempt and any subset of the older ones, in any order."""
    state, conds = LAST_STATES[last]
    every = [request(i, ACCEPTED, FAILED, ago_s=600 - i) for i in range(1, attempts)]
    every.append(request(attempts, *conds, ago_s=600 - attempts))
    listed = [r for r, keep in zip(every[:-1], kept, strict=False) if keep] + [every[-1]]
    order.shuffle(listed)
    wl = reserved(state, 600, active=state != "Rejected")
    whole = queued_diagnosis("train-rl", wl, every, NOW, 3600)
    seen = queued_diagnosis("train-rl", wl, listed, NOW, 3600)
    assert (whole is None) == (seen is None)
    if whole is None or seen is None:
        return
    assert seen[0] == whole[0]
    assert (seen[1] is None) == (whole[1] is None)
    if seen[1] is not None and whole[1] is not None:
        assert (seen[1].category, seen[1].code, seen[1].summary) == (
            whole[1].category, whole[1].code, whole[1].summary)


def _said(found) -> tuple:
    line, diagnosis = found
    return (line,) if diagnosis is None else (
        line, diagnosis.category, diagnosis.summary, diagnosis.detail, diagnosis.fix,
        diagnosis.code)


_NAME = "jobset-train-abcde-dws-prov"
_FALLS_BACK = ("the next mode of gke.capacity is tried, if any")


@pytest.mark.parametrize(("state", "requests", "said"), [
    ("Pending", [request(1, ("Accepted", "ETA unknown"), ago_s=600)],
     ("train-rl waits for queued capacity: ProvisioningRequest accepted, waiting for "
      "capacity: ETA unknown",)),
    ("Pending", [request(1, ago_s=600) | {"status": {"conditions": []}}],
     ("train-rl waits for queued capacity: ProvisioningRequest not yet accepted: ",)),
    ("Pending", [request(2, ("Accepted", "ETA unknown"), ago_s=7200)],
     ("train-rl: no queued capacity", FailureCategory.QUEUE_TIMEOUT,
      "train-rl waited 120 min for queued capacity (2 attempt(s)): ETA unknown",
      "    queue budget 60 min",
      f"Dynamic Workload Scheduler had no slice within the queue budget; {_FALLS_BACK}; "
      "nothing was spent", "gke/no-queued-capacity")),
    ("Retry", [request(3, ACCEPTED, ("Failed", "no slice"))],
     (f"train-rl waits for queued capacity: ProvisioningRequest {_NAME}-3 Failed (no slice); "
      "Kueue retries after its back-off (3 attempt(s) so far)",)),
    ("Rejected", [request(4, ACCEPTED, ("Failed", "no slice"))],
     ("train-rl: no queued capacity", FailureCategory.INFRASTRUCTURE,
      "train-rl: queued provisioning could not get the slice after 4 attempt(s): no slice",
      f"    ProvisioningRequest {_NAME}-4: Failed: no slice",
      f"Dynamic Workload Scheduler found no slice of this shape in the zone; {_FALLS_BACK}; "
      "otherwise retry later or add a zone", "gke/no-queued-capacity")),
    ("Rejected", [request(2, ACCEPTED, ("Provisioned", "ok"), ("BookingExpired", "late"))],
     ("train-rl: queued booking expired", FailureCategory.INFRASTRUCTURE,
      "train-rl: the queued slice was provisioned but its pods did not land on it in time, "
      "2 attempt(s): late", f"    ProvisioningRequest {_NAME}-2: BookingExpired: late",
      "the pods must tolerate the cloud.google.com/gke-queued taint and select the queued "
      "pool; check `kubectl describe pod` for why they stayed Pending",
      "gke/queued-booking-expired")),
    ("Pending", [request(1, ACCEPTED, ("Provisioned", "ok"), ("CapacityRevoked", "taken"))],
     ("train-rl: queued capacity revoked", FailureCategory.PREEMPTED,
      f"train-rl: GKE revoked the queued slice (ProvisioningRequest {_NAME}-1 "
      "CapacityRevoked: taken)", "    taken",
      "the nodes were taken back before maxRunDurationSeconds; resubmitted with the same run "
      "name, resuming from the newest checkpoint", "")),
], ids=["accepted", "not-accepted", "past-budget", "failed-retrying", "failed-rejected",
        "booking-expired", "revoked"])
def test_each_verdict_says_the_whole_of_what_happened(state, requests, said) -> None:
    """The full text of each verdict: its line, category, summary, detail, fix and code,
    since what a user reads is the product's advice."""
    assert _said(queued_diagnosis("train-rl", workload(state), requests, NOW,
                                  queue_budget_s=3600)) == said


def test_with_no_request_listed_the_budget_counts_from_quota_reservation() -> None:
    def reserved(ago_s: float, state: str = "Pending") -> dict:
        return workload(state) | {"status": {
            "admissionChecks": [{"name": "dws-prov", "state": state}],
            "conditions": [{"type": "QuotaReserved", "status": "True",
                            "lastTransitionTime": stamp(ago_s)}]}}
    assert _said(queued_diagnosis("train-rl", reserved(3600), [], NOW, 3600)) == (
        "train-rl waits for queued capacity: Kueue's next ProvisioningRequest is not listed "
        "yet",)
    assert _said(queued_diagnosis("train-rl", reserved(3601 + 59), [], NOW, 3600)) == (
        "train-rl: no queued capacity", FailureCategory.QUEUE_TIMEOUT,
        "train-rl waited 61 min for queued capacity; Kueue lists no ProvisioningRequest for it "
        "now", "    queue budget 60 min",
        f"Dynamic Workload Scheduler had no slice within the queue budget; {_FALLS_BACK}; "
        "nothing was spent", "gke/no-queued-capacity")
    # an admission check in another state is not the queue's to judge
    assert queued_diagnosis("train-rl", reserved(9000, "Ready"), [], NOW, 3600) is None
    assert queued_diagnosis("train-rl", workload("Pending"), [], NOW, 3600) is None


def test_a_wait_equal_to_the_budget_is_still_a_wait() -> None:
    at_budget = [request(1, ACCEPTED, ago_s=3600)]
    assert queued_diagnosis("train-rl", workload("Pending"), at_budget, NOW, 3600)[1] is None
    past = [request(1, ACCEPTED, ago_s=3601)]
    assert queued_diagnosis("train-rl", workload("Pending"), past, NOW, 3600)[1] is not None


def test_a_deactivated_workload_is_rejected_without_the_check_saying_so() -> None:
    """Kueue deactivates the Workload (spec.active false) when it stops retrying; the check's
    state may still read Retry in the same list."""
    failed = [request(3, ACCEPTED, ("Failed", "no slice"))]
    _, diagnosis = queued_diagnosis("train-rl", workload("Retry", active=False), failed,
                                       NOW, 3600)
    assert diagnosis is not None and diagnosis.category is FailureCategory.INFRASTRUCTURE


def test_the_attempt_is_the_names_last_number_and_a_missing_message_is_empty() -> None:
    odd = {"metadata": {"name": f"{_NAME}-x", "creationTimestamp": stamp(60)},
           "status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    newest = request(12, ACCEPTED, ("Failed", "no slice"))
    line, _ = queued_diagnosis("train-rl", workload("Retry"), [newest, odd], NOW, 3600)
    assert line.endswith(f"{_NAME}-12 Failed (no slice); Kueue retries after its back-off "
                         "(12 attempt(s) so far)")
    line, _ = queued_diagnosis("train-rl", workload("Retry"), [odd], NOW, 3600)
    assert line == (f"train-rl waits for queued capacity: ProvisioningRequest {_NAME}-x "
                    "Failed (); Kueue retries after its back-off (1 attempt(s) so far)")
    revoked = {"metadata": {"name": f"{_NAME}-1", "creationTimestamp": stamp(60)},
               "status": {"conditions": [{"type": "CapacityRevoked", "status": "True"}]}}
    _, diagnosis = queued_diagnosis("train-rl", workload("Pending"), [revoked], NOW, 3600)
    assert diagnosis is not None and diagnosis.detail == "    "
    # a request of another Workload (its name is not prefixed by this one's) is not ours
    other = request(1, ACCEPTED) | {"metadata": {"name": "jobset-other-dws-prov-1",
                                                 "creationTimestamp": stamp(60)}}
    assert queued_diagnosis("train-rl", workload("Pending"), [other], NOW, 3600) is None
    nameless = {"status": {"conditions": []}}
    assert queued_diagnosis("train-rl", workload("Pending"), [nameless], NOW, 3600) is None
