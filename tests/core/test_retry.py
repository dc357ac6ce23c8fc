"""One retry policy and one infrastructure-fault classification, over the real exception types the
pipeline meets (kubernetes, urllib3, google.api_core, docker, requests, the builtins)."""

from __future__ import annotations

import pytest
import requests
import urllib3
from docker.errors import APIError
from google.api_core import exceptions as gexc
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError, ProtocolError, ReadTimeoutError

from flows.backends.gke.watch.stream import WatchSettings
from flows.core.retry import (
    REGISTRY,
    InfrastructureFault,
    RetryPolicy,
    call_with_retries,
    infrastructure_exception_line,
    infrastructure_message,
    is_infrastructure_fault,
)


def docker_error(status: int, explanation: str) -> APIError:
    response = requests.Response()
    response.status_code = status
    return APIError(f"{status} Server Error", response=response, explanation=explanation)


def http_error(status: int) -> requests.HTTPError:
    response = requests.Response()
    response.status_code = status
    return requests.HTTPError(f"{status}", response=response)


POOL = urllib3.HTTPConnectionPool("kube.example", 443)

TABLE: list[tuple[str, BaseException, bool]] = [
    # the Kubernetes API (status 0: the client's own connection-level failure)
    *[(f"ApiException {s}", ApiException(status=s, reason="r"), True)
      for s in (0, 429, 500, 502, 503, 504)],
    *[(f"ApiException {s}", ApiException(status=s, reason="r"), False)
      for s in (400, 401, 403, 404, 409, 422)],
    # urllib3, under the kubernetes client
    ("urllib3 ProtocolError", ProtocolError("Connection aborted.", ConnectionResetError(104)), True),
    ("urllib3 ReadTimeoutError", ReadTimeoutError(POOL, "/apis", "Read timed out."), True),
    ("urllib3 MaxRetryError", MaxRetryError(POOL, "/apis"), True),
    # google.api_core (GCS)
    *[(f"google {cls.__name__}", cls("x"), True) for cls in (
        gexc.TooManyRequests, gexc.InternalServerError, gexc.BadGateway, gexc.ServiceUnavailable,
        gexc.GatewayTimeout, gexc.DeadlineExceeded)],
    *[(f"google {cls.__name__}", cls("x"), False) for cls in (
        gexc.BadRequest, gexc.Unauthorized, gexc.Forbidden, gexc.NotFound, gexc.Conflict,
        gexc.PreconditionFailed)],
    # the Docker daemon, relaying its registry: the status, and for a 500 the text, decide
    ("docker 503", docker_error(503, ""), True),
    ("docker 429", docker_error(429, "toomanyrequests"), True),
    ("docker 500 refused", docker_error(500, 'Get "https://r/v2/": connection refused'), True),
    ("docker 500 registry 503", docker_error(500, "received unexpected HTTP status: 503"), True),
    ("docker 500 unauthorized", docker_error(500, "unauthorized: authentication required"), False),
    ("docker 502 denied", docker_error(502, "denied: requested access is denied"), False),
    ("docker 404", docker_error(404, "manifest unknown"), False),
    ("docker 400", docker_error(400, "invalid reference format"), False),
    # requests (docker-py's transport)
    ("requests ConnectionError", requests.ConnectionError("Connection aborted."), True),
    ("requests Timeout", requests.Timeout("read timed out"), True),
    ("requests HTTPError 503", http_error(503), True),
    ("requests HTTPError 403", http_error(403), False),
    # builtins and our own signal
    ("ConnectionResetError", ConnectionResetError(104, "Connection reset by peer"), True),
    ("ConnectionRefusedError", ConnectionRefusedError(111, "refused"), True),
    ("TimeoutError", TimeoutError("timed out"), True),
    ("InfrastructureFault", InfrastructureFault("the push stream ended without a digest"), True),
    ("ValueError", ValueError("num_generations must be > 1"), False),
    ("RuntimeError naming 503", RuntimeError("503"), False),  # no text sniffing of our own
    ("KeyError", KeyError("image"), False),
    ("FileNotFoundError", FileNotFoundError("/x"), False),
]


