"""One retry policy and one answer to "is this failure worth another attempt?".

Why one module: four places decide what is an infrastructure fault (the Kubernetes API
calls, the registry, the bucket check, the log of a local program), and separate answers
drift (one retrying connection errors, another not; one waiting 1 s, one 2 s). Every caller
asks :func:`is_infrastructure_fault` and waits by a :class:`RetryPolicy`, so a change of what
counts as an infrastructure fault, or of the timings, is made here once.

What counts as an infrastructure fault (the word of the category it becomes,
``FailureCategory.INFRASTRUCTURE``): an answer that says "try later" (HTTP 429 and the 5xx of
an overloaded or rolling server), a connection dropped or refused, a timeout. Auth, naming and
validation errors are not: retrying them only hides the cause for minutes. The cloud client
libraries are optional dependencies, so their exception types are looked up lazily.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import import_module

# Prefect's delays between a stage task's retries (flows/pipeline.py's task options); the
# GKE plan counts them into each stage's worst-case wait, so they live where backends may read.
RETRY_DELAYS_S = [10, 60]
# HTTP statuses that mean "not now": rate limits and an overloaded or restarting server.
INFRASTRUCTURE_STATUS = frozenset({429, 500, 502, 503, 504})
# The Kubernetes client reports a connection-level failure as an ApiException with status 0.
_KUBE_INFRASTRUCTURE_STATUS = INFRASTRUCTURE_STATUS | {0}
# A registry behind the daemon answers 500 for its own auth errors too: the text decides those.
_DOCKER_INFRASTRUCTURE_STATUS = frozenset({429, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff: ``attempts`` tries in all, waiting base_s, base_s*factor, ...,
    each wait capped at ``max_s``. ``jitter`` (0..1) shortens each wait by up to that fraction
    at random, so many clients retrying one outage do not come back in step; 0 keeps the
    waits exact (the default, what tests and today's timings need)."""

    attempts: int = 5
    base_s: float = 1.0
    factor: float = 2.0
    max_s: float = 60.0
    jitter: float = 0.0

    def delay(self, failures: int, rng: Callable[[], float] = random.random) -> float:
        """The wait after ``failures`` consecutive failures (1 = the first); 0 counts as 1."""
        wait = min(self.base_s * self.factor ** max(0, failures - 1), self.max_s)
        return wait * (1.0 - self.jitter * rng()) if self.jitter else wait

    def delays(self) -> list[float]:
        """The waits between the attempts (one fewer than the attempts)."""
        return [self.delay(n) for n in range(1, self.attempts)]


# The policies in use, with the timings each loop had before they shared this module.
REGISTRY = RetryPolicy(attempts=5, base_s=2.0)      # a registry lookup or push: 2, 4, 8, 16 s


class InfrastructureFault(RuntimeError):
    """Raised inside a retried call to ask for another attempt (a failure that arrives as
    text, e.g. an error event in the daemon's push stream)."""


@cache
def _optional(module: str, name: str) -> type[BaseException] | None:
    """An exception type of an optional dependency, or None when it is not installed."""
    try:
        return getattr(import_module(module), name)
    except (ImportError, AttributeError):
        return None


def _is(exc: BaseException, module: str, name: str) -> bool:
    cls = _optional(module, name)
    return cls is not None and isinstance(exc, cls)


def is_infrastructure_fault(exc: BaseException) -> bool:
    """Pure: True when the same call may succeed on a later attempt."""
    if isinstance(exc, InfrastructureFault):
        return True
    if _is(exc, "kubernetes.client.exceptions", "ApiException"):
        return getattr(exc, "status", None) in _KUBE_INFRASTRUCTURE_STATUS
    if _is(exc, "docker.errors", "APIError"):  # before requests: APIError is a requests.HTTPError
        message = str(getattr(exc, "explanation", None) or exc)
        if _PERMANENT.search(message):
            return False
        return getattr(exc, "status_code", None) in _DOCKER_INFRASTRUCTURE_STATUS or \
            infrastructure_message(message)
    if _is(exc, "google.api_core.exceptions", "GoogleAPICallError"):
        return getattr(exc, "code", None) in INFRASTRUCTURE_STATUS
    if _is(exc, "requests.exceptions", "HTTPError"):
        response = getattr(exc, "response", None)
        return getattr(response, "status_code", None) in INFRASTRUCTURE_STATUS
    if _is(exc, "requests.exceptions", "ConnectionError") or \
            _is(exc, "requests.exceptions", "Timeout"):
        return not _PERMANENT.search(str(exc))
    if _is(exc, "urllib3.exceptions", "HTTPError"):  # protocol errors, read timeouts, max retries
        return True
    return isinstance(exc, ConnectionError | TimeoutError)


