"""Fixtures of the end-to-end modules: the shipped rehearsal's first run, the GKE world
(tests/support/gke_world.py) and the deployment page's `prefect deploy --all` on a real
`prefect server start` (tests/support/page_deployment.py). Each is skipped only where its
service cannot be started (dockerd: the rule of tests/support/docker.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.run.result import PipelineResult
from tests.support.gcs import gcs_server
from tests.support.gke_world import REGION, GkeWorld, open_gke_world
from tests.support.page_deployment import Walkthrough, deployed_by_the_page
from tests.support.shipped_rehearsal import first_run


@pytest.fixture(scope="session")
def rehearsal_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped rehearsal's output root, one per session (the reader's .tpurl/rehearsal):
    its first run is `shipped_rehearsal`, then the rehearsal module's reruns, then the recipe
    tutorial's runs (tests/support/tiers.py runs the two modules in that order)."""
    return tmp_path_factory.mktemp("rehearsal-root")


@pytest.fixture(scope="session")
def shipped_rehearsal(prefect_api: None, rehearsal_root: Path) -> PipelineResult:
    """The shipped rehearsal profile's first run, cold, in the session's rehearsal root: the
    rehearsal module's first run, and the rehearsal the recipe tutorial's reader ran before
    (its conversion is this run's). One full pipeline of the MaxText programs for both."""
    return first_run(rehearsal_root)


@pytest.fixture(scope="session")
def gcs_east5() -> Iterator[str]:
    """A fake-gcs-server whose buckets are in US-EAST5, the profile's region (the infra
    stage refuses a bucket in another region, as it should)."""
    with gcs_server(REGION.upper()) as url:
        yield url


@pytest.fixture(scope="module")
def gke_world(prefect_api: None, standin_base: str, registry_prefix: str,
              gcs_east5: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GkeWorld]:
    with open_gke_world(tmp_path_factory.mktemp("e2e-gke"), standin_base, registry_prefix,
                        gcs_east5) as world:
        yield world


@pytest.fixture(scope="session")
def walkthrough(docker_client, registry_prefix: str,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walkthrough]:
    """The page's deploy, once per session (the flow image built and pushed once)."""
    with deployed_by_the_page(tmp_path_factory.mktemp("readme-walkthrough"),
                              registry_prefix) as deployed:
        yield deployed
