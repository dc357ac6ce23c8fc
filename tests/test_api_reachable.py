"""A configured Prefect API is asked before a command runs anything (flows/console/interrupts.py)."""

from __future__ import annotations

import socket
from http.server import BaseHTTPRequestHandler

import pytest

from flows.console.interrupts import ApiUnreachable, require_reachable
from flows.console.output import render
from tests.support.local_http import serving


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_api_that_refuses_is_unreachable_with_the_fix_and_infrastructure() -> None:
    url = f"http://127.0.0.1:{_closed_port()}/api"
    with pytest.raises(ApiUnreachable) as caught:
        require_reachable(url, within_s=0)
    assert url in str(caught.value) and "Connection refused" in str(caught.value)
    assert "prefect server start" in str(caught.value)
    assert render(caught.value, None).startswith("[infrastructure] the Prefect API at")


@pytest.mark.parametrize(("status", "reachable"), [(200, True), (503, False)])
def test_only_a_healthy_answer_counts(status: int, reachable: bool) -> None:
    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status if self.path == "/api/health" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    with serving(Health) as base:
        url = f"{base}/api"
        if reachable:
            require_reachable(url, within_s=0)
        else:
            with pytest.raises(ApiUnreachable, match="answered /health with an error"):
                require_reachable(url, within_s=0)
