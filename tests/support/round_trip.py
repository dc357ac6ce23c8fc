"""How late an HTTP round trip inside this process comes back right now, measured while a
test runs.

Why: a test that runs a fake API server, the code under test and their threads in one
process sees every answer delayed by the machine's load (the GIL and the CPU shared with
CI's other lanes). On a quiet machine a round trip takes milliseconds; a CI run on a loaded
2-core machine saw the fake Kubernetes API time out reads after 5 s. A watch cannot report
a change sooner than the API answers, so a test comparing what a watcher saw with what
happened may allow for the worst round trip measured during it. The probe talks to a server
of its own, so it takes nothing from the fake's injected faults (a 5xx burst is taken by
whichever request comes next).

A round trip made every few tenths of a second misses a stall that falls between two
trips: a collection of a large heap or the process descheduled holds every thread, the
watcher's included, for a moment no trip spans. So a second thread wakes every
``tick_s`` and counts how late it woke: a stall of any length shows up, less one tick."""

from __future__ import annotations

import http.client
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


class _NoContent(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


class RoundTripProbe:
    """``with RoundTripProbe() as probe: ...`` then ``probe.worst_s``: the slowest of the
    round trips made every ``every_s`` meanwhile (a request still unanswered at the end
    counts for as long as it has waited), or the latest a thread woke after a ``tick_s``
    sleep (``late_s``), whichever is more."""

    def __init__(self, every_s: float = 0.2, tick_s: float = 0.02) -> None:
        self.every_s, self.tick_s = every_s, tick_s
        self.worst_s = 0.0
        self.late_s = 0.0
        self.trips = 0
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _NoContent)
        self._server.daemon_threads = True
        self._serving = threading.Thread(target=self._server.serve_forever, daemon=True,
                                         name="round-trip-server")
        self._probing = threading.Thread(target=self._probe, daemon=True,
                                         name="round-trip-probe")
        self._timing = threading.Thread(target=self._keep_time, daemon=True,
                                        name="round-trip-lateness")
        self._pending_since: float | None = None

    def __enter__(self) -> RoundTripProbe:
        self._serving.start()
        self._probing.start()
        self._timing.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._stop.set()
        if (since := self._pending_since) is not None:
            self.worst_s = max(self.worst_s, time.monotonic() - since)
        self._probing.join(5)
        self._timing.join(5)
        self.worst_s = max(self.worst_s, self.late_s)
        self._server.shutdown()
        self._server.server_close()

    def _keep_time(self) -> None:
        due = time.monotonic() + self.tick_s
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            woke = time.monotonic()
            self.late_s = max(self.late_s, woke - due)
            due = woke + self.tick_s

    def _probe(self) -> None:
        host, port = self._server.server_address[:2]
        while not self._stop.wait(self.every_s):
            connection = http.client.HTTPConnection(str(host), int(port), timeout=60)
            self._pending_since = started = time.monotonic()
            try:
                connection.request("GET", "/")
                connection.getresponse().read()
            except OSError:
                pass  # a refused or dropped trip still took this long
            finally:
                connection.close()
                self._pending_since = None
            self.worst_s = max(self.worst_s, time.monotonic() - started)
            self.trips += 1
