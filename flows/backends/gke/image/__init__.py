"""The patched post-training image on GKE: build FROM the base, apply the declared patches,
push, and hand back an immutable ``repository@sha256:...`` reference.

Why a package of its own: the image stage (flows/stages/image.py) stays a thin adapter over
the stage model, and everything Docker-specific (daemon, registry, retries, the build
context) is testable against a real dockerd and registry without the rest of the pipeline.

Entry points: :func:`ensure_image` (build + push, or skip when the content tag is already in
the registry) and :func:`verify_image` (read the patched files back out of the pushed image).
"""

from flows.backends.gke.image.build import ImageRequest, ImageResult, ensure_image
from flows.backends.gke.image.daemon import DockerUnavailable, connect
from flows.backends.gke.image.errors import ImageBuildFailed, ImageError, PushFailed, RegistryUnavailable
from flows.backends.gke.image.profile import request_from_profile
from flows.backends.gke.image.verify import verify_image

__all__ = ["DockerUnavailable", "ImageBuildFailed", "ImageError", "ImageRequest", "ImageResult",
           "PushFailed", "RegistryUnavailable", "connect", "ensure_image", "request_from_profile",
           "verify_image"]
