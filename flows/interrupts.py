"""How `tpurl run` stops: the first Ctrl-C (or SIGTERM) ends the run within seconds, with the
running program stopped, the profile's lock released, and a resumable state on disk.

Why this module exists: Prefect's ephemeral API server is a child in the CLI's process
group, so a terminal's Ctrl-C reached it too and it died first; the flow then could not
report its state, and kept running deaf to the signal. The CLI therefore starts that same
server (Prefect's SubprocessASGIServer) in a session of its own, bound to die with the CLI
(``die_with_parent``), and turns both signals into one exception it handles itself; a
background shell that started us with SIGINT ignored is overridden on purpose.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from flows.common.paths import default_cache_dir
from flows.core.processes import die_with_parent

EXIT_INTERRUPTED = 130


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, delivered as one exception so every cleanup path runs once."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


def install_handlers() -> None:
    """Ctrl-C and SIGTERM raise :class:`Interrupted` in the main thread. Prefect swaps its
    own SIGTERM handler in during a flow run and re-sends the signal here afterwards."""
    signal.signal(signal.SIGINT, _raise_interrupted)
    signal.signal(signal.SIGTERM, _raise_interrupted)


def _server_output() -> tuple[Any, Path | None]:
    """A file for the private API server's output beside the command logs, and its path:
    the server shares nothing with the terminal, where a database call it cancels at
    shutdown (under load) would print a traceback past the one-message diagnosis. (None,
    None) when no file can be opened: it then writes to the terminal, as Prefect's does."""
    folder = default_cache_dir() / "logs"
    path = folder / f"api-server-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return path.open("ab"), path
    except OSError:
        return None, None


@contextlib.contextmanager
def private_api(startup_timeout_s: int = 120) -> Iterator[str | None]:
    """A Prefect API for this CLI process only, unless one is configured (yields its URL,
    or None when PREFECT_API_URL already points at a server)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if PREFECT_API_URL.value():
        yield None
        return
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    popen = subprocess.Popen
    output, output_path = _server_output()

    def own_session(*args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
        kwargs.setdefault("start_new_session", True)  # no terminal signal reaches it
        kwargs.setdefault("preexec_fn", die_with_parent)  # and it never outlives us
        if output is not None:  # its own log, not the user's terminal
            kwargs.setdefault("stdout", output)
            kwargs.setdefault("stderr", subprocess.STDOUT)
        return popen(*args, **kwargs)

    try:
        with mock.patch.object(subprocess, "Popen", own_session):
            server.start(timeout=startup_timeout_s)
    except RuntimeError as exc:
        where = f" (the server's output: {output_path})" if output_path else ""
        raise RuntimeError(f"{exc}{where}") from exc
    finally:
        if output is not None:
            output.close()  # the server holds its own copy of the descriptor
    try:
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            os.environ["PREFECT_API_URL"] = server.api_url  # for child processes too
            yield server.api_url
    finally:
        # Logs and events still queued go out while the server listens; drained later (at
        # interpreter exit, Prefect's default) they would retry against a stopped server.
        with contextlib.suppress(Exception):
            from prefect.events.worker import EventsWorker
            from prefect.logging.handlers import APILogWorker

            APILogWorker.drain_all(timeout=5)
            EventsWorker.drain_all(timeout=5)
        os.environ.pop("PREFECT_API_URL", None)
        with contextlib.suppress(Exception):
            server.stop()
