"""Registry questions asked through the daemon: what digest does a reference have, pushing.

Going through the daemon (``/distribution/{ref}/json``, ``/images/{name}/push``) means the
daemon's registry credentials are the only ones involved: ``gcloud auth configure-docker``
configures them once for pulls of the base, the skip check and the push alike.
"""

from __future__ import annotations

from collections.abc import Callable

import docker
from docker.errors import APIError, NotFound
from docker.utils import parse_repository_tag
from requests.exceptions import ConnectionError as RequestsConnectionError

from flows.backends.gke.image.errors import BaseImageNotFound, PushFailed, RegistryUnavailable
from flows.core.retry import (
    InfrastructureFault,
    OnRetry,
    RetryPolicy,
    call_with_retries,
    describe,
    infrastructure_message,
    is_infrastructure_fault,
)


def remote_digest(client: docker.DockerClient, ref: str, backoff: RetryPolicy,
                  on_retry: OnRetry | None = None) -> str | None:
    """The manifest digest of ``ref`` in its registry, or None when the tag is not there.
    Raises RegistryUnavailable when the registry kept failing on infrastructure faults."""
    attempts = 0

    def lookup() -> str | None:
        nonlocal attempts
        attempts += 1
        try:
            return str(client.images.get_registry_data(ref).id)
        except NotFound:
            return None

    try:
        return call_with_retries(lookup, backoff, on_retry)
    except (APIError, RequestsConnectionError) as exc:
        if is_infrastructure_fault(exc):
            raise RegistryUnavailable(ref, describe(exc), attempts) from exc
        raise


def repository_of(ref: str) -> str:
    """Pure: ``host:port/name`` without tag or digest."""
    return parse_repository_tag(ref)[0]


def pin_base(client: docker.DockerClient, base: str, backoff: RetryPolicy,
             on_retry: OnRetry | None = None) -> tuple[str, str]:
    """(reference to build FROM, digest that names the content) for the profile's base.

    A digest in the profile is taken as is. A tag is resolved in its registry, and the build
    then uses ``repo@digest``, so the image built is the one the content tag describes even
    if the tag moves meanwhile. A base that exists only in the local daemon (not pushed
    anywhere) is pinned by its image ID.
    """
    repo, tag = parse_repository_tag(base)
    if tag and tag.startswith("sha256:"):
        return base, tag
    try:
        digest = remote_digest(client, base, backoff, on_retry)
        remote_problem = "not in its registry"
    except APIError as exc:  # e.g. a local-only name resolved against an unreachable hub
        digest, remote_problem = None, describe(exc)
    if digest is not None:
        return f"{repo}@{digest}", digest
    try:
        image = client.images.get(base)
    except NotFound as exc:
        raise BaseImageNotFound(base, f"{remote_problem}; locally: {describe(exc)}") from exc
    return str(image.id), str(image.id)


def push(client: docker.DockerClient, repository: str, tag: str, backoff: RetryPolicy,
         on_retry: OnRetry | None = None, log: Callable[[str], None] | None = None) -> str:
    """Push ``repository:tag``, retrying the registry's infrastructure faults; return the digest.

    The daemon reports push failures inside the progress stream (HTTP 200 with an ``error``
    event), so the stream is read to the end and classified, rather than trusting the call.
    """
    attempts = 0

    def once() -> str:
        nonlocal attempts
        attempts += 1
        digest: str | None = None
        try:
            for event in client.api.push(repository, tag=tag, stream=True, decode=True):
                if "error" in event or "errorDetail" in event:
                    message = str(event.get("error") or event["errorDetail"].get("message"))
                    if infrastructure_message(message):
                        raise InfrastructureFault(message)
                    raise PushFailed(message, infrastructure=False, attempts=attempts)
                aux = event.get("aux") or {}
                digest = aux.get("Digest", digest)
                if log is not None and event.get("status") and not event.get("progressDetail"):
                    log(f"push: {event.get('id', '')} {event['status']}".replace("  ", " "))
        except (APIError, RequestsConnectionError) as exc:
            if is_infrastructure_fault(exc):
                raise InfrastructureFault(describe(exc)) from exc
            raise PushFailed(describe(exc), infrastructure=False, attempts=attempts) from exc
        if digest is None:
            raise InfrastructureFault("the push stream ended without a digest")
        return digest

    try:
        return call_with_retries(once, backoff, on_retry)
    except InfrastructureFault as exc:
        raise PushFailed(str(exc), infrastructure=True, attempts=attempts) from exc
