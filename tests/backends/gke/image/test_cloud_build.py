"""The Cloud Build path, end to end against real parts: the real google-cloud-build client
(REST) talks to tests/fakes/cloud_build.py, which fetches the staged context from
fake-gcs-server and runs the steps on the local dockerd, pushing to the local registry.

The image must be the one the Docker path builds: same content tag, a digest-pinned reference
in the same repository, the same patched files; a second run must skip without submitting.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import docker
import pytest

from flows.backends.gke.image import ImageRequest, ensure_image
from flows.backends.gke.image.build import ImageResult
from flows.backends.gke.image.cloudbuild import (
    CloudBuildClients,
    CloudBuildTarget,
    ensure_image_cloud_build,
)
from flows.backends.gke.image.cloudbuild_spec import staging_bucket
from flows.backends.gke.image.errors import ImageBuildFailed, ImageError
from flows.backends.gke.image.verify import verify_image
from flows.common.paths import PATCHES_FILE
from flows.core.patching import load_declarations
from flows.core.retry import RetryPolicy
from tests.fakes.cloud_build import FakeCloudBuild, cloud_build_client
from tests.fakes.image_standin import OTHER_TUNIX
from tests.support.gcs import gcs_client

FAST = RetryPolicy(attempts=3, base_s=0.2, factor=2.0)
PATCHES = load_declarations(PATCHES_FILE)
TARGET = CloudBuildTarget(project="my-proj-123", region="us-east5")


@pytest.fixture(scope="module")
def fake_build(gcs_url: str, docker_client: docker.DockerClient) -> Iterator[FakeCloudBuild]:
    with FakeCloudBuild(gcs_url, os.environ["DOCKER_HOST"]) as fake:
        yield fake


@pytest.fixture(scope="module")
def clients(fake_build: FakeCloudBuild, gcs_url: str) -> CloudBuildClients:
    return CloudBuildClients(cloud_build_client(fake_build.url), gcs_client(gcs_url, TARGET.project),
                             registry_token=None)


@pytest.fixture(scope="module")
def cloud_result(clients: CloudBuildClients, fake_build: FakeCloudBuild, standin_base: str,
                 registry_prefix: str) -> ImageResult:
    """The regional build's operation answers 404 (the fake's default,
    googleapis/google-cloud-python#12123) and the first
    read of the build a 503: neither may lose the build."""
    request = ImageRequest(base=standin_base, repository=f"{registry_prefix}/cb/tpu-post-training")
    fake_build.fail_build_reads = [503]
    return ensure_image_cloud_build(request, TARGET, clients, FAST, poll_s=0.2)


def test_cloud_build_builds_checks_and_pushes_by_digest(cloud_result: ImageResult,
                                                         fake_build: FakeCloudBuild,
                                                         registry_prefix: str):
    assert cloud_result.built
    repository = f"{registry_prefix}/cb/tpu-post-training"
    assert cloud_result.ref == f"{repository}@{cloud_result.digest}"
    assert cloud_result.digest.startswith("sha256:") and "@sha256:" in cloud_result.base
    (build,) = fake_build.builds.values()
    assert build.body["status"] == "SUCCESS"
    assert [s["id"] for s in build.body["steps"]] == ["build", "check-patches"]
    assert any("in effect in" in line for line in build.log)  # the check step ran in the image
    # regional endpoint, source in gcloud's staging bucket
    assert ("POST", f"/v1/projects/{TARGET.project}/locations/{TARGET.region}/builds") in \
        fake_build.requests
    assert build.body["source"]["storageSource"]["bucket"] == staging_bucket(TARGET.project)


def test_the_build_is_polled_by_its_regional_name_not_its_operation(
        cloud_result: ImageResult, fake_build: FakeCloudBuild, clients: CloudBuildClients):
    """The operation of a regional build is a 404 while the build runs on
    (googleapis/google-cloud-python#12123), which a `while not operation.done()` would raise
    outside the error mapping: the build is read by projects/P/locations/R/builds/ID."""
    from google.api_core import exceptions

    (build,) = fake_build.builds.values()
    assert not [p for m, p in fake_build.requests if "/operations/" in p]
    assert ("GET", f"/v1/{build.body['name']}") in fake_build.requests
    with pytest.raises(exceptions.NotFound, match="Requested entity was not found"):
        clients.builds.transport.operations_client.get_operation(build.operation)


def test_same_tag_and_patched_files_as_the_docker_path(cloud_result: ImageResult,
                                                       docker_client: docker.DockerClient,
                                                       standin_base: str, registry_prefix: str):
    # read what the registry serves (noprune: the parent layers stay, the Docker path's cache)
    docker_client.images.remove(cloud_result.tagged, force=True, noprune=True)
    cloud_files = verify_image(docker_client, cloud_result.ref, PATCHES)["patched_files"]
    request = ImageRequest(base=standin_base, repository=f"{registry_prefix}/dk/tpu-post-training")
    docker_result = ensure_image(request, docker_client, FAST)
    assert docker_result.tagged.rsplit(":", 1)[1] == cloud_result.tagged.rsplit(":", 1)[1]
    assert verify_image(docker_client, docker_result.ref, PATCHES)["patched_files"] == cloud_files


def test_second_run_skips_without_submitting(cloud_result: ImageResult, clients: CloudBuildClients,
                                             fake_build: FakeCloudBuild, standin_base: str,
                                             registry_prefix: str):
    before = len(fake_build.builds)
    request = ImageRequest(base=standin_base, repository=f"{registry_prefix}/cb/tpu-post-training")
    again = ensure_image_cloud_build(request, TARGET, clients, FAST, poll_s=0.2)
    assert not again.built and again.ref == cloud_result.ref
    assert len(fake_build.builds) == before


def test_a_failing_step_is_a_build_failure_naming_the_step(
        clients: CloudBuildClients, registry_prefix: str, moved_base: str):
    request = ImageRequest(base=moved_base, repository=f"{registry_prefix}/cbm/tpu-post-training")
    with pytest.raises(ImageBuildFailed) as failed:
        ensure_image_cloud_build(request, TARGET, clients, FAST, poll_s=0.2)
    assert 'Build step 0 "gcr.io/cloud-builders/docker" failed' in str(failed.value)
    assert "PATCH MISMATCH" in failed.value.fix
    assert failed.value.diagnosis.category.value == "user-error"


def test_the_check_step_refuses_a_patch_measured_failing_with_the_images_versions(
        clients: CloudBuildClients, fake_build: FakeCloudBuild, registry_prefix: str,
        measured_base: str):
    """On the Cloud Build path the check step prints the image's versions and
    fails the build (so `images:` never pushes) when the rehearsal measured an enabled patch
    failing with exactly those (conftest.py's measured_base)."""
    request = ImageRequest(base=measured_base, repository=f"{registry_prefix}/cbd/tpu-post-training")
    with pytest.raises(ImageError) as failed:
        ensure_image_cloud_build(request, TARGET, clients, FAST, poll_s=0.2)
    assert failed.value.code == "image/patch-not-in-effect"
    assert "PATCH MEASURED FAILING" in failed.value.fix
    (build,) = [b for b in fake_build.builds.values()
                if "cbd/tpu-post-training" in str(b.body.get("images"))]
    log = "\n".join(build.log)
    assert "tpurl: package google-tunix==0.1.7" in log
    assert "tpurl: PATCH MEASURED FAILING: patch 'maxtext-adafactor'" in log
    assert build.body["status"] == "FAILURE" and "results" not in build.body  # not pushed


def test_a_missing_source_object_is_refused_as_the_service_does(clients: CloudBuildClients):
    from google.api_core import exceptions
    from google.cloud.devtools import cloudbuild_v1

    build = cloudbuild_v1.Build({"source": {"storage_source": {"bucket": "nope", "object_": "x.tgz"}},
                                 "steps": [{"name": "gcr.io/cloud-builders/docker", "args": ["version"]}]})
    with pytest.raises(exceptions.BadRequest, match="could not resolve source"):
        clients.builds.create_build(request={"parent": "projects/p/locations/l", "build": build})
    assert issubclass(ImageBuildFailed, ImageError)


def test_the_image_stage_through_cloud_build_keeps_its_record_in_the_registry(
        clients: CloudBuildClients, standin_base: str, registry_prefix: str,
        monkeypatch: pytest.MonkeyPatch, cloud_result: ImageResult):
    """The stage model end to end: the first execute finds the tag cloud_result pushed and
    skips; the record is the registry (no bucket, no record file), the fingerprint that
    downstream stages record is the same on every rerun; a new repository builds once."""
    import logging

    from flows.backends import backend_for
    from flows.backends.gke.image import cloudbuild
    from flows.core.layout import Layout
    from flows.core.stage import StageContext
    from flows.stages.image import ImageStage
    from tests.support.profiles import tutorial_profile

    monkeypatch.setattr(cloudbuild, "default_clients", lambda project: clients)

    def execute(repository: str) -> Any:
        profile = tutorial_profile(**{"image.base": standin_base, "image.repository": repository,
                                      "image.builder": "cloud-build"})
        backend = backend_for(profile)
        ctx = StageContext(profile=profile, layout=Layout(profile), backend=backend,
                           storage=backend.storage, logger=logging.getLogger("test"))
        return ImageStage().execute(ctx, {})

    skipped = execute(f"{registry_prefix}/cb/tpu-post-training")
    assert skipped.status == "skipped" and skipped.uris["image"] == cloud_result.ref
    fresh_repo = f"{registry_prefix}/cb-stage/tpu-post-training"
    ran = execute(fresh_repo)
    assert ran.status == "ran" and ran.uris["image"].startswith(f"{fresh_repo}@sha256:")
    assert ran.details["built"] is True
    again = execute(fresh_repo)
    assert again.status == "skipped" and again.uris == ran.uris
    assert again.fingerprint == ran.fingerprint  # downstream stages stay skipped
    assert not clients.storage.bucket(tutorial_profile().gke.bucket).exists()  # item 5


def test_the_record_carries_the_images_versions_and_the_run_page_shows_parity(
        clients: CloudBuildClients, fake_build: FakeCloudBuild, registry_prefix: str,
        other_tunix_base: str, monkeypatch: pytest.MonkeyPatch, prefect_api: None):
    """On the Cloud Build path the check step's versions come back as its build
    step output ($BUILDER_OUTPUT/output) into the image stage's record, not only the log, and
    the run page's parity artifact says where the rehearsal's lock differs."""
    import logging

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    from flows.backends import backend_for
    from flows.backends.gke.image import cloudbuild
    from flows.core.layout import Layout
    from flows.core.stage import StageContext
    from flows.runpage.artifacts import slug
    from flows.stages.image import ImageStage
    from tests.support.profiles import tutorial_profile

    carried = OTHER_TUNIX
    assert carried == {"maxtext": "0.2.4", "google-tunix": "0.2.0", "jax": "0.11.0"}
    base = other_tunix_base
    repository = f"{registry_prefix}/cbp/tpu-post-training"
    profile = tutorial_profile(**{"image.base": base, "image.repository": repository,
                                  "image.builder": "cloud-build"})
    monkeypatch.setattr(cloudbuild, "default_clients", lambda project: clients)

    @flow
    def image_stage() -> dict[str, Any]:
        backend = backend_for(profile)
        ctx = StageContext(profile=profile, layout=Layout(profile), backend=backend,
                           storage=backend.storage, logger=logging.getLogger("test"))
        return ImageStage().execute(ctx, {}).details

    state = image_stage(return_state=True)
    details = state.result()
    assert details["built"] is True and details["packages"] == carried
    assert details["python"] and set(details["patched_files"]) == set(details["patches"])
    (build,) = [b for b in fake_build.builds.values() if repository in str(b.body.get("images"))]
    assert build.body["results"]["buildStepOutputs"][0] == ""  # the docker step wrote none
    assert "google-tunix: rehearsal 0.1.8@c4ec573d29e4c3a3955b348256d464b119c8a6d1, image 0.2.0: " \
        "the rehearsal does not prove train" in "\n".join(details["rehearsal_parity"])

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])))
    (parity,) = [a for a in found if a.key == f"tpurl-{slug(profile.name)}-rehearsal-parity"]
    assert parity.type == "markdown" and parity.description.endswith(f"vs {base}, its record):")
    text = str(parity.data)
    assert text.startswith("### Rehearsal parity\n\n- maxtext: 0.2.4 in both\n")
    assert "- google-tunix: rehearsal 0.1.8@c4ec573d29e4c3a3955b348256d464b119c8a6d1, image " \
        "0.2.0: the rehearsal does not prove train" in text
    assert "- vllm: not installed in either" in text  # a record: not "unknown"
    assert "- patch maxtext-adafactor: failed in the rehearsal with google-tunix==0.1.7" in text
