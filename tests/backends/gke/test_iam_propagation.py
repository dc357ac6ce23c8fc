"""flows/backends/gke/iam_propagation.py's record and next_action.py's iam_lag, pure: which
failures are a lag of tpurl's own grant (waited out within the budget, then a failure naming
it) and which are not (None: the failure stands as it was)."""

from __future__ import annotations

from pathlib import Path

from flows.backends.gke.iam_propagation import CODE, Grant, load, record
from flows.backends.gke.next_action import iam_lag
from flows.core.failures import Diagnosis, FailureCategory

WL = "tpurl-v6e-gke-wl-sa@my-proj-123.iam.gserviceaccount.com"
GRANT = Grant("roles/storage.objectAdmin", f"serviceAccount:{WL}", "bucket b1", 1000.0)


def _failed(text: str, category: FailureCategory = FailureCategory.USER_ERROR) -> Diagnosis:
    return Diagnosis(category, f"train failed: google.api_core.exceptions.Forbidden: {text}",
                     f"    {text}", "fix the cause")


def _refused(email: str = WL, permission: str = "storage.objects.create") -> str:
    return (f"403 POST https://storage.googleapis.com/upload/storage/v1/b/b1/o: {email} does "
            f"not have {permission} access to the Google Cloud Storage object.")


def test_a_refusal_of_a_fresh_grant_waits_and_one_past_the_budget_fails_naming_it() -> None:
    waiting = iam_lag(_failed(_refused()), [GRANT], now=1060.0, budget_s=420.0)
    assert waiting is not None and waiting.diagnosis is None
    assert "waiting for IAM propagation" in waiting.line and "60 s ago" in waiting.line
    assert waiting.wait_s == 30.0  # a fourteenth of 7 min between resubmissions
    spent = iam_lag(_failed(_refused()), [GRANT], now=1000.0 + 421.0, budget_s=420.0)
    assert spent is not None and spent.diagnosis is not None and not spent.line
    assert spent.diagnosis.code == CODE
    assert "roles/storage.objectAdmin on bucket b1" in spent.diagnosis.summary
    assert "gcloud storage buckets get-iam-policy gs://b1" in spent.diagnosis.fix


def test_what_tpurl_did_not_grant_is_no_lag() -> None:
    other = "someone@my-proj-123.iam.gserviceaccount.com"
    for diagnosis in (_failed(_refused(other)),  # another account
                      _failed(_refused(permission="storage.buckets.delete")),  # not the role's
                      _failed(_refused(), FailureCategory.INFRASTRUCTURE),  # retried anyway
                      _failed("404 Not Found")):  # no 403 at all
        assert iam_lag(diagnosis, [GRANT], now=1010.0) is None
    assert iam_lag(_failed(_refused()), [], now=1010.0) is None  # nothing recorded


def test_the_record_keeps_recent_grants_and_reads_nothing_from_a_missing_file(
        tmp_path: Path) -> None:
    path = tmp_path / "g" / "iam-grants.json"
    assert load(path) == []
    record(path, [GRANT])  # old (epoch 1000): dropped by the next record
    fresh = Grant("roles/storage.legacyBucketReader", GRANT.member, "bucket b1", 9e9)
    record(path, [fresh])
    assert load(path) == [fresh]
    path.write_text("{not json")
    assert load(path) == []
