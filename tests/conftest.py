"""Fixtures shared across the test tree: Prefect (an ephemeral API in a test harness), the
rehearsal venv, fake-gcs-server, dockerd + registry and the stand-in base image. The code
behind them lives in tests/support/ and tests/fakes/."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import docker
import pytest
from hypothesis import HealthCheck, settings

from tests.support.ctrl_c import restore_ctrl_c
from tests.support.docker import docker_services, session_registry_prefix, standin_image
from tests.support.gcs import GCS_BUCKET, gcs_client, gcs_server
from tests.support.profiles import TUTORIAL_REQUIRED
from tests.support.rehearsal import build_rehearsal_image
from tests.support.tiers import order_and_mark

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# No test takes the machine's own Google identity: google-auth looks for a GCE metadata
# server when no other credentials are set (read once, when it is imported; subprocesses
# inherit it). On a cloud VM it found the VM's account, and `tpurl plan --check` reached the
# real Google APIs with it; where packets to the metadata address are dropped, each lookup
# waited 3 tries of 3 s. The tests give credentials by file (tests/fakes/adc_key.py) or none.
os.environ.setdefault("NO_GCE_CHECK", "true")
# a Prefect API server per `tpurl` command whatever the shell that started the tests sets: a
# kept one would outlive the test that started it (tests/test_kept_api.py sets its own)
os.environ.setdefault("TPURL_KEEP_API_S", "0")
# no team budgets unless a test names its teams file: the shipped one puts the tutorial's
# profiles in a team, whose month the session's runs would otherwise spend
# (tests/support/teams-none.yaml; subprocesses and workers inherit it)
os.environ.setdefault("TPURL_TEAMS_FILE", str(Path(__file__).parent / "support" / "teams-none.yaml"))
# Hypothesis judges no test by the clock: its deadline and its "input generation is slow"
# check fail a correct test on a loaded 2-core machine (CI's lanes run side by side), and
# speed belongs to the benchmarks. A test may still set its own settings over these.
settings.register_profile("tpurl", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tpurl")
# CI=true turns skips into failures; the summary counts functions and cases apart
# a Prefect temporary server a test started by accident fails it (tests/support/temporary_server.py)
pytest_plugins = ["tests.support.ci_plugin", "tests.support.temporary_server"]


def pytest_configure(config: pytest.Config) -> None:
    restore_ctrl_c()  # a run started in a shell's background (tests/support/ctrl_c.py)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Fast tests first, then service-backed ones, then the end-to-end modules (the
    rehearsal last); marks them `services`/`e2e` for `-m` (tests/support/tiers.py)."""
    order_and_mark(items)


@pytest.fixture(autouse=True)
def _end_node_tails() -> Iterator[None]:
    """A GKE stage keeps watching its TPU nodes after it ends (they are billed until the
    autoscaler removes them); once the test is over its fake API server is gone, so such a
    watch would poll a closed port for the rest of the session, warning on every try."""
    yield
    if (tails := sys.modules.get("flows.backends.gke.watch.tpu_nodes")) is not None:
        tails.end_tails()


@pytest.fixture
def tutorial_overrides() -> dict[str, str]:
    return dict(TUTORIAL_REQUIRED)


@pytest.fixture(scope="session")
def prefect_api():
    """A real Prefect API (ephemeral server, SQLite) for the whole session, started as
    `tpurl run` starts its own (flows/console/api_server.py ``SERVER_ENV``: no block
    auto-registration, which imports every installed collection first, half of a start's
    CPU). Its database starts migrated (tests/support/prefect_database.py); its start-up may
    still take a minute on a loaded 2-core machine: the bound is generous, and costs nothing
    once it answers."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    from flows.console.api_server import SERVER_ENV
    from tests.support.prefect_database import seeded_test_harness

    with contextlib.ExitStack() as stack:
        # the server process takes this process's environment when it starts, and only then
        with mock.patch.dict(os.environ, SERVER_ENV), seeded_test_harness():
            stack.enter_context(prefect_test_harness(server_startup_timeout=600))
        stack.enter_context(temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}))
        yield


@pytest.fixture(scope="session")
def rehearsal_image():
    """The rehearsal venv (the stand-in image), built by the real image stage if missing."""
    return build_rehearsal_image()


@pytest.fixture(scope="session")
def gcs_url() -> Iterator[str]:
    """fake-gcs-server with its default bucket location."""
    with gcs_server() as url:
        yield url


@pytest.fixture
def store(gcs_url: str, monkeypatch: pytest.MonkeyPatch):
    """A GcsStorage on an emptied test bucket of the emulator."""
    from flows.backends.gke.gcs import GcsStorage

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_url)
    client = gcs_client(gcs_url, project="test-project")
    bucket = client.bucket(GCS_BUCKET)
    if not bucket.exists():
        client.create_bucket(GCS_BUCKET)
    for blob in client.list_blobs(GCS_BUCKET):
        blob.delete()
    return GcsStorage(client)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    with docker_services() as client:
        yield client


@pytest.fixture(scope="session")
def registry_prefix() -> str:
    """A fresh namespace per session, so a test never finds a previous session's tag."""
    return session_registry_prefix()


@pytest.fixture(scope="session")
def standin_base(docker_client: docker.DockerClient, registry_prefix: str,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with standin_image(docker_client, registry_prefix, tmp_path_factory.mktemp("standin")) as ref:
        yield ref