# Error texts of registries, as the daemon relays them (no types, only the message).
_INFRASTRUCTURE_TEXT = re.compile(
    r"\b(5\d\d|429)\b|too ?many ?requests|service unavailable|bad gateway|gateway time-?out|"
    r"internal server error|connection (refused|reset)|broken pipe|timed? ?out|timeout|"
    r"unexpected eof|\beof\b|i/o timeout|tls handshake|temporar",
    re.IGNORECASE)
_PERMANENT = re.compile(r"denied|unauthori[sz]ed|forbidden|\b40[134]\b|name unknown|"
                        r"manifest invalid|not found", re.IGNORECASE)


def infrastructure_message(message: str) -> bool:
    """Pure: True for an error text a later attempt may not see (permanent words win a tie)."""
    return bool(_INFRASTRUCTURE_TEXT.search(message)) and not _PERMANENT.search(message)


# The exception line that ends a program's traceback (local programs and pods): the names of
# the exceptions above as Python prints them, and gRPC's words for the same conditions.
_INFRASTRUCTURE_EXCEPTION_LINE = re.compile(
    r"(ConnectionError|ConnectionResetError|TimeoutError|ServiceUnavailable|TooManyRequests|"
    r"\b503\b|\b429\b|DEADLINE_EXCEEDED|UNAVAILABLE: |Temporary failure in name resolution)")


def infrastructure_exception_line(line: str) -> bool:
    """Pure: True when a program's last exception line names an infrastructure cause."""
    return bool(_INFRASTRUCTURE_EXCEPTION_LINE.search(line))


OnRetry = Callable[[int, str, float], None]  # (attempt that failed, message, wait seconds)


def describe(exc: BaseException) -> str:
    """A short text for a retry notice: the server's explanation when the error has one."""
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc) or type(exc).__name__


def call_with_retries[T](call: Callable[[], T], policy: RetryPolicy,
                         on_retry: OnRetry | None = None, *,
                         retryable: Callable[[BaseException], bool] = is_infrastructure_fault,
                         text: Callable[[BaseException], str] = describe,
                         sleep: Callable[[float], None] | None = None) -> T:
    """Run ``call``; on an infrastructure fault wait by ``policy`` and try again. A failure that
    is not one, or the last attempt's, is raised as it is: the caller says what it
    means (a StageFailed, a PushFailed, ...). ``text`` makes the retry notice's message;
    ``sleep`` defaults to ``time.sleep`` looked up at call time."""
    delays = policy.delays()
    for attempt in range(1, policy.attempts + 1):
        try:
            return call()
        except Exception as exc:
            if attempt > len(delays) or not retryable(exc):
                raise
            if on_retry is not None:
                on_retry(attempt, text(exc), delays[attempt - 1])
            (sleep or time.sleep)(delays[attempt - 1])
    raise AssertionError("unreachable")


# --- time-bounded retries ------------------------------------------------------------------

def retry_after_s(exc: BaseException) -> float | None:
    """Pure: the server's Retry-After (seconds) on an HTTP error, when it sent one.

    The Kubernetes API server answers 429 with ``Retry-After: 1`` from its max-in-flight and
    priority-and-fairness filters (k8s.io/apiserver pkg/server/filters/maxinflight.go,
    priority-and-fairness.go) and a 503 during a control-plane upgrade may carry one too;
    retrying sooner only adds to the overload. The kubernetes client keeps the response
    headers on ``ApiException.headers``; requests keeps them on ``response.headers``."""
    headers = getattr(exc, "headers", None)
    if headers is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        return None
    try:
        value = headers.get("Retry-After")
    except AttributeError:
        return None
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None  # an HTTP-date: rare from these servers; fall back to the policy


def call_within[T](call: Callable[[], T], policy: RetryPolicy, deadline: float,
                   on_retry: OnRetry | None = None, *,
                   retryable: Callable[[BaseException], bool] = is_infrastructure_fault,
                   text: Callable[[BaseException], str] = describe,
                   sleep: Callable[[float], None] | None = None,
                   clock: Callable[[], float] = time.monotonic) -> T:
    """Like :func:`call_with_retries`, but bounded by a wall-clock ``deadline`` (a ``clock()``
    value) instead of a count: a control-plane upgrade or a burst of 5xx lasts minutes, and a
    fixed five attempts (15 s) gave up before it ended. Each wait is the policy's, or the
    server's Retry-After when that is longer, and never runs past the deadline; the last
    failure is raised as it is when the next wait would. ``policy.attempts`` still caps the
    attempts when it is positive (0 = no cap)."""
    failures = 0
    while True:
        try:
            return call()
        except Exception as exc:
            failures += 1
            if not retryable(exc) or (policy.attempts and failures >= policy.attempts):
                raise
            wait = policy.delay(failures)
            if (hint := retry_after_s(exc)) is not None:
                wait = max(wait, hint)
            if clock() + wait > deadline:
                raise
            if on_retry is not None:
                on_retry(failures, text(exc), wait)
            (sleep or time.sleep)(wait)
