"""A real `prefect server start` on 127.0.0.1 for the deployment tests, plus its CLI."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from flows.common.paths import REPO_ROOT
from flows.console.api_server import SERVER_ENV
from tests.support.net import free_port
from tests.support.prefect_database import PREFECT, seed_home

RETRYABLE = frozenset({408, 429, 502, 503})


@dataclass
class PrefectServer:
    url: str
    env: dict[str, str]

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PREFECT, *args], cwd=REPO_ROOT, env=self.env, text=True,
                              capture_output=True, timeout=timeout, check=False)

    def api(self, method: str, path: str, **kwargs) -> httpx.Response:
        """One API call, retried as Prefect's own client retries it: the server answers 503
        for an error a client can retry (prefect 3.9.1 server/api/server.py
        ``custom_internal_exception_handler``: a SQLite database busy under load), and
        client/base.py ``send`` retries 408, 429, 502 and 503 with exponential backoff,
        honouring Retry-After (PREFECT_CLIENT_MAX_RETRIES, 5 by default)."""
        for attempt in range(6):
            response = httpx.request(method, f"{self.url}{path}", timeout=30, **kwargs)
            if response.status_code not in RETRYABLE or attempt == 5:
                break
            time.sleep(float(response.headers.get("Retry-After") or 2 ** attempt))
        response.raise_for_status()
        return response

    def create_pool(self, name: str, kind: str,
                    template: Path | dict[str, Any] | None = None) -> dict[str, Any]:
        """The work pool `prefect work-pool create NAME --type KIND [--base-job-template
        TEMPLATE]` creates (prefect 3.9.1 cli/work_pool.py ``create``: the file's JSON, else
        the worker type's default template, posted as a ``WorkPoolCreate``), created through
        the API: the CLI first imports every installed worker collection to list the types
        (prefect-kubernetes, prefect-gcp with pandas: 8 CPU-s a call). The docs' own
        `work-pool create` commands run as written in the tests that run the docs' blocks."""
        if isinstance(template, dict):  # a template the test built
            base = template
        elif template is not None:
            base = json.loads(template.read_text())
        elif kind == "process":
            from prefect.workers.process import ProcessWorker

            base = ProcessWorker.get_default_base_job_template()
        else:
            raise ValueError(f"no default template known here for a {kind!r} pool")
        return self.api("POST", "/work_pools/", json={
            "name": name, "type": kind, "base_job_template": base}).json()


# Prefect's own polling, shortened for the e2e deployment tests' workers (their env is
# the server's): a worker looks for scheduled runs every PREFECT_WORKER_QUERY_SECONDS (10 by
# default; each run the announcements test waits for is picked up by one), and a run the
# deployment's ENQUEUE limit turns back is scheduled again after the server's
# concurrency_slot_wait_seconds (30 by default: the follow-up's start after the first run
# ends). Both are waits Prefect honours as set; what the runs do and decide is unchanged.
QUICK_POLLING = {"PREFECT_WORKER_QUERY_SECONDS": "2",
                 "PREFECT_SERVER_DEPLOYMENTS_CONCURRENCY_SLOT_WAIT_SECONDS": "5"}


# prefect 3.9.1 server/api/server.py add_block_types, and its memo, which imports every
# collection before it looks whether registration is on: `tpurl run`'s own server's settings
SKIP_BLOCK_REGISTRATION = dict(SERVER_ENV)


@contextlib.contextmanager
def prefect_server_in(home: Path, port: int | None = None,
                      settings: dict[str, str] | None = None) -> Iterator[PrefectServer]:
    """A server with its own PREFECT_HOME, healthy before it is handed out (the same
    ``home`` and ``port`` again: the same API restarted). A fresh home starts with a migrated
    database (tests/support/prefect_database.py).

    Block types are not auto-registered at start-up (``SKIP_BLOCK_REGISTRATION``): that
    imports every installed collection first (prefect-gcp's Google clients,
    prefect-kubernetes, prefect-docker), half of a start's CPU. A user's server registers
    them; the pipeline relies on none being there: each block it or a test saves registers
    its own type (``Block.save``), which these servers then prove."""
    seed_home(home)
    port = port or free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update({"PREFECT_HOME": str(home), "PREFECT_API_URL": url,
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "true",
                "PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_SERVER_API_PORT": str(port),
                **SKIP_BLOCK_REGISTRATION})
    env.update(settings or {})
    log = open(home / "server.log", "a")  # noqa: SIM115 - closed at teardown
    server = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port",
                               str(port)], env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    deadline = time.monotonic() + 600  # a fresh database is migrated: minutes under load
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if server.poll() is not None:
            raise RuntimeError((home / "server.log").read_text()[-3000:])
        time.sleep(0.5)
    else:
        server.kill()
        raise RuntimeError("prefect server did not become healthy in 600 s")
    try:
        yield PrefectServer(url=url, env=env)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@contextlib.contextmanager
def server_at_or_in(url: str | None, home: Path) -> Iterator[PrefectServer]:
    """The running API at ``url`` when one is given (a test session's, shared: no start to
    pay), else a new server in ``home`` (``prefect_server_in``)."""
    if not url:
        with prefect_server_in(home) as server:
            yield server
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update({"PREFECT_HOME": str(home), "PREFECT_API_URL": url,
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    yield PrefectServer(url=url, env=env)


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll the API-backed ``predicate`` each second until it returns something truthy (the
    server applies states and events asynchronously); that value, or an AssertionError
    naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
