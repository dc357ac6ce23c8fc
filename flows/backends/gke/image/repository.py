"""The Artifact Registry repository the image is pushed to: created when missing.

Why here and not in infra: the image stage runs first, on a project where nothing has made
the repository yet, and a push to a repository that does not exist fails with a registry
error that names neither the repository nor the fix. Created through the GoogleApis seam
(flows/backends/gke/infra/cloud.py, REST with Application Default Credentials), which tests
fake; a repository outside Artifact Registry (``image.repository`` on another registry) is
left alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from flows.backends.gke.image.errors import ImageError
from flows.backends.gke.infra.cloud import ApiDenied
from flows.backends.gke.infra.preflight.access import ar_repository
from flows.common.failure_codes import Failure


class RepositoryUnavailable(ImageError):
    code = Failure.IMAGE_REPOSITORY_UNAVAILABLE


# How long a repository's creation may take before the push gives up waiting, and how often
# its operation is asked (Artifact Registry answers in seconds; a push before it is done
# fails with a registry error that names neither the repository nor the wait).
OPERATION_BUDGET_S = 120.0
OPERATION_POLL_S = 1.0


def ensure_repository(apis: Any, image_repository: str, log: Callable[[str], None],
                      budget_s: float = OPERATION_BUDGET_S, poll_s: float = OPERATION_POLL_S,
                      sleep: Callable[[float], None] = time.sleep,
                      clock: Callable[[], float] = time.monotonic) -> bool:
    """True if the repository was created now (and its creation finished: the push comes
    next); False if it exists or is not Artifact Registry."""
    where = ar_repository(image_repository)
    if where is None:
        return False
    project, location, name = where
    create = (f"gcloud artifacts repositories create {name} --repository-format=docker "
              f"--location={location} --project={project}")
    try:
        if apis.get_repository(project, location, name) is not None:
            return False
        operation = apis.create_repository(project, location, name)
    except ApiDenied as exc:
        error = RepositoryUnavailable(
            f"Artifact Registry repository {name} in {location} is missing and could not be "
            f"created: {exc}")
        error.fix = (f"get roles/artifactregistry.admin on {project}, or have it "
                     f"created: {create}")
        raise error from None
    except Exception as exc:
        if "ALREADY_EXISTS" in str(exc) or "409" in str(exc):
            # created meanwhile by another run, whose operation may not be done yet
            wait_until_there(apis, (project, location, name), log, budget_s, poll_s, sleep,
                             clock)
            return False
        raise
    full = f"projects/{project}/locations/{location}/repositories/{name}"
    wait_for_operation(apis, operation, full, log, budget_s, poll_s, sleep, clock)
    log(f"created Artifact Registry repository {full} (DOCKER)")
    return True


def wait_for_operation(apis: Any, operation: dict[str, Any], repository: str,
                       log: Callable[[str], None], budget_s: float, poll_s: float,
                       sleep: Callable[[float], None], clock: Callable[[], float]) -> None:
    """CreateRepository answers a long-running operation (googleapis
    google/devtools/artifactregistry/v1/service.proto: "The returned Operation will finish
    once the repository has been created"); until it is done the repository does not
    exist. Polled (GetOperation) within ``budget_s``; its error, or the budget running out,
    is the stage's error, before anything is pushed."""
    started = clock()
    said = False
    while not operation.get("done"):
        if clock() - started > budget_s:
            raise RepositoryUnavailable(
                f"Artifact Registry is still creating {repository} after {budget_s:.0f} s "
                f"(operation {operation.get('name', '?')})")
        if not said:
            log(f"waiting for Artifact Registry to finish creating {repository} "
                f"(operation {operation.get('name', '?')})")
            said = True
        sleep(poll_s)
        operation = apis.repository_operation(operation["name"])
    if error := operation.get("error"):
        raise RepositoryUnavailable(
            f"Artifact Registry could not create {repository}: {error.get('message', error)}")


def wait_until_there(apis: Any, where: tuple[str, str, str], log: Callable[[str], None],
                     budget_s: float, poll_s: float, sleep: Callable[[float], None],
                     clock: Callable[[], float]) -> None:
    """Another run's creation answered 409 to ours: its operation is not ours to poll, so
    the repository itself is asked until it exists (within ``budget_s``)."""
    started, full = clock(), "projects/{}/locations/{}/repositories/{}".format(*where)
    said = False
    while apis.get_repository(*where) is None:
        if clock() - started > budget_s:
            raise RepositoryUnavailable(f"{full} is being created by another run and was "
                                        f"still missing after {budget_s:.0f} s")
        if not said:
            log(f"{full} is being created by another run: waiting for it before the push")
            said = True
        sleep(poll_s)
