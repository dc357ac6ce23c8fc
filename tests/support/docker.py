"""Real Docker for the image and GKE end-to-end tests: Debian's dockerd and docker-registry,
started by scripts/docker-services.sh (the same script CI calls), and the stand-in base image
(tests/fakes/image_standin.py) built into the session's registry namespace. Skipped only
where the packages cannot be installed at all (no apt-get); in CI they must run."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from flows.common.paths import REPO_ROOT
from tests.fakes.image_standin import build_standin

SCRIPT = REPO_ROOT / "scripts" / "docker-services.sh"
REGISTRY = os.environ.get("TPURL_REGISTRY_ADDR", "127.0.0.1:5000")
NO_APT = 3  # docker-services.sh: packages missing and apt-get unavailable


@contextlib.contextmanager
def docker_services() -> Iterator[docker.DockerClient]:
    """A client of the shared daemon, started if needed (and stopped again if it was not up)."""
    if shutil.which("dockerd") is None and shutil.which("apt-get") is None:
        pytest.skip("no dockerd and no apt-get to install Debian's docker.io/docker-registry")
    was_up = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True).returncode == 0
    started = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True)
    if started.returncode == NO_APT:
        pytest.skip(started.stderr.strip())
    assert started.returncode == 0, started.stderr
    host = started.stdout.strip().removeprefix("export DOCKER_HOST=")
    previous = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = host
    client = docker.DockerClient(base_url=host, timeout=600)
    yield client
    client.close()
    if previous is None:
        os.environ.pop("DOCKER_HOST", None)
    else:
        os.environ["DOCKER_HOST"] = previous
    if not was_up:
        subprocess.run(["bash", str(SCRIPT), "stop"], check=False)


def session_registry_prefix() -> str:
    """A fresh namespace per session, so a test never finds a previous session's tag."""
    return f"{REGISTRY}/tpurl-test-{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def standin_image(client: docker.DockerClient, registry_prefix: str, workdir: Path) -> Iterator[str]:
    """The stand-in base image, pushed; afterwards this session's local images are dropped."""
    yield build_standin(client, f"{registry_prefix}/tpu-post-training-standin:0.2.4", workdir / "ctx")
    # vfs keeps a full copy per layer: drop this session's local images (the registry keeps
    # its copies under the session's namespace).
    # the daemon's list as it answers it: the SDK's ``images.list`` inspects each image
    # after listing, and fails on one another lane removed meanwhile (one daemon for all)
    refs = [ref for image in client.api.images() for ref in image.get("RepoTags") or []
            if ref.startswith(registry_prefix)]
    for ref in refs:  # untag; layers go once no tag and no child image holds them
        with contextlib.suppress(docker.errors.APIError):
            client.images.remove(ref)
    client.images.prune(filters={"dangling": True})


def registry_config(directory: Path, port: int) -> Path:
    config = directory / "registry.yml"
    config.write_text(f"version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: "
                      f"{{rootdirectory: {directory / 'data'}}}\nhttp:\n  addr: 127.0.0.1:{port}\n")
    return config
