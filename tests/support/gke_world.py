"""One GKE "world" for the end-to-end flow test, assembled from the project's existing parts.

Real: Prefect (ephemeral API), dockerd + registry (tests/support/docker.py) with the stand-in
base image (tests/fakes/image_standin.py), fake-gcs-server, the flow and every stage's code.
Faked, at the narrowest seams the project already has:
- infra: the fake ``gcloud``/``gcluster`` executables on PATH sharing one state file with the
  fake GoogleApis (tests/fakes/cloud), returned by ``flows.backends.gke.infra.clients.default_clients``;
- cluster: the HTTP fake Kubernetes API (tests/fakes/kube_api), returned by
  ``flows.backends.gke.backend.connect``, enforcing the shipped Role and ClusterRole
  (deployments/work-pool/rbac.yaml) with the one name a user of another token source adds,
  as `tpurl plan` tells them (``world_rbac``); its scenario scripts play the programs
  (tests/fakes/gke_programs.py);
- budgets and watch timings of the GKE backend, shortened so the test takes seconds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke import backend as gke_backend
from flows.backends.gke.infra import clients as infra_clients
from flows.backends.gke.infra.settings import InfraSettings
from flows.backends.gke.jobs.naming import secret_name
from flows.backends.gke.jobs.secret_objects import owner_of
from flows.backends.gke.watch.client import Cluster
from flows.backends.gke.watch.stream import WatchSettings
from flows.config.profile import Profile
from flows.config.teams import load_teams
from flows.core.budgets import Budgets, budgets_for
from tests.fakes.cloud import FakeGoogleApis, build_bundle, fake_path
from tests.fakes.gke_programs import FakePrograms
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.rbac import role_rules
from tests.support.cluster import cluster_at
from tests.support.gcs import gcs_client
from tests.support.profiles import SMOKE, TUTORIAL, TUTORIAL_REQUIRED, fake_hf_token

CANARY = fake_hf_token("CanaryGke")
TOKEN_VAR = "TPURL_E2E_GKE_HF_TOKEN"  # no "__": not read as a profile override
REGION = "us-east5"
FAST_WATCH = WatchSettings(timeout_s=5, read_timeout_s=10, connect_timeout_s=2, max_errors=3,
                           poll_interval_s=0.3, backoff_s=0.05, backoff_cap_s=0.2)


RBAC = Path(__file__).resolve().parents[2] / "deployments" / "work-pool" / "rbac.yaml"


def naming_session_secrets(rules: list[dict[str, Any]],
                           sources: tuple[str, ...] = ("env:HF_TOKEN", "env:WANDB_API_KEY"),
                           ) -> list[dict[str, Any]]:
    """The Role's rules, its Secret update rule also naming the tutorial's and the smoke
    profile's Secrets of ``sources`` as the session's teams file owns them, as an operator
    adds the names `tpurl plan` lists: that file puts them in no team (tests/conftest.py),
    so their Secrets are each profile's own, which the shipped Role, written for the shipped
    tutorial team, does not name."""
    teams = load_teams()
    extra = [secret_name(owner_of(profile, teams.team_of(profile)), source)
             for profile in (TUTORIAL, SMOKE) for source in sources]
    for rule in rules:
        if rule.get("resources") == ["secrets"] and rule.get("resourceNames"):
            rule["resourceNames"] = [*rule["resourceNames"], *extra]
    return rules


def world_rbac() -> FakeKube:
    """A fake API that refuses what the shipped Role and ClusterRole do not grant, the
    Role's Secret update rule also naming the world's token Secret (its source is a
    variable of the test's, not the shipped profiles' ``env:HF_TOKEN``)."""
    kube = FakeKube()
    kube.rbac_rules = naming_session_secrets(role_rules(RBAC), (f"env:{TOKEN_VAR}",))
    kube.rbac_cluster_rules = role_rules(RBAC, kind="ClusterRole")
    return kube


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


def _short_budgets(profile: Profile, stage: str) -> Budgets:
    """The profile's budgets (queue/run/preemptions come from gke.* overrides), with the
    internal tick and drain times cut so the test does not wait seconds per transition."""
    return dataclasses.replace(budgets_for(profile, stage), tick_s=0.1, log_drain_s=2.0,
                               delete_wait_s=10.0, schedule_s=30.0)


@contextlib.contextmanager
def open_gke_world(home: Path, standin_base: str, registry_prefix: str, gcs_url: str) -> Iterator[GkeWorld]:
    """The world wired in: env, the fake cloud and cluster patched in, restored afterwards.
    ``gcs_url``: a fake-gcs-server whose buckets are in the profile's region."""
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
    with pytest.MonkeyPatch.context() as mp, FakeApiServer(world_rbac()) as server:
        mp.setenv(TOKEN_VAR, CANARY)
        mp.setenv("STORAGE_EMULATOR_HOST", gcs_url)
        mp.setenv("TPURL_FAKE_CLOUD", str(cloud))
        mp.setenv("PATH", fake_path())
        mp.setenv("KUBECONFIG", str(home / "kube" / "config"))
        mp.setenv("DOCKER_CONFIG", str(home / "docker-config"))
        mp.setenv("TPURL_CACHE_DIR", str(home / "cache"))
        mp.setenv("TPURL_GCLUSTER_BUNDLE",
                  str(build_bundle(home / "dl" / "gcluster_bundle_linux_amd64.tgz")))
        gcs = gcs_client(gcs_url)  # also sets STORAGE_EMULATOR_HOST (restored by mp)

        def default_clients(s: InfraSettings) -> tuple[FakeGoogleApis, Any]:
            return apis, gcs_client(gcs_url, s.gke.project)

        def connect(profile: Profile, *args: Any, **kwargs: Any) -> Cluster:
            return cluster_at(server.url)

        mp.setattr(infra_clients, "default_clients", default_clients)
        mp.setattr(gke_backend, "connect", connect)
        mp.setattr(gke_backend, "budgets_for", _short_budgets)
        mp.setattr(gke_backend, "WatchSettings", lambda: FAST_WATCH)
        yield GkeWorld(overrides=overrides, bucket=bucket, kube=server.kube,
                       programs=FakePrograms(gcs), gcs=gcs, apis=apis, home=home,
                       image_repository=repository)
