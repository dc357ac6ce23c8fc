"""Build the patched image with Google Cloud Build: no Docker daemon on the flow's side.

Why: a flow pod on a Kubernetes work pool has no daemon, and a docker:dind sidecar needs a
privileged pod. Cloud Build runs the same ``docker build`` on Google's workers; the flow only
uploads the build context and waits. The order is build.py's: pin the base to a digest and
ask the registry for the content tag (registry_http.py, over HTTP) before anything is uploaded,
so a rerun with nothing changed submits nothing.

Reached through the google-cloud-build client library (``CloudBuildClient.create_build``
returns a long-running operation whose metadata holds the Build; ``get_build`` on the
regional name polls it, see ``_run_build``), made in one place
(:func:`default_clients`, which tests replace with clients on the fakes).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flows.backends.gke.image.build import ImageRequest, ImageResult, Log, Lookup
from flows.backends.gke.image.cloudbuild_spec import (
    DEFAULT_TIMEOUT_S,
    build_body,
    checked_from_outputs,
    diagnose_api_error,
    diagnose_build,
    pushed_digest,
    staged_object,
    staging_bucket,
)
from flows.backends.gke.image.context import build_context, content_tag, context_for_build
from flows.backends.gke.image.errors import ImageError
from flows.backends.gke.image.registry_http import RegistryApi, TokenSource, pin_base_remote
from flows.common.failure_codes import Failure
from flows.core.redaction import register
from flows.core.retry import REGISTRY, OnRetry, RetryPolicy, call_within


@dataclass(frozen=True)
class CloudBuildTarget:
    project: str
    region: str  # builds run regionally, beside the Artifact Registry repository


@dataclass(frozen=True)
class CloudBuildClients:
    builds: Any          # google.cloud.devtools.cloudbuild_v1.CloudBuildClient
    storage: Any         # google.cloud.storage.Client
    registry_token: TokenSource | None  # Google access token for the registry's token flow


def default_clients(project: str) -> CloudBuildClients:
    """Clients with Application Default Credentials (a pod's Workload Identity included)."""
    try:
        import google.auth
        import google.auth.transport.requests
        from google.cloud import storage
        from google.cloud.devtools import cloudbuild_v1
    except ImportError as exc:
        raise ImageError(f"the Cloud Build client is not installed: {exc}") from None
    try:
        credentials, _ = google.auth.default(
            scopes=["https://www.googleapis.com/auth/cloud-platform"])
    except Exception as exc:  # DefaultCredentialsError
        error = ImageError(f"no Google credentials for Cloud Build: {str(exc)[:300]}")
        error.code = Failure.IMAGE_NO_GOOGLE_CREDENTIALS
        error.fix = ("run `gcloud auth application-default login`, or give the flow's "
                     "pod a Workload Identity service account")
        raise error from None

    def token() -> str | None:
        credentials.refresh(google.auth.transport.requests.Request())
        register(str(credentials.token))  # out of every text, as the HF token is
        return str(credentials.token)

    return CloudBuildClients(cloudbuild_v1.CloudBuildClient(credentials=credentials),
                             storage.Client(project=project, credentials=credentials), token)


def lookup(request: ImageRequest, api: RegistryApi, backoff: RetryPolicy = REGISTRY,
           on_retry: OnRetry | None = None) -> Lookup:
    patches = request.patches()
    pinned, base_digest = pin_base_remote(api, request.base, backoff, on_retry)
    tag = content_tag(base_digest, patches, build_context(patches, request.sources))
    tagged = f"{request.repository}:{tag}"
    return Lookup(pinned, base_digest, tag, tagged, api.digest(tagged, backoff, on_retry))


def ensure_image_cloud_build(request: ImageRequest, target: CloudBuildTarget,
                             clients: CloudBuildClients, backoff: RetryPolicy = REGISTRY,
                             log: Log | None = None, found: Lookup | None = None,
                             poll_s: float = 5.0) -> ImageResult:
    started = time.monotonic()
    patches = request.patches()
    ids = tuple(p.id for p in patches)
    found = found or lookup(request, RegistryApi(clients.registry_token), backoff)

    def result(digest: str, built: bool, checked: dict[str, Any] | None = None) -> ImageResult:
        return ImageResult(ref=f"{request.repository}@{digest}", tagged=found.tagged,
                           digest=digest, base=found.pinned, built=built, patches=ids,
                           seconds=time.monotonic() - started, checked=checked or {})

    if found.existing is not None:
        if log:
            log(f"{found.tagged} is already in the registry ({found.existing}); not building")
        return result(found.existing, built=False)
    context = context_for_build(patches, request.sources)
    bucket, obj = staging_bucket(target.project), staged_object(time.time(), uuid.uuid4().hex)
    generation = _stage(clients.storage, bucket, obj, context.tarball(), target.region, log)
    buildargs = {"BASE_IMAGE": found.pinned, "BASE_NAME": request.base,
                 "BASE_DIGEST": found.base_digest, "CONTENT_TAG": found.tag,
                 "PATCH_IDS": ",".join(ids)}
    body = build_body(found.tagged, buildargs, bucket, obj, generation)
    build = _run_build(clients.builds, target, body, log, poll_s)
    digest = pushed_digest([{"name": i.name, "digest": i.digest} for i in build.results.images],
                           found.tagged)
    if digest is None:
        raise ImageError(f"Cloud Build {build.id} succeeded but reported no digest for "
                         f"{found.tagged} (results: {list(build.results.images)})")
    if log:
        log(f"Cloud Build {build.id} pushed {found.tagged} ({digest})")
    ref = f"{request.repository}@{digest}"
    checked = checked_from_outputs(list(build.results.build_step_outputs), ref)
    if checked is None and log:
        log(f"Cloud Build {build.id} returned no check-step output: the image's package "
            "versions are only in its build log")
    return result(digest, built=True, checked=checked)


def _stage(storage: Any, bucket_name: str, obj: str, data: bytes, region: str,
           log: Log | None) -> int | None:
    """Upload the context like gcloud does (creating the staging bucket when missing)."""
    from google.api_core import exceptions

    bucket = storage.bucket(bucket_name)
    try:
        if not bucket.exists():
            storage.create_bucket(bucket, location=region)
            if log:
                log(f"created Cloud Build's staging bucket gs://{bucket_name} in {region}")
        blob = bucket.blob(obj)
        blob.upload_from_string(data, content_type="application/gzip")
    except exceptions.GoogleAPICallError as exc:
        raise diagnose_api_error(type(exc).__name__, f"staging gs://{bucket_name}/{obj}: "
                                 f"{exc.message}", storage.project, region) from exc
    if log:
        log(f"staged the build context at gs://{bucket_name}/{obj} ({len(data)} bytes)")
    return int(blob.generation) if blob.generation is not None else None


# Build.Status values that mean "not finished yet" (google/devtools/cloudbuild/v1/cloudbuild.proto)
RUNNING = frozenset({"STATUS_UNKNOWN", "PENDING", "QUEUED", "WORKING"})
# Reading the build while it runs: a failed read is retried until the build's own time is up
# (the build goes on regardless), waits 2, 4, ... capped at 30 s.
POLL_RETRY = RetryPolicy(attempts=0, base_s=2.0, max_s=30.0)
QUEUE_MARGIN_S = 1800  # beyond the build's timeout: time a build may wait in Cloud Build's queue


def _run_build(builds: Any, target: CloudBuildTarget, body: dict[str, Any], log: Log | None,
               poll_s: float, wait_s: float = DEFAULT_TIMEOUT_S + QUEUE_MARGIN_S) -> Any:
    """Submit, then poll the Build itself by its regional name, never the operation.

    Why not ``operation.done()``: for a build created under ``parent=projects/P/locations/R``
    the client polls the long-running operation without the location routing header, and the
    service answers ``404 Requested entity was not found`` while the build carries on
    (googleapis/google-cloud-python#12123, closed without a fix; the same client's
    ``get_build`` on ``projects/P/locations/R/builds/ID`` answers, as
    googleapis/google-cloud-python#11079 shows). The create response's metadata already holds
    the Build (BuildOperationMetadata), so the operation is never read. Every call is inside
    the error mapping (``diagnose_api_error``).
    """
    from google.cloud.devtools import cloudbuild_v1

    parent = f"projects/{target.project}/locations/{target.region}"

    def api(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as exc:  # every failure of a call becomes a diagnosis
            message = str(getattr(exc, "message", None) or exc)
            raise diagnose_api_error(type(exc).__name__, message[:500], target.project,
                                     target.region) from exc

    # parent alone (no project_id): the transport then takes the regional path
    # /v1/{parent=projects/*/locations/*}/builds
    operation = api(lambda: builds.create_build(
        request={"parent": parent, "build": cloudbuild_v1.Build(body)}))
    submitted = api(lambda: operation.metadata.build)
    build_id = submitted.id
    name = submitted.name or f"{parent}/builds/{build_id}"
    if log:
        log(f"Cloud Build {build_id} submitted; log: {submitted.log_url}")
    deadline = time.monotonic() + wait_s

    def noted(attempt: int, text: str, wait: float) -> None:
        if log:
            log(f"reading Cloud Build {build_id} failed ({text[:200]}); retry {attempt} in "
                f"{wait:.0f} s (the build goes on)")

    while True:
        build = api(lambda: call_within(lambda: builds.get_build(request={"name": name}),
                                        POLL_RETRY, deadline, noted))
        if build.status.name not in RUNNING:
            break
        if time.monotonic() + poll_s > deadline:
            raise diagnose_build("TIMEOUT", f"still {build.status.name} after {wait_s:.0f} s "
                                 f"of waiting ({name})", "", build.log_url)
        time.sleep(poll_s)
    if build.status.name != "SUCCESS":
        failure = build.failure_info.type_.name if build.failure_info else ""
        raise diagnose_build(build.status.name, build.status_detail, failure, build.log_url)
    return build
