"""What the Cloud Build path submits and how it reads the verdict: pure functions only.

The build does what the Docker path does (build.py), in the same order: ``docker build`` of the
same context with the same build args (network off), then a check step that runs
``check_patches.py`` in the image just built, and only then ``images:`` pushes the content
tag; a tag in the registry therefore always names a built *and* checked image, which is what
lets the tag be the image stage's lineage record (stage_work.py).

Source staging follows ``gcloud builds submit`` (googlecloudsdk/command_lib/builds/
submit_util.py and surface/builds/submit.py): the context as a gzipped tarball at
``gs://<project>_cloudbuild/source/<stamp>-<hex>.tgz``, the bucket name made safe the same
way (``:`` and ``.`` become ``_``, ``google`` becomes ``elgoog``). That bucket is Cloud
Build's own staging bucket, not the profile's, so nothing here creates the pipeline's bucket
before infra runs.

Verdicts: ``Build.status`` and ``Build.failure_info.type`` (google/devtools/cloudbuild/v1/
cloudbuild.proto) map to the image codes of errors.py, each with a fix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from flows.backends.gke.image.errors import ImageBuildFailed, ImageError, PushFailed
from flows.common.failure_codes import Failure
from flows.core.failures import FailureCategory

DOCKER_STEP = "gcr.io/cloud-builders/docker"  # Cloud Build's docker builder: entrypoint `docker`
BUILD_STEP_ID, CHECK_STEP_ID = "build", "check-patches"
CHECK_STEP_INDEX = 1  # statusDetail names a failed step by index and name: Build step 1 "..." failed
DEFAULT_TIMEOUT_S = 3600  # the base is several GB: pull + patch + push, with room


def staging_bucket(project: str) -> str:
    """Pure: gcloud's default source bucket for ``project``."""
    return project.replace(":", "_").replace(".", "_").replace("google", "elgoog") + "_cloudbuild"


def staged_object(stamp: float, nonce: str) -> str:
    """Pure: where the tarball goes in the staging bucket (gcloud: source/<stamp>-<hex>.tgz)."""
    return f"source/{stamp:.6f}-{nonce}.tgz"


