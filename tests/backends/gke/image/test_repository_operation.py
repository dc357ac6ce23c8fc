"""The image stage waits for the Artifact Registry repository it creates: CreateRepository
answers a long-running operation and the repository exists only once it is done
(tests/fakes/cloud/ar_operations.py cites the API). Before, the fake created it in the
create's answer, so a push racing the creation went untested."""

from __future__ import annotations

import pytest

from flows.backends.gke.image.repository import RepositoryUnavailable, ensure_repository
from tests.fakes.cloud.apis import FakeGoogleApis

REPO = "us-east5-docker.pkg.dev/my-proj-123/tpurl/tpu-post-training"
KEY = "my-proj-123/us-east5/tpurl"
FULL = "projects/my-proj-123/locations/us-east5/repositories/tpurl"


@pytest.fixture
def apis() -> FakeGoogleApis:
    fake = FakeGoogleApis()
    fake.creations.delay_s = 0.5
    return fake


def test_the_push_waits_until_the_repository_exists(apis: FakeGoogleApis) -> None:
    lines: list[str] = []
    assert ensure_repository(apis, REPO, lines.append, poll_s=0.05) is True
    # what the push meets next: the repository is there
    assert apis.get_repository("my-proj-123", "us-east5", "tpurl") is not None
    assert apis.creations.polls >= 2
    assert lines[0].startswith(f"waiting for Artifact Registry to finish creating {FULL} "
                               "(operation projects/my-proj-123/locations/us-east5/operations/")
    assert lines[-1] == f"created Artifact Registry repository {FULL} (DOCKER)"
    assert ensure_repository(apis, REPO, lines.append) is False  # exists now: no create


def test_a_creation_that_fails_stops_the_stage_naming_its_error(apis: FakeGoogleApis) -> None:
    apis.creations.error = {"code": 9, "message": "FAILED_PRECONDITION: CMEK key disabled"}
    with pytest.raises(RepositoryUnavailable, match=f"could not create {FULL}: "
                       "FAILED_PRECONDITION: CMEK key disabled"):
        ensure_repository(apis, REPO, [].append, poll_s=0.05)
    assert KEY not in apis.repositories


def test_a_creation_past_the_budget_stops_the_stage(apis: FakeGoogleApis) -> None:
    apis.creations.delay_s = 30
    with pytest.raises(RepositoryUnavailable, match=f"still creating {FULL} after 0 s"):
        ensure_repository(apis, REPO, [].append, budget_s=0.2, poll_s=0.05)


def test_another_run_creating_it_meanwhile_is_waited_for_too(apis: FakeGoogleApis) -> None:
    apis.create_repository("my-proj-123", "us-east5", "tpurl")  # another run's create
    lines: list[str] = []
    assert ensure_repository(apis, REPO, lines.append, poll_s=0.05) is False
    assert apis.get_repository("my-proj-123", "us-east5", "tpurl") is not None
    assert any("being created by another run" in line for line in lines), lines
