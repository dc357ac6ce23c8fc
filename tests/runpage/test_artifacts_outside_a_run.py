"""The run page's artifacts outside a run: nothing written, and no Prefect temporary server
started for them (flows/runpage/quiet_artifacts.py); and the session's guard that would
have seen one (tests/support/temporary_server.py)."""

from __future__ import annotations

import subprocess

import pytest
from prefect.server.api.server import SubprocessASGIServer
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows.runpage import quiet_artifacts as quiet
from flows.runpage.artifacts import publish_parity
from tests.support.temporary_server import temporary_servers


def test_outside_a_run_nothing_is_written_and_no_server_starts() -> None:
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        assert quiet.create("markdown", "x", "tpurl-x") is None
        publish_parity("tutorial", ["head", "- a line"])
    assert not temporary_servers()


@pytest.mark.temporary_server
def test_the_guard_sees_a_server_prefect_started_for_want_of_an_api() -> None:
    """Prefect's own object as its client makes it (keyed by no port), holding a real process
    as its start would; Prefect's stop ends it. The class keeps one object per key, and the
    test harness's server stands under no key too while it runs: it is set aside, or this
    test would take it over and orphan its process."""
    standing = SubprocessASGIServer._instances.pop(None, None)
    try:
        server = SubprocessASGIServer()
        assert server is not standing
        server.server_process = subprocess.Popen(["sleep", "60"])
        try:
            assert id(server) in temporary_servers()
        finally:
            server.stop()
        assert id(server) not in temporary_servers()
    finally:
        if standing is not None:
            SubprocessASGIServer._instances[None] = standing
