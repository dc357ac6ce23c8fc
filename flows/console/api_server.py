"""tpurl's own Prefect API server for one command (`tpurl run`, `tpurl teardown`): Prefect's
ephemeral server, launched the way prefect 3.9.1 launches it (prefect/server/api/server.py
``SubprocessASGIServer``: the same uvicorn command, environment and ``/api/health`` check),
with these differences, each for a reason:

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

Who may use it: only the user who started it (docs/decisions/0020-private-api-access.md).

- The CLI binds the listening socket itself (127.0.0.1, a port the kernel picks) and hands
  it to uvicorn (``--fd``), keeping its own copy open: from the bind to the command's end no
  other process can listen on that port, so nothing the CLI sends can reach an impostor.
- Every request but ``GET /api/health`` needs a random per-server auth string (prefect's
  ``PREFECT_SERVER_API_AUTH_STRING``, checked by prefect/server/api/server.py
  ``create_api_app``'s ``token_validation`` middleware for every HTTP route, and by
  prefect/server/utilities/subscriptions.py ``accept_prefect_socket`` for the events and
  logs websockets). It travels to the server and to the CLI's children by environment, never
  by argv (``/proc/PID/environ`` is readable by the same user only; argv by everyone).
- CORS answers only the server's own origin (``PREFECT_SERVER_CORS_ALLOWED_ORIGINS``;
  prefect's default ``*`` let any web page read the answers).

It depends on prefect 3.9.1's server entry point (pinned): re-check it on upgrade.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
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

PREFECT_SERVER_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
                      "PREFECT__SERVER_FINAL": "1"}  # SubprocessASGIServer._run_uvicorn_command
SERVER_ENV = {"PREFECT_API_BLOCKS_REGISTER_ON_START": "false",
              "PREFECT_MEMOIZE_BLOCK_AUTO_REGISTRATION": "false"}
SERVER_AUTH_ENV = "PREFECT_SERVER_API_AUTH_STRING"  # what the server requires
CLIENT_AUTH_ENV = "PREFECT_API_AUTH_STRING"  # what prefect's clients send (Basic auth)
CORS_ENV = "PREFECT_SERVER_CORS_ALLOWED_ORIGINS"


def new_auth_string() -> str:
    """A per-server secret: 256 random bits, URL-safe (it goes into a Basic auth header)."""
    return secrets.token_urlsafe(32)


def listening_socket() -> socket.socket:
    """A TCP socket listening on 127.0.0.1 at a port the kernel picks: bound here, before any
    server starts, so no other process can be listening there while this one is open."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def client_environment(api_url: str, auth_string: str) -> dict[str, str]:
    """The settings a prefect client needs to use this server (for this process and the
    processes it starts)."""
    return {"PREFECT_API_URL": api_url, CLIENT_AUTH_ENV: auth_string}


class ApiServer:
    """One launched server on ``sock`` (default: a socket of its own), requiring
    ``auth_string`` (default: a new one): ``wait`` until healthy, ``stop`` when done."""

    def __init__(self, extra_env: dict[str, str] | None = None,
                 env: dict[str, str] | None = None, sock: socket.socket | None = None,
                 auth_string: str | None = None) -> None:
        self.extra_env = SERVER_ENV if extra_env is None else extra_env
        self.base_env = env  # the environment to start from (default: this process's)
        self.socket = sock or listening_socket()
        self.port = int(self.socket.getsockname()[1])
        self.auth_string = auth_string or new_auth_string()
        self.output_path = _output_path()
        self.process = self._launch()

    def __repr__(self) -> str:  # never the auth string
        return f"ApiServer({self.api_url}, pid {self.process.pid})"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def client_env(self) -> dict[str, str]:
        return client_environment(self.api_url, self.auth_string)

    def _launch(self) -> subprocess.Popen[bytes]:
        spec = importlib.util.find_spec("prefect")
        assert spec is not None and spec.origin is not None, "prefect is not installed"
        env = server_environment(os.environ if self.base_env is None else self.base_env,
                                 self.extra_env)
        env.update({SERVER_AUTH_ENV: self.auth_string,
                    CORS_ENV: f"http://127.0.0.1:{self.port}"})
        output = _open_output(self.output_path)
        try:
            return self._popen(spec.origin, env, output)
        finally:
            if output is not None:
                output.close()  # the server holds its own copy of the descriptor

    def _popen(self, origin: str, env: dict[str, str], output: Any) -> subprocess.Popen[bytes]:
        fd = self.socket.fileno()
        return subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(Path(origin).parent.parent),
             "--factory", "prefect.server.api.server:create_app", "--fd", str(fd),
             "--log-level", "error", "--lifespan", "on"],
            env=env, pass_fds=(fd,), start_new_session=True,  # no terminal signal reaches it
            preexec_fn=die_with_parent,  # and it never outlives this process
            stdout=output, stderr=subprocess.STDOUT if output is not None else None)

    def _where(self) -> str:
        return f" (the server's output: {self.output_path})" if self.output_path else ""

    def wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
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
        """SubprocessASGIServer.stop: terminate, then kill after 5 s; then the port goes."""
        try:
            if self.process.poll() is not None:
                return
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        finally:
            self.socket.close()


def server_environment(environ: Mapping[str, str],
                       extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the server process gets: ``environ`` with Prefect's ephemeral settings and
    ``extra`` (default ``SERVER_ENV``), the Prefect settings set in this process (a test's
    or a profile's), and no client settings (it is the API; its auth string is its own)."""
    env = {**environ, **PREFECT_SERVER_ENV, **(SERVER_ENV if extra is None else extra)}
    if (settings := sys.modules.get("prefect.settings")) is not None:  # set in-process
        env.update(settings.get_current_settings().to_environment_variables(exclude_unset=True))
    for name in ("PREFECT_API_URL", CLIENT_AUTH_ENV, SERVER_AUTH_ENV, CORS_ENV):
        env.pop(name, None)
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
