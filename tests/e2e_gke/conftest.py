"""One GKE "world" for the end-to-end flow test, assembled from the project's existing parts.

Real: Prefect (ephemeral API), dockerd + registry (scripts/docker-services.sh) with the
stand-in base image of tests/images, fake-gcs-server, the flow and every stage's code.
Faked, at the narrowest seams the project already has:
- infra: the fake ``gcloud``/``gcluster`` executables on PATH sharing one state file with the
  fake GoogleApis (tests/infra), returned by ``flows.backends.gke.infra.clients.default_clients``;
- cluster: the HTTP fake Kubernetes API (tests/gke/fake_api.py), returned by
  ``flows.backends.gke.backend.connect``; its scenario scripts play the programs (programs.py);
- budgets and watch timings of the GKE backend, shortened so the test takes seconds.

Skipped only when dockerd cannot be started (the rule of tests/images).
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke import backend as gke_backend
from flows.backends.gke.infra import clients as infra_clients
from flows.backends.gke.infra.settings import InfraSettings
from flows.backends.gke.watch.client import Cluster, cluster_at
from flows.backends.gke.watch.monitor import Budgets, budgets_for
from flows.backends.gke.watch.stream import WatchSettings
from flows.config.profile import Profile
from tests.conftest import TUTORIAL_REQUIRED, fake_hf_token
from tests.e2e_gke.programs import FakePrograms
from tests.gke.fake_api import FakeApiServer, FakeKube
from tests.images.conftest import docker_client, registry_prefix, standin_base  # noqa: F401
from tests.infra.conftest import FAKES, build_bundle, gcs_client, start_gcs
from tests.infra.fakecloud import FakeGoogleApis

CANARY = fake_hf_token("CanaryGke")
TOKEN_VAR = "TPURL_E2E_GKE_HF_TOKEN"  # no "__": not read as a profile override
REGION = "us-east5"
FAST_WATCH = WatchSettings(timeout_s=5, read_timeout_s=10, connect_timeout_s=2, max_errors=3,
                           poll_interval_s=0.3, poll_rounds=2, backoff_s=0.05, backoff_cap_s=0.2)


@dataclass
class GkeWorld:
    """Handles on every fake and real service one flow run of the GKE profile touches."""

    overrides: dict[str, str]
    bucket: str
    kube: FakeKube
    programs: FakePrograms
    gcs: Any  # google.cloud.storage.Client on the fake-gcs-server
    apis: FakeGoogleApis
    home: Path  # the test's temporary directory (fake cloud state, caches, kubeconfig)
    image_repository: str


@pytest.fixture(scope="session")
def gcs_east5() -> Iterator[str]:
    """A fake-gcs-server whose buckets are in US-EAST5, the profile's region (the infra
    stage refuses a bucket in another region, as it should)."""
    proc, url = start_gcs(REGION.upper())
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(5)


def _short_budgets(profile: Profile, stage: str) -> Budgets:
    """The profile's budgets (queue/run/preemptions come from gke.* overrides), with the
    internal tick and drain times cut so the test does not wait seconds per transition."""
    return dataclasses.replace(budgets_for(profile, stage), tick_s=0.1, log_drain_s=2.0,
                               delete_wait_s=10.0, schedule_s=30.0)


@pytest.fixture(scope="module")
def gke_world(prefect_api: None, standin_base: str, registry_prefix: str,  # noqa: F811
              gcs_east5: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GkeWorld]:
    home = tmp_path_factory.mktemp("e2e-gke")
    cloud = home / "fakecloud"
    cloud.mkdir()
    bucket = f"tpurl-e2e-{uuid.uuid4().hex[:8]}"
    repository = f"{registry_prefix}/tpu-post-training"
    overrides = {
        **TUTORIAL_REQUIRED, "gke.bucket": bucket, "gke.reservation": "my-v6e-res",
        "image.base": standin_base, "image.repository": repository,
        "model.hf_token.env": TOKEN_VAR,
        # the backend's budgets, read from the profile as in production
        "gke.queue_budget_s": "30", "gke.run_budget_s": "60", "gke.preemption_budget": "2"}
    apis = FakeGoogleApis()
    with pytest.MonkeyPatch.context() as mp, FakeApiServer(FakeKube()) as server:
        mp.setenv(TOKEN_VAR, CANARY)
        mp.setenv("STORAGE_EMULATOR_HOST", gcs_east5)
        mp.setenv("TPURL_FAKE_CLOUD", str(cloud))
        mp.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
        mp.setenv("KUBECONFIG", str(home / "kube" / "config"))
        mp.setenv("DOCKER_CONFIG", str(home / "docker-config"))
        mp.setenv("TPURL_CACHE_DIR", str(home / "cache"))
        mp.setenv("TPURL_GCLUSTER_BUNDLE",
                  str(build_bundle(home / "dl" / "gcluster_bundle_linux_amd64.tgz")))
        gcs = gcs_client(gcs_east5)  # also sets STORAGE_EMULATOR_HOST (restored by mp)

        def default_clients(s: InfraSettings) -> tuple[FakeGoogleApis, Any]:
            return apis, gcs_client(gcs_east5, s.gke.project)

        def connect(profile: Profile, *args: Any, **kwargs: Any) -> Cluster:
            return cluster_at(server.url)

        mp.setattr(infra_clients, "default_clients", default_clients)
        mp.setattr(gke_backend, "connect", connect)
        mp.setattr(gke_backend, "budgets_for", _short_budgets)
        mp.setattr(gke_backend, "WatchSettings", lambda: FAST_WATCH)
        yield GkeWorld(overrides=overrides, bucket=bucket, kube=server.kube,
                       programs=FakePrograms(gcs), gcs=gcs, apis=apis, home=home,
                       image_repository=repository)
