"""Image errors that carry their diagnosis, so the stage raises ``StageFailed("image",
exc.diagnosis)`` instead of guessing a category from the exception's type name.

Each error has a failure category (what the flow does: retry an unreachable daemon or a
registry that kept failing, stop at once on a missing base, a patch that no longer applies,
a failed build or refused credentials) and a finer ``code`` such as ``Failure.IMAGE_PATCH_MISMATCH``
that automations may match on; codes are never renamed.
"""

from __future__ import annotations

from flows.common.failure_codes import Failure
from flows.core.failures import Diagnosis, FailureCategory


class ImageError(RuntimeError):
    code = Failure.IMAGE_ERROR
    failure_category = FailureCategory.USER_ERROR
    fix = ""

    @property
    def diagnosis(self) -> Diagnosis:
        text = str(self)
        headline = text.strip().splitlines()[0][:300] if text.strip() else type(self).__name__
        return Diagnosis(self.failure_category, headline, text,
                         self.fix, self.code)


class ImageBuildFailed(ImageError):
    """The Docker build failed; ``patch_mismatch`` holds the patch tool's own message when a
    declared patch no longer applies (it names the file and the pattern)."""

    def __init__(self, message: str, log_tail: str, patch_mismatch: str | None = None) -> None:
        self.log_tail, self.patch_mismatch = log_tail, patch_mismatch
        if patch_mismatch is not None:
            self.code = Failure.IMAGE_PATCH_MISMATCH
            self.fix = ("update images/post-training/patches.yaml to the new upstream "
                        "text, or disable the patch in the profile with a reason")
        else:
            self.code = Failure.IMAGE_BUILD_FAILED
            self.fix = "read the build log tail above; fix the base image or build files"
        super().__init__(patch_mismatch or f"{message}\n{log_tail}")


class PushFailed(ImageError):
    """``infrastructure``: the registry kept answering "try later" (infrastructure); otherwise it
    refused the push (auth, naming: the user's to fix)."""

    code = Failure.IMAGE_PUSH_FAILED

    def __init__(self, message: str, infrastructure: bool, attempts: int) -> None:
        self.infrastructure, self.attempts = infrastructure, attempts
        self.failure_category = (FailureCategory.INFRASTRUCTURE if infrastructure
                                 else FailureCategory.USER_ERROR)
        self.fix = (
            "the registry kept failing; retry later" if infrastructure else
            "check registry auth: for Artifact Registry run "
            "`gcloud auth configure-docker REGION-docker.pkg.dev` where the daemon's client "
            "config lives (see images/post-training/README.md)")
        super().__init__(f"push failed after {attempts} attempt(s): {message}")


class RegistryUnavailable(ImageError):
    """A registry lookup (the base's digest, the content tag) kept failing on infrastructure faults: its
    own code and category, so it is retried as infrastructure and never read as the user's
    fault."""

    code = Failure.IMAGE_REGISTRY_UNAVAILABLE
    failure_category = FailureCategory.INFRASTRUCTURE
    fix = "the registry kept failing; retried with backoff, then by the flow"

    def __init__(self, ref: str, message: str, attempts: int) -> None:
        self.attempts = attempts
        super().__init__(f"looking up {ref} failed after {attempts} attempt(s): {message}")


class BaseImageNotFound(ImageError):
    code = Failure.IMAGE_BASE_NOT_FOUND

    def __init__(self, base: str, detail: str) -> None:
        self.fix = ("check image.base in the profile, and that the daemon can read that "
                    "registry (gcloud auth configure-docker REGION-docker.pkg.dev)")
        super().__init__(f"base image {base!r} is neither in its registry nor local: {detail}")
