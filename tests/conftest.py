"""Shared fixtures. Prefect runs for real (an ephemeral API in a test harness)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

TUTORIAL = "qwen3-30b-a3b-v6e-32"
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

    from flows.backends.local import LocalBackend
    from flows.config import load_profile
    from flows.layout import Layout
    from flows.secrets import Redactor
    from flows.stages import STAGE_BY_NAME
    from flows.stages.base import StageContext
    from flows.storage import LocalStorage

    profile = load_profile("rehearsal", environ={})
    layout = Layout(profile)
    logger = logging.getLogger("tpurl-tests")
    backend = LocalBackend(profile, layout, logger, Redactor(), stage="image")
    ctx = StageContext(profile=profile, layout=layout, backend=backend, storage=LocalStorage(),
                       logger=logger)
    STAGE_BY_NAME["image"].execute(ctx, {})
    return layout
