"""Reaching a Docker daemon, with an error that says where one must come from.

A flow pod on a Kubernetes work pool has no daemon of its own, and "connection refused on
/var/run/docker.sock" tells nobody what to do. The message here names the two ways that work.
"""

from __future__ import annotations

import os

import docker
from docker.errors import DockerException

from flows.backends.gke.image.errors import ImageError
from flows.common.failure_codes import Failure
from flows.core.failures import FailureCategory


class DockerUnavailable(ImageError):
    """No daemon answered: the pool or the machine lacks one, or it is restarting; either
    way not the profile's fault, and a retry may find it up."""

    code = Failure.IMAGE_NO_DOCKER_DAEMON
    failure_category = FailureCategory.INFRASTRUCTURE

    def __init__(self, host: str, detail: str) -> None:
        self.fix = unavailable_advice(host)
        super().__init__(f"no Docker daemon reachable at {host}: {detail}\n{self.fix}")


def unavailable_advice(host: str) -> str:
    """Pure: what to do when no daemon answers (shown verbatim to the user)."""
    return (
        "The image stage builds with a Docker daemon. "
        "Locally: start one (`bash scripts/docker-services.sh start`, then export the "
        "DOCKER_HOST it prints) or start Docker. "
        "On a Kubernetes work pool the flow pod has no daemon: the pool must provide one, "
        "e.g. a docker:dind sidecar in the work pool's base job template with "
        "DOCKER_HOST=tcp://localhost:2375 in the flow container, or DOCKER_HOST pointing at a "
        f"remote builder the pod can reach. (DOCKER_HOST is now {host!r}.)"
    )


def connect(timeout_s: int = 600) -> docker.DockerClient:
    """A client for DOCKER_HOST (or the default socket), checked with a ping."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=timeout_s)
        client.ping()
    except DockerException as exc:
        raise DockerUnavailable(host, str(exc).splitlines()[0] if str(exc) else repr(exc)) from exc
    return client
