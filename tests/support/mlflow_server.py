"""A real ``mlflow server`` (SQLite backend, artifacts proxied to a local directory) on a
free loopback port, started and stopped by the tests that use it.

Its background job runner (huey consumers for MLflow's GenAI jobs) is switched off with
MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false (mlflow/server/__init__.py): nine processes the
tests never use. The server runs in its own process group, stopped as a whole.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.net import free_port

START_TIMEOUT_S = 180.0


@dataclass
class MlflowServer:
    """One server's files and address; ``stop``/``start`` keep the database, as a server
    restarted by its operators would."""

    root: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        log = (self.root / "server.log").open("ab")
        self.process = subprocess.Popen(
            [str(Path(sys.executable).with_name("mlflow")), "server", "--backend-store-uri",
             f"sqlite:///{self.root / 'mlflow.db'}", "--artifacts-destination",
             str(self.root / "artifacts"), "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1"], stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {(self.root / 'server.log').read_text()[-2000:]}")
            if self.answers():
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"mlflow server did not answer in {START_TIMEOUT_S} s")

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None


@pytest.fixture(scope="session")  # one server for every module that asks (a start is ~1 min)
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"), free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()
