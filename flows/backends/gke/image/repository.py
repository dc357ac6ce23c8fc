"""The Artifact Registry repository the image is pushed to: created when missing.

Why here and not in infra: the image stage runs first, on a project where nothing has made
the repository yet, and a push to a repository that does not exist fails with a registry
error that names neither the repository nor the fix. Created through the GoogleApis seam
(flows/backends/gke/infra/cloud.py, REST with Application Default Credentials), which tests
fake; a repository outside Artifact Registry (``image.repository`` on another registry) is
left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flows.backends.gke.image.errors import ImageError
from flows.backends.gke.infra.cloud import ApiDenied
from flows.backends.gke.infra.preflight.access import ar_repository


class RepositoryUnavailable(ImageError):
    code = "image/repository-unavailable"


def ensure_repository(apis: Any, image_repository: str, log: Callable[[str], None]) -> bool:
    """True if the repository was created now; False if it exists or is not Artifact Registry."""
    where = ar_repository(image_repository)
    if where is None:
        return False
    project, location, name = where
    create = (f"gcloud artifacts repositories create {name} --repository-format=docker "
              f"--location={location} --project={project}")
    try:
        if apis.get_repository(project, location, name) is not None:
            return False
        apis.create_repository(project, location, name)
    except ApiDenied as exc:
        error = RepositoryUnavailable(
            f"Artifact Registry repository {name} in {location} is missing and could not be "
            f"created: {exc}")
        error.fix = (f"get roles/artifactregistry.admin on {project}, or have it "
                     f"created: {create}")
        raise error from None
    except Exception as exc:
        if "ALREADY_EXISTS" in str(exc) or "409" in str(exc):
            return False  # created meanwhile by another run
        raise
    log(f"created Artifact Registry repository projects/{project}/locations/{location}/"
        f"repositories/{name} (DOCKER)")
    return True
