"""tpurl's own Prefect API server for one command (`tpurl run`, `tpurl teardown`): Prefect's
ephemeral server, launched the way prefect 3.9.1 launches it (prefect/server/api/server.py
``SubprocessASGIServer``: the same uvicorn command, environment, port range and
``/api/health`` check), with three differences, each for a reason:

- it runs in a session of its own with a parent-death signal, so a terminal's Ctrl-C does
  not kill it before the flow reports, and it never outlives the command
  (flows/console/interrupts.py);
- the CLI process does not import ``prefect.server.api.server``: that imports the whole
  server (FastAPI, SQLAlchemy, every router), about 6.5 s of CPU measured
  (benchmarks/rerun_overhead.py), in a process that only starts another and waits; and it
  launches before the CLI imports Prefect or the flow, which load while the server boots;
- its output goes to a file beside the command logs (``<cache>/logs/api-server-*.log``),
  not the user's terminal, where a database call it cancels at shutdown (under load) would
  print a traceback past the one-message diagnosis;
- ``SERVER_ENV``: block auto-registration imports every installed collection first
  (prefect-gcp's Google clients, prefect-kubernetes, prefect-docker: about 8 s of the
  server's CPU) to register block types; a block this pipeline saves registers its own type
  (``Block.save``), and a rerun reads none.

It depends on prefect 3.9.1's server entry point (pinned): re-check it on upgrade.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flows.common.paths import default_cache_dir
from flows.core.processes import die_with_parent

PORTS = range(8000, 9000)  # SubprocessASGIServer._port_range
PREFECT_SERVER_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
                      "PREFECT__SERVER_FINAL": "1"}  # SubprocessASGIServer._run_uvicorn_command
SERVER_ENV = {"PREFECT_API_BLOCKS_REGISTER_ON_START": "false",
              "PREFECT_MEMOIZE_BLOCK_AUTO_REGISTRATION": "false"}
PORT_IN_USE_EXIT = 3  # uvicorn's exit code when the port was taken meanwhile


class ApiServer:
    """One launched server: ``wait`` until healthy, ``stop`` when done."""

    def __init__(self, extra_env: dict[str, str] | None = None, port: int | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.extra_env = SERVER_ENV if extra_env is None else extra_env
        self.base_env = env  # the environment to start from (default: this process's)
        self.port = port or free_port()
        self.output_path = _output_path()
        self.process = self._launch()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def _launch(self) -> subprocess.Popen[bytes]:
        spec = importlib.util.find_spec("prefect")
        assert spec is not None and spec.origin is not None, "prefect is not installed"
        env = server_environment(os.environ if self.base_env is None else self.base_env,
                                 self.extra_env)
        output = _open_output(self.output_path)
        try:
            return self._popen(spec.origin, env, output)
        finally:
            if output is not None:
                output.close()  # the server holds its own copy of the descriptor

    def _popen(self, origin: str, env: dict[str, str], output: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(Path(origin).parent.parent),
             "--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1",
             "--port", str(self.port), "--log-level", "error", "--lifespan", "on"],
            env=env, start_new_session=True,  # no terminal signal reaches it
            preexec_fn=die_with_parent,  # and it never outlives this process
            stdout=output, stderr=subprocess.STDOUT if output is not None else None)

    def _where(self) -> str:
        return f" (the server's output: {self.output_path})" if self.output_path else ""

    def wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() == PORT_IN_USE_EXIT:
                self.port = free_port()
                self.process = self._launch()
                continue
            if self.process.poll() is not None:
                raise RuntimeError(f"tpurl's Prefect API server exited with code "
                                   f"{self.process.returncode} before it was healthy"
                                   f"{self._where()}")
            with contextlib.suppress(urllib.error.URLError, OSError), \
                    urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"tpurl's Prefect API server was not healthy within {timeout_s:.0f} "
                           f"s{self._where()}; set PREFECT_API_URL to a running server "
                           "(`prefect server start`) to use that instead")

    def stop(self) -> None:
        """SubprocessASGIServer.stop: terminate, then kill after 5 s."""
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def server_environment(environ: Mapping[str, str],
                       extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the server process gets: ``environ`` with Prefect's ephemeral settings and
    ``extra`` (default ``SERVER_ENV``), the Prefect settings set in this process (a test's
    or a profile's), and no PREFECT_API_URL (it is the API)."""
    env = {**environ, **PREFECT_SERVER_ENV, **(SERVER_ENV if extra is None else extra)}
    if (settings := sys.modules.get("prefect.settings")) is not None:  # set in-process
        env.update(settings.get_current_settings().to_environment_variables(exclude_unset=True))
    env.pop("PREFECT_API_URL", None)
    return env


def _output_path() -> Path | None:
    folder = default_cache_dir() / "logs"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder / f"api-server-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"


def _open_output(path: Path | None) -> Any:
    """The server's log, or None (it then writes to the terminal, as Prefect's does) when
    the file cannot be opened."""
    if path is None:
        return None
    try:
        return path.open("ab")
    except OSError:
        return None


def free_port() -> int:
    for _ in range(50):
        port = random.choice(PORTS)
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 8000-8999 for tpurl's Prefect API server")
