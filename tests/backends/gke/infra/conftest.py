"""Fixtures for the infra tests: a real fake-gcs-server in the profile's region, the fake
cloud (gcloud/gcluster executables on PATH + the fake GoogleApis sharing one state file) and
a locally built Cluster Toolkit bundle (GitHub is not reachable from here)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.backends.gke.infra.settings import InfraSettings, settings_from_profile
from tests.fakes.cloud import Cloud, FakeGoogleApis, build_bundle, fake_path
from tests.support.gcs import gcs_client, gcs_server
from tests.support.profiles import infra_profile


@pytest.fixture(scope="session")
def gcs_url() -> Iterator[str]:
    with gcs_server("US-EAST5") as url:
        yield url


@pytest.fixture
def gcs(gcs_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_url)
    client = gcs_client(gcs_url)
    yield client
    for bucket in client.list_buckets():
        for blob in client.list_blobs(bucket.name):
            blob.delete()
        bucket.delete()


@pytest.fixture
def bucket_reads_answer(gcs_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend's own storage client (``GcsStorage()``, what `tpurl plan --check` reads the
    last runs' results with) on fake-gcs-server: it finds STORAGE_EMULATOR_HOST, asks the
    emulator without credentials, and gets GCS's answer for a bucket nobody created (404,
    no results). Without it the client looked for credentials and the real GCS, and each
    `plan --check` waited its whole 20 s bound (flows/run/result.py READ_WITHIN_S) where
    neither answers; where a test's fake key was found, twice per test."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_url)


@pytest.fixture
def cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cloud:
    home = tmp_path / "fakecloud"
    home.mkdir()
    monkeypatch.setenv("TPURL_FAKE_CLOUD", str(home))
    monkeypatch.setenv("PATH", fake_path())
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kube" / "config"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    bundle = build_bundle(tmp_path / "dl" / "gcluster_bundle_linux_amd64.tgz")
    monkeypatch.setenv("TPURL_GCLUSTER_BUNDLE", str(bundle))
    return Cloud(home, FakeGoogleApis())


@pytest.fixture
def settings(tmp_path: Path) -> InfraSettings:
    return settings_from_profile(infra_profile(), cache_dir=tmp_path / "cache")