@pytest.mark.parametrize(("exc", "expected"), [(e, t) for _, e, t in TABLE],
                         ids=[name for name, _, _ in TABLE])
def test_is_infrastructure_fault(exc: BaseException, expected: bool):
    assert is_infrastructure_fault(exc) is expected


@pytest.mark.parametrize(("message", "expected"), [
    ("received unexpected HTTP status: 503 Service Unavailable", True),
    ('Get "http://127.0.0.1:5001/v2/": dial tcp 127.0.0.1:5001: connect: connection refused', True),
    ("toomanyrequests: quota exceeded", True),
    ("net/http: TLS handshake timeout", True),
    ("unauthorized: authentication required", False),
    ("denied: Permission 'artifactregistry.repositories.uploadArtifacts' denied", False),
    ("name unknown: repository not found", False),
])
def test_registry_messages(message: str, expected: bool):
    assert infrastructure_message(message) is expected


@pytest.mark.parametrize(("line", "expected"), [
    ("google.api_core.exceptions.ServiceUnavailable: 503 GET https://storage...", True),
    ("ConnectionResetError: [Errno 104] Connection reset by peer", True),
    ("jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: socket closed", True),
    ("ValueError: num_generations must be > 1", False),
])
def test_program_exception_lines(line: str, expected: bool):
    assert infrastructure_exception_line(line) is expected


def test_policy_delays_keep_each_loops_timings():
    assert REGISTRY.delays() == [2, 4, 8, 16]  # image lookups and push, as before
    assert RetryPolicy(attempts=4, base_s=1, factor=3).delays() == [1, 3, 9]
    assert RetryPolicy(attempts=4, base_s=1, max_s=1.5).delays() == [1, 1.5, 1.5]
    assert RetryPolicy(attempts=1).delays() == []
    assert RetryPolicy(base_s=2).delay(0) == RetryPolicy(base_s=2).delay(1) == 2


def test_jitter_only_shortens_waits():
    policy = RetryPolicy(base_s=4, jitter=0.5)
    assert policy.delay(1, rng=lambda: 0.0) == 4
    assert policy.delay(1, rng=lambda: 1.0) == 2
    assert all(2 <= d <= w for d, w in zip(policy.delays(), [4, 8, 16, 32], strict=True))


def test_watch_reconnect_backoff_is_the_policy_with_its_old_formula():
    s = WatchSettings(backoff_s=1.0, backoff_cap_s=30.0)
    for errors in range(12):
        assert s.backoff(errors) == min(30.0, 1.0 * 2 ** max(0, errors - 1))


def test_retries_infrastructure_faults_by_the_policy_then_succeeds():
    waits: list[float] = []
    notices: list[tuple[int, str, float]] = []
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ApiException(status=503, reason="Service Unavailable")
        return "ok"

    result = call_with_retries(flaky, RetryPolicy(attempts=4, base_s=1, factor=3),
                               lambda *n: notices.append(n), text=lambda e: "503",
                               sleep=waits.append)
    assert result == "ok" and waits == [1, 3]
    assert notices == [(1, "503", 1), (2, "503", 3)]


def test_gives_up_with_the_last_error_and_never_retries_a_permanent_one():
    waits: list[float] = []

    def down() -> str:
        raise InfrastructureFault("503")

    with pytest.raises(InfrastructureFault):
        call_with_retries(down, RetryPolicy(attempts=3, base_s=1, max_s=1.5), sleep=waits.append)
    assert waits == [1, 1.5]

    calls: list[int] = []

    def refused() -> str:
        calls.append(1)
        raise ApiException(status=403, reason="Forbidden")

    with pytest.raises(ApiException):
        call_with_retries(refused, RetryPolicy(attempts=5), sleep=waits.append)
    assert calls == [1] and waits == [1, 1.5]
