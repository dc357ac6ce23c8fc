"""How `tpurl run` stops: the first Ctrl-C (or SIGTERM) ends the run within seconds, with the
running program stopped, the profile's lock released, and a resumable state on disk.

Why this module exists: Prefect's ephemeral API server is a child in the CLI's process
group, so a terminal's Ctrl-C reached it too and it died first; the flow then could not
report its state, and kept running deaf to the signal. The CLI therefore starts that same
server (Prefect's ephemeral server, launched as its SubprocessASGIServer does:
flows/console/api_server.py) in a session of its own, bound to die with the CLI
(``die_with_parent``), and turns both signals into one exception it handles itself; a
background shell that started us with SIGINT ignored is overridden on purpose.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

from flows.console.api_server import ApiServer
from flows.console.kept_api import KEEP_ENV, KeptServerBusy, Lease, acquire, keep_seconds, stop_keeper

CLIENT_SETTINGS = ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING")  # what a private API sets

EXIT_INTERRUPTED = 130


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, delivered as one exception so every cleanup path runs once."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_RECEIVED: list[int] = []  # the signals this process was stopped by, in order


def _raise_interrupted(signum: int, frame: Any) -> None:
    _RECEIVED.append(signum)
    raise Interrupted(signum)


def received_signal() -> int | None:
    """The first SIGINT/SIGTERM this process received, if any. An interruption can surface
    as another exception (one that landed inside threading's lock juggling comes out as
    its RuntimeError, the interrupt as its context): the CLI still reports a stop."""
    return _RECEIVED[0] if _RECEIVED else None


def install_handlers() -> None:
    """Ctrl-C and SIGTERM raise :class:`Interrupted` in the main thread. Prefect swaps its
    own SIGTERM handler in during a flow run and re-sends the signal here afterwards."""
    signal.signal(signal.SIGINT, _raise_interrupted)
    signal.signal(signal.SIGTERM, _raise_interrupted)


class ApiUnreachable(RuntimeError):
    """The configured Prefect API does not answer: nothing ran. Not a bug of ours, and not
    the profile's: the URL, or the server behind it."""


def require_reachable(url: str, within_s: float = 15.0) -> None:
    """Ask the configured API's /health before anything runs (Prefect itself would fail the
    flow's start with 'Failed to reach API', which read as an internal error)."""
    import time

    import httpx

    deadline, problem = time.monotonic() + within_s, "no answer"
    while True:
        try:
            if httpx.get(f"{url.rstrip('/')}/health", timeout=5.0).status_code == 200:
                return
            problem = "it answered /health with an error"
        except httpx.HTTPError as exc:
            problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    raise ApiUnreachable(
        f"the Prefect API at {url} (PREFECT_API_URL) does not answer ({problem}); nothing "
        "ran.\n  fix: start that server (`prefect server start`) or correct the URL; or unset "
        "PREFECT_API_URL (`prefect config unset PREFECT_API_URL` if your Prefect profile sets "
        "it) and tpurl starts a private API for the command")


@contextlib.contextmanager
def private_api(startup_timeout_s: int = 120,
                while_starting: Callable[[], object] | None = None) -> Iterator[str | None]:
    """A Prefect API for this CLI process only, unless one is configured (yields its URL,
    or None when PREFECT_API_URL already points at a server).

    The server is launched before Prefect is imported here, and ``while_starting``
    (importing the flow) runs while it boots in its own process, so a rerun pays the longer
    of the two, not their sum (flows/console/api_server.py)."""
    server = None if os.environ.get("PREFECT_API_URL") else _own_server()
    try:
        from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

        if server is not None and PREFECT_API_URL.value():  # named in the Prefect profile
            _done_with(server, configured=True)
            server = None
        if server is None:  # a configured server: it must answer before anything runs
            require_reachable(str(os.environ.get("PREFECT_API_URL") or PREFECT_API_URL.value()))
        if while_starting is not None:
            while_starting()
        if server is None:
            yield None
            return
        server.wait(startup_timeout_s)
        if isinstance(server, Lease) and server.started_it:
            print(f"tpurl: started a Prefect API server at {server.api_url}, kept for the next "
                  f"commands until {server.state.keep_s:.0f} s unused (`tpurl api-server "
                  f"stop` stops it; unset {KEEP_ENV}: one per command)", file=sys.stderr)
        client = server.client_env  # the URL and this server's auth string
        with temporary_settings({PREFECT_API_URL: client["PREFECT_API_URL"],
                                 PREFECT_API_AUTH_STRING: client["PREFECT_API_AUTH_STRING"]}):
            os.environ.update(client)  # for child processes too (environment, never argv)
            yield server.api_url
    finally:
        if server is not None:
            # Logs and events still queued go out while the server listens; drained later
            # (at interpreter exit, Prefect's default) they would retry against a stopped
            # server.
            with contextlib.suppress(Exception):
                from prefect.events.worker import EventsWorker
                from prefect.logging.handlers import APILogWorker

                APILogWorker.drain_all(timeout=5)
                EventsWorker.drain_all(timeout=5)
            for name in CLIENT_SETTINGS:
                os.environ.pop(name, None)
            with contextlib.suppress(Exception):
                _done_with(server, configured=False)


def _own_server() -> ApiServer | Lease:
    """The kept server (flows/console/kept_api.py) when the user asked for one (started by
    `tpurl api-server start`, or TPURL_KEEP_API_S set: started now if none runs); else one
    for this command alone, which dies with it."""
    keep_s = keep_seconds(os.environ)
    try:
        lease = acquire(os.environ, keep_s, start=keep_s > 0)
    except KeptServerBusy as exc:  # never replaced under a running command
        print(f"tpurl: {exc}; this command starts a Prefect API server of its own",
              file=sys.stderr)
        return ApiServer()
    return lease if lease is not None else ApiServer()


def _done_with(server: ApiServer | Lease, configured: bool) -> None:
    """A command's own server stops with it; the kept one is released (and stopped only if
    this command started it for nothing: a server named in the Prefect profile won)."""
    if isinstance(server, ApiServer):
        server.stop()
        return
    server.release()
    if configured and server.started_it:
        stop_keeper(server.state.keeper)
