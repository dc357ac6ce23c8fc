"""A test's own request handler served on a free port of 127.0.0.1, for as long as a `with`
block. The tests that answer as a Google API, a metadata server, a release page or a health
check each started, threaded and stopped the same server inline, and two of them never closed
its socket."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextlib.contextmanager
def serving(handler: Callable[..., BaseHTTPRequestHandler]) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` while ``handler`` answers there; stopped and closed after."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
