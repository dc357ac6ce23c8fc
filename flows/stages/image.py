"""Stage 1, image: the post-training image with the declared patches baked in.

The backend builds it (flows/backends/*/image.py): on GKE a Docker build FROM the profile's
pinned base, pushed and used by digest; in the rehearsal a pinned venv with the *same* patch
declarations applied to its site-packages, so a patch that no longer matches fails here too.
"""

from __future__ import annotations

from flows.core.backend import Backend, StageProvider
from flows.core.layout import image_key
from flows.core.stage import ProvidedStage


class ImageStage(ProvidedStage):
    name = "image"
    title = "Post-training image (patched)"
    key = staticmethod(image_key)

    def provider(self, backend: Backend) -> StageProvider:
        return backend.image
