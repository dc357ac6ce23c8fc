"""Pre-flight of the Cloud Build path: cloudbuild.googleapis.com is required
unless image.builder is docker, and the account Cloud Build runs as (the project's default
build service account) must read the staged source, push to the repository and write logs.

The fake GoogleApis answers getDefaultServiceAccount with the legacy Cloud Build account and
grants it roles/cloudbuild.builds.builder on the project, as Cloud Build does when its API is
enabled; a project created since 2024 gets the Compute Engine default account instead, which
here holds nothing (Google's "Cloud Build service account" change; whether it has editor
depends on the organisation's policy, so nothing is assumed).
"""

from __future__ import annotations

import pytest

from flows.backends.gke.infra.infra_stage import check_text
from flows.backends.gke.infra.preflight.checks import CLOUD_BUILD_API
from flows.backends.gke.infra.preflight.cloud_build import NEEDS, check_cloud_build_account
from tests.fakes.cloud import Cloud
from tests.support.profiles import infra_profile

COMPUTE_SA = "0-compute@developer.gserviceaccount.com"
REPO = "us-east5-docker.pkg.dev/my-proj/tpurl/tpu-post-training"
BUILDERS = ("auto", "cloud-build", "docker")


class NoBucket:
    def lookup_bucket(self, name: str) -> None:
        return None


def _check(cloud: Cloud, builder: str) -> tuple[str, bool]:
    return check_text(infra_profile(**{"image.builder": builder}), cloud.apis, NoBucket())


def _line(text: str, name: str) -> str:
    start = text.rindex("[", 0, text.index(f"] {name}:"))
    end = text.find("\n[", start)
    return text[start:end if end > 0 else None]


@pytest.mark.parametrize("builder", BUILDERS)
def test_the_cloud_build_api_is_required_unless_the_builder_is_docker(cloud: Cloud,
                                                                      builder: str) -> None:
    cloud.apis.services.discard(CLOUD_BUILD_API)
    text, _ = _check(cloud, builder)
    apis = _line(text, "apis")
    if builder == "docker":
        assert apis.startswith("[OK") and CLOUD_BUILD_API not in apis, apis
    else:
        assert apis.startswith("[FAIL") and f"gcloud services enable {CLOUD_BUILD_API}" in apis


@pytest.mark.parametrize("builder", BUILDERS)
def test_an_account_without_the_grants_is_refused_naming_each_grant(cloud: Cloud,
                                                                    builder: str) -> None:
    cloud.apis.cloud_build_sa = COMPUTE_SA
    text, ok = _check(cloud, builder)
    if builder == "docker":  # Cloud Build is not used: nothing read, nothing checked
        assert "cloud-build-account" not in text and "cloud_build_account" not in \
            cloud.apis.calls
        return
    line = _line(text, "cloud-build-account")
    assert line.startswith("[FAIL" if builder == "cloud-build" else "[WARN"), line
    assert (not ok) == (builder == "cloud-build")
    for need in NEEDS:  # the permission, the role and the command that grants it
        assert need.permission in line and f"--role={need.role}" in line
    assert "gcloud storage buckets add-iam-policy-binding gs://my-proj-123_cloudbuild" in line
    assert f"--member=serviceAccount:{COMPUTE_SA}" in line


@pytest.mark.parametrize("builder", ("auto", "cloud-build"))
def test_the_legacy_account_with_its_builder_role_passes(cloud: Cloud, builder: str) -> None:
    text, _ = _check(cloud, builder)
    line = _line(text, "cloud-build-account")
    assert line.startswith("[OK") and "@cloudbuild.gserviceaccount.com" in line, line


def test_no_default_account_is_refused(cloud: Cloud) -> None:
    cloud.apis.cloud_build_sa = ""
    text, ok = _check(cloud, "cloud-build")
    assert not ok and "no default Cloud Build service account" in _line(
        text, "cloud-build-account")


def _policy(member: str, *roles: str) -> dict[str, object]:
    return {"bindings": [{"role": r, "members": [f"serviceAccount:{member}"]} for r in roles]}


def test_grants_on_the_bucket_and_the_repository_count() -> None:
    account = f"projects/p/serviceAccounts/{COMPUTE_SA}"
    status, found, fix, _ = check_cloud_build_account(
        "p", "cloud-build", REPO, account, _policy(COMPUTE_SA, "roles/logging.logWriter"),
        _policy(COMPUTE_SA, "roles/storage.objectViewer"),
        _policy(COMPUTE_SA, "roles/artifactregistry.writer"))
    assert status == "ok", found
    status, found, fix, _ = check_cloud_build_account(
        "p", "cloud-build", REPO, account, _policy(COMPUTE_SA, "roles/logging.logWriter"),
        _policy(COMPUTE_SA, "roles/storage.objectViewer"), {"bindings": []})
    assert status == "fail" and "uploadArtifacts" in found and "logEntries" not in found
    assert fix == (f"gcloud artifacts repositories add-iam-policy-binding tpurl "
                   f"--location=us-east5 --project=my-proj --member=serviceAccount:"
                   f"{COMPUTE_SA} --role=roles/artifactregistry.writer")


def test_an_unreadable_fact_is_unknown_not_ok() -> None:
    denied = PermissionError("403")
    account = f"projects/p/serviceAccounts/{COMPUTE_SA}"
    assert check_cloud_build_account("p", "cloud-build", REPO, denied, {}, {}, {})[0] == \
        "unknown"
    status, found, _, _ = check_cloud_build_account("p", "cloud-build", REPO, account, denied,
                                                    {"bindings": []}, {"bindings": []})
    assert status == "unknown" and "project policy" in found