def build_body(tagged: str, buildargs: Mapping[str, str], bucket: str, obj: str,
               generation: int | None, timeout_s: int = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Pure: the Build (cloudbuild_v1.Build fields, snake_case) for one patched image."""
    args = ["build", "--network=none", "--tag", tagged]
    for name, value in buildargs.items():
        args += ["--build-arg", f"{name}={value}"]
    source: dict[str, Any] = {"bucket": bucket, "object_": obj}
    if generation is not None:
        source["generation"] = generation
    return {
        "source": {"storage_source": source},
        "steps": [
            {"id": BUILD_STEP_ID, "name": DOCKER_STEP, "args": [*args, "."]},
            # an image built by an earlier step can be a later step's `name`
            {"id": CHECK_STEP_ID, "name": tagged, "entrypoint": "python3",
             "args": ["/tpurl/patches/check_patches.py", "/tpurl/patches"]},
        ],
        "images": [tagged],
        "timeout": f"{timeout_s}s",
        "tags": ["tpurl-image"],
        # logs in Cloud Logging only: no logs bucket to exist or be written
        "options": {"logging": "CLOUD_LOGGING_ONLY"},
    }


def checked_from_outputs(outputs: list[bytes], ref: str) -> dict[str, Any] | None:
    """Pure: what the check step recorded in the image (images/post-training/check_patches.py
    writes it to ``$BUILDER_OUTPUT/output``; the service returns it in
    ``Build.results.build_step_outputs``, one entry per step index), in the shape the Docker
    path's ``verify_image`` gives; None when the step left nothing readable."""
    if len(outputs) <= CHECK_STEP_INDEX or not outputs[CHECK_STEP_INDEX]:
        return None
    try:
        found = json.loads(outputs[CHECK_STEP_INDEX])
    except ValueError:  # cut at the service's 50 KB, or not JSON
        return None
    if not isinstance(found, dict) or not isinstance(found.get("packages"), dict):
        return None
    return {"image": ref, "patched_files": dict(found.get("patched_files") or {}),
            "python": str(found.get("python", "")),
            "packages": {str(k): str(v) for k, v in found["packages"].items()}}


def pushed_digest(images: list[Mapping[str, str]], tagged: str) -> str | None:
    """Pure: the digest Build.results.images reports for ``tagged``."""
    for image in images:
        if image.get("name") == tagged and str(image.get("digest", "")).startswith("sha256:"):
            return str(image["digest"])
    return None


class CloudBuildFailed(ImageError):
    code = Failure.IMAGE_CLOUD_BUILD_FAILED


def diagnose_build(status: str, detail: str, failure_type: str, log_url: str) -> ImageError:
    """Pure: the image error for a finished build that did not succeed."""
    where = f"build log: {log_url}" if log_url else "build log: Cloud Build history"
    text = f"Cloud Build finished with status {status}: {detail or '(no detail)'}\n{where}"
    if failure_type in {"PUSH_FAILED", "PUSH_NOT_AUTHORIZED", "PUSH_IMAGE_NOT_FOUND"}:
        error: ImageError = PushFailed(text, infrastructure=False, attempts=1)
        error.fix = ("grant the Cloud Build service account roles/artifactregistry.writer "
                     "on the image repository (gcloud artifacts repositories "
                     "add-iam-policy-binding ...), then rerun")
        return error
    if status == "FAILURE" and re.match(rf'Build step {CHECK_STEP_INDEX} "', detail):
        error = CloudBuildFailed(text)
        error.code = Failure.IMAGE_PATCH_NOT_IN_EFFECT
        error.fix = ("the patched image does not carry a declared patch, or carries "
                     "one the rehearsal measured failing with the image's versions; its "
                     "check step says which (`tpurl: PATCH NOT IN EFFECT:` or `tpurl: "
                     "PATCH MEASURED FAILING:` in the log); nothing was pushed")
        return error
    if status == "FAILURE":
        failed = ImageBuildFailed(f"Cloud Build step failed: {detail}", where)
        failed.fix = ("read the build log; a patch that no longer applies prints "
                      "`tpurl: PATCH MISMATCH:` with the file and pattern (update "
                      "images/post-training/patches.yaml or disable the patch with a reason)")
        return failed
    error = CloudBuildFailed(text)
    if status in {"INTERNAL_ERROR", "EXPIRED"}:
        error.failure_category = FailureCategory.INFRASTRUCTURE
        error.fix = "Cloud Build failed on its side or the build waited too long; retried"
    elif status == "TIMEOUT":
        error.code = Failure.IMAGE_CLOUD_BUILD_TIMEOUT
        error.fix = (f"the build ran past its {DEFAULT_TIMEOUT_S} s limit; read the log "
                     "for the slow step (usually the base pull), then rerun")
    elif status == "CANCELLED":
        error.code = Failure.IMAGE_CLOUD_BUILD_CANCELLED
        error.fix = "someone cancelled the build; rerun when it should build"
    return error


# Failures below the API (google.auth's and requests' exception class names): no answer at
# all, or credentials that could not be refreshed.
TRANSPORT_ERRORS = frozenset({"TransportError", "ConnectionError", "Timeout", "ReadTimeout",
                              "ConnectTimeout", "ProtocolError", "TimeoutError"})
AUTH_ERRORS = frozenset({"RefreshError", "DefaultCredentialsError", "ReauthFailError"})


def diagnose_api_error(kind: str, message: str, project: str, region: str) -> ImageError:
    """Pure: an error of the Cloud Build API itself (creating or reading a build), by the
    exception's class name (google.api_core's, google.auth's, requests'); every kind maps to
    a diagnosis with a fix, the unknown ones included."""
    error = CloudBuildFailed(f"Cloud Build API: {kind}: {message}")
    if kind in {"PermissionDenied", "Forbidden", "Unauthenticated", "Unauthorized"}:
        error.code = Failure.IMAGE_CLOUD_BUILD_DENIED
        error.fix = (f"enable the API (gcloud services enable cloudbuild.googleapis.com "
                     f"--project={project}) and give the flow's account "
                     "roles/cloudbuild.builds.editor and roles/storage.admin on the "
                     f"staging bucket gs://{staging_bucket(project)}; or set "
                     "image.builder: docker where a Docker daemon exists")
    elif kind in {"ResourceExhausted", "TooManyRequests"}:
        error.code = Failure.IMAGE_CLOUD_BUILD_QUOTA
        error.failure_category = FailureCategory.INFRASTRUCTURE
        error.fix = (f"Cloud Build's quota in {region} is used up (concurrent builds or "
                     "requests); retried later, or raise the quota in the console")
    elif kind in {"ServiceUnavailable", "InternalServerError", "GatewayTimeout",
                  "DeadlineExceeded", "BadGateway"} | TRANSPORT_ERRORS:
        error.failure_category = FailureCategory.INFRASTRUCTURE
        error.fix = ("Cloud Build did not answer; retried (a build already submitted "
                     "goes on, and a rerun finds its image by the content tag)")
    elif kind == "NotFound":
        error.code = Failure.IMAGE_CLOUD_BUILD_NOT_FOUND
        error.fix = (f"Cloud Build in {region} does not know it: check that "
                     f"cloudbuild.googleapis.com is enabled on {project} and that "
                     "image.repository's region is one Cloud Build runs in")
    elif kind in AUTH_ERRORS:
        error.code = Failure.IMAGE_NO_GOOGLE_CREDENTIALS
        error.fix = ("the flow's Google credentials could not be refreshed: run `gcloud "
                     "auth application-default login`, or check the pod's Workload "
                     "Identity binding (docs/how-to/identities.md)")
    else:
        error.fix = "read the message; the request the flow made was refused"
    return error
