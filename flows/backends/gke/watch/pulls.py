"""Image pull errors: which never succeed (the user's), which may (a grace period first).

kubelet (kubernetes pkg/kubelet/images/image_manager.go) reports a failed pull as the
waiting reason ErrImagePull with the runtime's error text as the message, then, while it
backs off, ImagePullBackOff with only "Back-off pulling image %q" (the cause is gone, so the
monitor remembers the last ErrImagePull text per container). containerd's texts
(core/remotes/docker/resolver.go and authorizer.go, wrapped in the CRI's "rpc error: code
= NotFound desc = failed to pull and unpack image ...: failed to resolve reference ...")
name the cause: "not found" / "manifest unknown" for a tag or repository that does not exist,
"401 Unauthorized", "403 Forbidden", "denied" for a node service account that may not pull.
Those fail at once as configuration errors: Prefect retrying them created a JobSet per
retry for an image that can never be pulled. Anything else (a registry 5xx, a timeout, a
reset) gets ``grace_s`` from the pod's start before it counts as infrastructure.
"""

from __future__ import annotations

import re

from flows.common.failure_codes import Failure
from flows.core.failures import Diagnosis, FailureCategory

_MISSING = re.compile(r"manifest unknown|not found|NotFound|name unknown|"
                      r"repository .* does not exist", re.IGNORECASE)
_DENIED = re.compile(r"unauthori[sz]ed|\b401\b|\b403\b|forbidden|denied|PermissionDenied",
                     re.IGNORECASE)


def pull_verdict(name: str, container: str, reason: str, message: str, last_error: str,
                 waited_s: float, grace_s: float) -> Diagnosis | None:
    """Pure: the diagnosis of a container waiting on its image, or None to keep waiting."""
    cause = last_error or message
    if reason == "ErrImageNeverPull":
        return Diagnosis(FailureCategory.USER_ERROR, f"{name}: {container} "
                         "has imagePullPolicy Never and the image is not on the node",
                         f"    {message}", "use imagePullPolicy IfNotPresent", code=Failure.IMAGE_NEVER_PULL)
    if _DENIED.search(cause):
        return Diagnosis(FailureCategory.USER_ERROR,
                         f"{name}: {container} may not pull its image",
                         f"    {reason}: {cause}",
                         "grant the node service account roles/artifactregistry.reader on the "
                         "repository (or fix the image path's project); retrying cannot help",
                         code=Failure.IMAGE_UNAUTHORIZED)
    if _MISSING.search(cause):
        return Diagnosis(FailureCategory.USER_ERROR,
                         f"{name}: {container}'s image does not exist",
                         f"    {reason}: {cause}",
                         "build and push the image (the image stage) or fix its tag in the "
                         "profile; retrying cannot help", code=Failure.IMAGE_NOT_FOUND)
    if waited_s <= grace_s:
        return None
    return Diagnosis(FailureCategory.INFRASTRUCTURE,
                     f"{name}: {container} cannot start: {reason} for {waited_s:.0f} s",
                     f"    {cause}",
                     "the registry kept failing (not a missing image): it is retried with "
                     "backoff; check Artifact Registry's status if it persists")
