"""Which builder makes the patched image: the profile's ``image.builder``, with ``auto``
decided by what answers where the flow runs.

Why ``auto`` prefers a Docker daemon when one answers: the Docker path is what a developer
with Docker has, needs no Cloud Build API or staging bucket, and reads the image's files back
itself; a flow pod on a Kubernetes work pool has no daemon, and there Cloud Build is what
works. The probe is one ping with a short timeout, so a missing daemon costs a second, not
the 600 s of a build client's timeout.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from flows.config.profile import Profile

Builder = Literal["docker", "cloud-build"]
DEFAULT_SOCKET = "unix:///var/run/docker.sock"


def choose_builder(setting: str, daemon_answers: bool) -> Builder:
    """Pure: the builder for ``image.builder`` given whether a daemon answered."""
    if setting == "docker":
        return "docker"
    if setting == "cloud-build":
        return "cloud-build"
    return "docker" if daemon_answers else "cloud-build"


def docker_host(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get("DOCKER_HOST", DEFAULT_SOCKET)


def daemon_answers(timeout_s: int = 3) -> bool:
    """Does a Docker daemon answer a ping at DOCKER_HOST (or the default socket)?"""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=timeout_s)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (DockerException, OSError):
        return False


def builder_for(profile: Profile) -> Builder:
    setting = profile.image.builder
    return choose_builder(setting, setting == "auto" and daemon_answers())
