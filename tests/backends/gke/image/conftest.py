"""The edited stand-in bases that both build paths (test_build.py: Docker, test_cloud_build.py:
Cloud Build) refuse or record, built once a session instead of once a test.

Why shared: every new base digest means a new build of the post-training image on top of it,
and its first step installs wandb from the locked wheels (15-23 s on 2 cores). With one base
per fact, the second path to build on it finds that step in dockerd's layer cache (both paths
build the same Dockerfile and context on the same daemon), so it redoes only the steps under
test: the patch step that refuses a moved pattern, the check that refuses measured versions.
Each test still starts its own build and asserts its own outcome.
"""

from __future__ import annotations

import docker
import pytest

from tests.fakes.image_standin import (
    MEASURED,
    OTHER_TUNIX,
    Edit,
    build_standin,
    move_pattern,
    with_distributions,
)


def _build(client: docker.DockerClient, ref: str, factory: pytest.TempPathFactory,
           edit: Edit) -> str:
    return build_standin(client, ref, factory.mktemp("standin-edited") / "ctx", edit=edit)


@pytest.fixture(scope="session")
def moved_base(docker_client: docker.DockerClient, registry_prefix: str,
               tmp_path_factory: pytest.TempPathFactory) -> str:
    """An upstream release in which the first tunix patch's pattern moved."""
    return _build(docker_client, f"{registry_prefix}/standin-moved:0.2.5", tmp_path_factory,
                  move_pattern)


@pytest.fixture(scope="session")
def measured_base(docker_client: docker.DockerClient, registry_prefix: str,
                  tmp_path_factory: pytest.TempPathFactory) -> str:
    """A base carrying exactly the versions the rehearsal measured the Adafactor patch
    failing with."""
    return _build(docker_client, f"{registry_prefix}/standin-dists:measured", tmp_path_factory,
                  with_distributions(MEASURED))


@pytest.fixture(scope="session")
def other_tunix_base(docker_client: docker.DockerClient, registry_prefix: str,
                     tmp_path_factory: pytest.TempPathFactory) -> str:
    """The measured versions but another tunix: the measured failure does not apply."""
    return _build(docker_client, f"{registry_prefix}/standin-dists:other-tunix",
                  tmp_path_factory, with_distributions(OTHER_TUNIX))
