"""Image errors with stable categories (like :class:`flows.core.patching.PatchMismatch`), so the
stage can turn them into diagnoses and automations can match on them."""

from __future__ import annotations


class ImageError(RuntimeError):
    category = "image/error"
    resolution = ""


class ImageBuildFailed(ImageError):
    """The Docker build failed; ``patch_mismatch`` holds the patch tool's own message when a
    declared patch no longer applies (it names the file and the pattern)."""

    def __init__(self, message: str, log_tail: str, patch_mismatch: str | None = None) -> None:
        self.log_tail, self.patch_mismatch = log_tail, patch_mismatch
        if patch_mismatch is not None:
            self.category = "image/patch-mismatch"
            self.resolution = ("update images/post-training/patches.yaml to the new upstream "
                               "text, or disable the patch in the profile with a reason")
        else:
            self.category = "image/build-failed"
            self.resolution = "read the build log tail above; fix the base image or build files"
        super().__init__(patch_mismatch or f"{message}\n{log_tail}")


class PushFailed(ImageError):
    category = "image/push-failed"

    def __init__(self, message: str, transient: bool, attempts: int) -> None:
        self.transient, self.attempts = transient, attempts
        self.resolution = (
            "the registry kept failing; retry later" if transient else
            "check registry auth: for Artifact Registry run "
            "`gcloud auth configure-docker REGION-docker.pkg.dev` where the daemon's client "
            "config lives (see images/post-training/README.md)")
        super().__init__(f"push failed after {attempts} attempt(s): {message}")


class BaseImageNotFound(ImageError):
    category = "image/base-not-found"

    def __init__(self, base: str, detail: str) -> None:
        self.resolution = ("check image.base in the profile, and that the daemon can read that "
                           "registry (gcloud auth configure-docker REGION-docker.pkg.dev)")
        super().__init__(f"base image {base!r} is neither in its registry nor local: {detail}")
