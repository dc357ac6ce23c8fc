"""Pure parts of the Cloud Build path: the request, the staging names, the verdicts."""

from __future__ import annotations

import pytest

from flows.backends.gke.image.cloudbuild_spec import (
    build_body,
    checked_from_outputs,
    diagnose_api_error,
    diagnose_build,
    pushed_digest,
    staged_object,
    staging_bucket,
)
from flows.backends.gke.image.errors import ImageBuildFailed, PushFailed
from flows.backends.gke.image.registry_http import base_url, parse_challenge, split_reference
from flows.core.failures import FailureCategory

TAGGED = "us-east5-docker.pkg.dev/p/tpurl/tpu-post-training:tpurl-abc"


def test_staging_follows_gcloud():
    assert staging_bucket("my-proj") == "my-proj_cloudbuild"
    assert staging_bucket("example.com:google-proj") == "example_com_elgoog-proj_cloudbuild"
    assert staged_object(1.5, "ab12").startswith("source/1.500000-ab12") and \
        staged_object(1.5, "ab12").endswith(".tgz")


def test_the_build_builds_offline_checks_then_pushes_the_tag():
    body = build_body(TAGGED, {"BASE_IMAGE": "b@sha256:1"}, "p_cloudbuild", "source/x.tgz", 7)
    build, check = body["steps"]
    assert build["args"] == ["build", "--network=none", "--tag", TAGGED, "--build-arg",
                             "BASE_IMAGE=b@sha256:1", "."]
    assert check["name"] == TAGGED and check["entrypoint"] == "python3"
    assert body["images"] == [TAGGED]
    assert body["source"]["storage_source"] == {"bucket": "p_cloudbuild", "object_": "source/x.tgz",
                                                "generation": 7}


def test_pushed_digest_is_read_from_results():
    images = [{"name": "other:1", "digest": "sha256:0"}, {"name": TAGGED, "digest": "sha256:9"}]
    assert pushed_digest(images, TAGGED) == "sha256:9"
    assert pushed_digest([], TAGGED) is None


@pytest.mark.parametrize(("status", "detail", "failure", "code", "category"), [
    ("FAILURE", 'Build step 0 "gcr.io/cloud-builders/docker" failed', "USER_BUILD_STEP",
     "image/build-failed", FailureCategory.USER_ERROR),
    ("FAILURE", f'Build step 1 "{TAGGED}" failed: step exited with non-zero status: 1',
     "USER_BUILD_STEP",
     "image/patch-not-in-effect", FailureCategory.USER_ERROR),
    ("FAILURE", "push", "PUSH_NOT_AUTHORIZED", "image/push-failed", FailureCategory.USER_ERROR),
    ("TIMEOUT", "", "", "image/cloud-build-timeout", FailureCategory.USER_ERROR),
    ("INTERNAL_ERROR", "", "", "image/cloud-build-failed", FailureCategory.INFRASTRUCTURE),
    ("EXPIRED", "", "", "image/cloud-build-failed", FailureCategory.INFRASTRUCTURE),
    ("CANCELLED", "", "", "image/cloud-build-cancelled", FailureCategory.USER_ERROR)])
def test_verdicts_map_to_diagnoses_with_fixes(status: str, detail: str, failure: str, code: str,
                                              category: FailureCategory):
    error = diagnose_build(status, detail, failure, "https://log")
    assert error.diagnosis.code == code and error.diagnosis.category == category
    assert error.fix and "https://log" in str(error)
    assert isinstance(error, PushFailed) == (failure == "PUSH_NOT_AUTHORIZED")
    assert isinstance(error, ImageBuildFailed) == (code == "image/build-failed")


def test_api_errors_permission_and_quota():
    denied = diagnose_api_error("PermissionDenied", "nope", "p", "us-east5")
    assert denied.code == "image/cloud-build-denied" and "cloudbuild.googleapis.com" in denied.fix
    quota = diagnose_api_error("ResourceExhausted", "quota", "p", "us-east5")
    assert quota.diagnosis.category == FailureCategory.INFRASTRUCTURE
    assert quota.code == "image/cloud-build-quota"


def test_registry_reference_helpers():
    assert split_reference("127.0.0.1:5001/a/b:t") == ("127.0.0.1:5001", "a/b", "t")
    assert split_reference("h.io/a@sha256:ff") == ("h.io", "a", "sha256:ff")
    with pytest.raises(ValueError, match="registry host"):
        split_reference("library/ubuntu:24.04")
    assert base_url("127.0.0.1:5001") == "http://127.0.0.1:5001"
    assert base_url("us-docker.pkg.dev") == "https://us-docker.pkg.dev"
    assert parse_challenge('Bearer realm="https://r/token",service="s",scope="repository:a:pull"') == \
        {"scheme": "bearer", "realm": "https://r/token", "service": "s", "scope": "repository:a:pull"}


def _error_kinds() -> list[BaseException]:
    """Every google.api_core API error class, and what google.auth and requests raise below
    the API (the exceptions a CloudBuildClient call can end in)."""
    import inspect

    import google.auth.exceptions as auth
    import requests
    from google.api_core import exceptions as core

    api = [cls(f"{cls.__name__} happened") for _, cls in inspect.getmembers(core, inspect.isclass)
           if issubclass(cls, core.GoogleAPICallError)]
    below = [auth.RefreshError("token refresh failed"), auth.TransportError("no route"),
             auth.DefaultCredentialsError("none"), requests.ConnectionError("refused"),
             requests.ReadTimeout("slow"), TimeoutError("slow"), ValueError("odd")]
    return [*api, *below]


@pytest.mark.parametrize("exc", _error_kinds(), ids=lambda e: type(e).__name__)
def test_every_cloud_build_call_error_maps_to_a_diagnosis_with_a_fix(exc: BaseException):
    """Every failure of a call, the poll's too, is mapped (_run_build's ``api``), so each kind
    must come out as a diagnosis with a fix, and one the retry machinery calls an
    infrastructure fault must come out retryable."""
    from flows.core.retry import is_infrastructure_fault

    error = diagnose_api_error(type(exc).__name__, str(getattr(exc, "message", None) or exc),
                               "p", "us-east5")
    diagnosis = error.diagnosis
    assert diagnosis.code.startswith("image/") and diagnosis.fix
    if is_infrastructure_fault(exc):
        assert diagnosis.category == FailureCategory.INFRASTRUCTURE, diagnosis


def test_a_build_unknown_to_the_region_names_the_api_and_the_region():
    error = diagnose_api_error("NotFound", "Requested entity was not found.", "p", "us-east5")
    assert error.code == "image/cloud-build-not-found"
    assert "us-east5" in error.fix and "cloudbuild.googleapis.com" in error.fix


def test_the_check_steps_output_becomes_the_records_versions():
    written = b'{"packages": {"jax": "0.11.0"}, "patched_files": {"p": "/x.py"}, "python": "3.12.3"}'
    assert checked_from_outputs([b"", written], "r@sha256:1") == {
        "image": "r@sha256:1", "packages": {"jax": "0.11.0"}, "patched_files": {"p": "/x.py"},
        "python": "3.12.3"}
    # nothing written, a step short, cut at the service's limit, not the check step's shape
    for outputs in ([b"", b""], [b""], [b"", written[:40]], [b"", b'["jax"]']):
        assert checked_from_outputs(outputs, "r@sha256:1") is None
