"""No test starts a Prefect temporary server by accident.

Prefect's client, asked for an API none is configured for, starts a server of its own (prefect
3.9.1 client/orchestration/__init__.py ``get_client``: ``SubprocessASGIServer()``, keyed by no
port, kept in the class's instances and stopped only at the interpreter's exit). In the product
that is a fault: a thread without `tpurl run`'s API setting (a contextvar: flows/common/threads.py
starts threads in their starter's context) would do it at every rehearsal, and the run-page
artifacts of a stage run on its own would do it in the tests (flows/runpage/quiet_artifacts.py).
It costs seconds of CPU and a process until the session ends, and nothing fails. The test
harness's server (``prefect_test_harness``) is keyed by its port and is not one of them. A test
that means to start one says so with the ``temporary_server`` mark.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

SERVER_MODULE = "prefect.server.api.server"


def temporary_servers() -> set[int]:
    """The running servers Prefect started for want of an API (ids), read from the class's
    own registry; nothing is imported that the test did not import."""
    module = sys.modules.get(SERVER_MODULE)
    if module is None:
        return set()
    return {id(server) for server in module.SubprocessASGIServer._instances.values()
            if getattr(server, "_instance_key", server.port) is None
            and getattr(server, "server_process", None) is not None}


@pytest.fixture(autouse=True)
def no_temporary_prefect_server(request: pytest.FixtureRequest) -> Iterator[None]:
    before = temporary_servers()
    yield
    if temporary_servers() - before and request.node.get_closest_marker("temporary_server") is None:
        pytest.fail("this test made Prefect start a temporary API server of its own (Prefect "
                    "code asked for an API with none configured): give it one (the prefect_api "
                    "fixture) or keep the code from asking outside a run", pytrace=False)
