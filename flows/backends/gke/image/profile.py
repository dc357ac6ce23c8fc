"""From a profile to an :class:`ImageRequest`: the one place the image package reads config.

Kept apart from build.py so the Docker side never depends on the profile model, and the
stage needs a single call: ``ensure_image(request_from_profile(profile))``.
"""

from __future__ import annotations

from flows.backends.gke.image.build import ImageRequest
from flows.backends.gke.image.registry_daemon import repository_of
from flows.config.profile import Profile
from flows.core.layout import patched_image_ref


def request_from_profile(profile: Profile) -> ImageRequest:
    """Pure: base, push repository (``image.repository`` or Artifact Registry in the
    profile's project and region) and the disabled patches."""
    return ImageRequest(base=profile.image.base,
                        repository=repository_of(patched_image_ref(profile)),
                        disabled_patches=dict(profile.image.disabled_patches))
